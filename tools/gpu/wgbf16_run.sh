#!/usr/bin/env bash
# The BF16 wgmma GEMM on the GPU machine in one call: moe and gemm checks (harness), the precision bench
# (bench/gemm_precision.cu, FP8 and FP4), then the MoE layer at T 512 / 2048 (auto, E4M3 wgmma, BF16 wgmma).
#   bash tools/gpu/wgbf16_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p build/gpu
( $NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude \
    bench/gemm_precision.cu -o build/gpu/gemm_precision > build/gpu/gemm_precision.log 2>&1 ) &
pp=$!
OPS="gemm moe" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "moe|gemm|checks:|harness:|FAIL|ERROR|error" | cut -c1-600
wait $pp || cat build/gpu/gemm_precision.log
for f in 8 4; do timeout 120 build/gpu/gemm_precision 200 $f; done
timeout 200 build/gpu/harness --bench-only --only=moe --moe-t=512,2048 2>&1 | grep -E "moe|op " | cut -c1-300
