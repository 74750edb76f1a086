#!/usr/bin/env bash
# Session 17 run 1: the streaming decode kernel (kernels/gemm_stream.cuh): bench/gemm_stream.cu (register vs streaming,
# bit comparison), gemm and moe checks, goldens, the [gpu] suite; the stack builds in the background for run 2.
#   bash tools/gpu/stream_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p build/gpu
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bp=$!
( BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > build/stack_build.log 2>&1 ) &
sp=$!
$NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude bench/gemm_stream.cu \
  -lcublasLt -o build/gpu/gemm_stream > build/gpu/gemm_stream.log 2>&1 || cat build/gpu/gemm_stream.log
timeout 150 build/gpu/gemm_stream; echo "gemm_stream rc $?"
OPS="gemm moe" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "^moe|checks:|harness:|FAIL|ERROR|error" | cut -c1-420
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  timeout 200 bash tools/gpu/golden.sh $m --quick > build/golden_$(basename $m).log 2>&1; echo "golden $m rc $?"
done
wait $bp; tail -2 build/gpu_tests_build.log
timeout 240 build/gpu/tests/dsv41_gpu_tests "[gpu]" 2>&1 | grep -E "FAILED|failed|passed|REQUIRE|CHECK|with expansion" | head -20
wait $sp; tail -2 build/stack_build.log
