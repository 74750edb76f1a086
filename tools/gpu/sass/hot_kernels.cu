// Hot kernels instantiated for tools/gpu/sass_loops.py (compiled to a cubin only, never linked): the decode GEMMs, the
// indexer's scores, the FP8 GEMM at prefill.
//   python3 tools/gpu/sass_loops.py --cu tools/gpu/sass/hot_kernels.cu --blocks
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_stream.cuh>
#include <dsv41/backend/cuda/kernels/gemm_wgmma_bf16.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>

namespace dsv41::gpu::detail {
// The routed experts at decode: w1/w3 (SwiGLU) and w2, streaming (the default below 512 routed rows) and register.
template __global__ void stream_gemm_kernel<WFmt::FP4, true, 8>(const SkinnyParams);
template __global__ void stream_gemm_kernel<WFmt::FP4, false, 8>(const SkinnyParams);
template __global__ void skinny_gemm_kernel<WFmt::FP4, true, 2>(const SkinnyParams);
template __global__ void skinny_gemm_kernel<WFmt::FP4, false, 2>(const SkinnyParams);
// The BF16 wgmma kernel at 16-row tiles (MoeShape::w2_bf16, w13_split).
template __global__ void wgbf16_gemm_kernel<WFmt::FP4, true, 2, false>(const SkinnyParams);
template __global__ void wgbf16_gemm_kernel<WFmt::FP4, false, 2, false>(const SkinnyParams);
// The dense FP8 decode projections (register kernel, gemm_fp8's skinny path).
template __global__ void skinny_gemm_kernel<WFmt::FP8, false, 2>(const SkinnyParams);
// The shared expert (FP8 SwiGLU) at decode, register kernel.
template __global__ void skinny_gemm_kernel<WFmt::FP8, true, 2>(const SkinnyParams);
// The FP8 GEMM at prefill (the dense projections above 64 rows).
template __global__ void wide_gemm_fp8_kernel<0>(const uint8_t*, const uint8_t*, const uint8_t*, const uint8_t*, int,
                                                 int, int, bf16_t*, int64_t);
// The indexer's scores at the released shape (32 heads x 128: 2 head tiles, 4 K blocks).
template __global__ void index_score_kernel<2, 4>(const IndexScoreParams);
}  // namespace dsv41::gpu::detail
