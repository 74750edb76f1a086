#!/usr/bin/env bash
# Session 17 run 4: the streaming kernel as the decode default for the routed experts: gemm + moe checks, the
# released-width stack's decode step (auto against --moe-kernel registers, the same binary), goldens, [gpu] suite.
#   bash tools/gpu/stream_suite.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bp=$!
( BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > build/stack_build.log 2>&1 ) &
sp=$!
OPS="gemm moe" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "^moe .*T=(1|8) d=5120|checks:|harness:|FAIL|ERROR|error" | cut -c1-300
wait $sp; tail -1 build/stack_build.log
A=(--contexts 4096 --batches 1,8,64 --steps 10)
build/gpu/bench_layer_stack "${A[@]}" 2>&1 | grep -E "^\| [0-9]|MoE GEMMs|logits finite"
build/gpu/bench_layer_stack "${A[@]}" --moe-kernel registers 2>&1 | grep -E "^\| [0-9]|MoE GEMMs"
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  timeout 200 bash tools/gpu/golden.sh $m --quick > build/golden_$(basename $m).log 2>&1; echo "golden $m rc $?"
done
wait $bp; tail -2 build/gpu_tests_build.log
timeout 240 build/gpu/tests/dsv41_gpu_tests "[gpu]" 2>&1 | grep -E "FAILED|failed|passed|REQUIRE|CHECK|with expansion" | head -20
