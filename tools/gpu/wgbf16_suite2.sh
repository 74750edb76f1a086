#!/usr/bin/env bash
# Session 16 run 4: moe checks, goldens, [gpu] suite, stack prefill auto vs staged.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bp=$!
OPS="moe" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "^moe|checks:|harness:|FAIL|ERROR|error" | cut -c1-420
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  timeout 200 bash tools/gpu/golden.sh $m --quick > build/golden_$(basename $m).log 2>&1; echo "golden $m rc $?"
done
wait $bp; tail -2 build/gpu_tests_build.log
timeout 240 build/gpu/tests/dsv41_gpu_tests "[gpu]" 2>&1 | grep -E "FAILED|failed|passed|REQUIRE|CHECK|with expansion" | head -20
A=(--contexts "" --batches "" --prefill 512,2048,4096 --warmup 2 --steps 5)
bash tools/gpu/layer_stack.sh "${A[@]}" 2>&1 | grep -E "^\| [0-9]"
build/gpu/bench_layer_stack "${A[@]}" --moe-kernel staged 2>&1 | grep -E "^\| [0-9]|MoE GEMMs"
