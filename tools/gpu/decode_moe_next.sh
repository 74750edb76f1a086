#!/usr/bin/env bash
# Written in session 17, run in session 18 (run 1) when --fused-routing still turned the fused routing on; it is the
# default since, and --cub-routing turns it off.
#  1. bench/gemm_stream.cu `wg`: register, streaming (whole K, split 2 / 4) and BF16 wgmma on the routed decode GEMMs;
#  2. gemm + moe checks (check_moe variant 13: MoeShape::fused_routing must give the automatic output's bits);
#  3. the harness MoE layer at T = 1, 8, 64 (auto, fused routing, register, staged, wgmma, BF16 wgmma);
#  4. the stack decode at 4K, batch 1 / 8 / 64: auto against the other routing step (same binary, same run).
#   bash tools/gpu/decode_moe_next.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
( BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > build/stack_build.log 2>&1 ) &
sp=$!
$NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude bench/gemm_stream.cu \
  -lcublasLt -o build/gpu/gemm_stream > build/gpu/gemm_stream.log 2>&1 || cat build/gpu/gemm_stream.log
timeout 120 build/gpu/gemm_stream wg; echo "gemm_stream rc $?"
OPS="gemm moe" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "^moe .*T=(1|8) d=5120|checks:|harness:|FAIL|ERROR|error" | cut -c1-300
timeout 200 build/gpu/harness --bench-only --only=moe --moe-t=1,8,64 2>&1 | grep -E "moe layer|op " | cut -c1-300
wait $sp; tail -1 build/stack_build.log
A=(--contexts 4096 --batches 1,8,64 --steps 10)
build/gpu/bench_layer_stack "${A[@]}" 2>&1 | grep -E "^\| [0-9]"
build/gpu/bench_layer_stack "${A[@]}" --cub-routing 2>&1 | grep -E "^\| [0-9]|MoE routing"
