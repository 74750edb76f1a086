#!/usr/bin/env bash
# Written in session 18 for the next GPU run (not yet run; the device lent no machine after run 1): everything that
# session wrote without a GPU, checked (~6-7 minutes on a fresh machine); then tools/gpu/decode_graph_stack.sh at once.
#  1. [gpu] suite build in the background; gemm + moe + indexer checks (check_moe variant 14: MoeShape::w2_bf16
#     within the bound; variant 15: the shared expert on a second stream, the automatic bits; session 19's cuts of
#     the register kernel and the indexer scores, not yet run: check_moe's register = staged bits, exact indexer
#     scores; notes/gpu.md session 19);
#  2. the harness MoE layer at T = 1, 8, 64 (auto, w2 on BF16 wgmma, second stream, both, w1/w3 on BF16 wgmma over
#     1 / 2 / 4 K ranges); `build/gpu/gemm_stream wg` (the routed GEMMs alone, BF16 wgmma split 2 / 4 too);
#  3. the decode graph tests ([decode_graph]: replay across steps = eager decode bit for bit, refusals, second
#     stream), goldens, the whole [gpu] suite;
#   bash tools/gpu/decode_graph_run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bp=$!
( BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > build/stack_build.log 2>&1 ) &
sp=$!
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
( $NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude bench/gemm_stream.cu \
    -lcublasLt -o build/gpu/gemm_stream > build/gpu/gemm_stream.log 2>&1 ) &
gp=$!
OPS="gemm moe indexer" bash tools/gpu/run_all.sh --checks-only 2>&1 | grep -E "^moe .*T=(1|8) d=5120|checks:|harness:|FAIL|ERROR|error" | cut -c1-400
timeout 200 build/gpu/harness --bench-only --only=moe --moe-t=1,8,64 2>&1 | grep -E "moe layer" | cut -c1-260
wait $bp; tail -2 build/gpu_tests_build.log
timeout 120 build/gpu/tests/dsv41_gpu_tests "[decode_graph]" 2>&1 | tail -25
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  timeout 200 bash tools/gpu/golden.sh $m --quick > build/golden_$(basename $m).log 2>&1; echo "golden $m rc $?"
done
timeout 300 build/gpu/tests/dsv41_gpu_tests "[gpu]" 2>&1 | grep -E "FAILED|failed|passed|REQUIRE|CHECK|with expansion" | head -20
wait $gp; timeout 120 build/gpu/gemm_stream wg | grep -E "routed|equal|DIFFER$"  # BF16 wgmma split 2 / 4 rows too
wait $sp; tail -1 build/stack_build.log  # for tools/gpu/decode_graph_stack.sh on the same (warm) machine
