// SPEC §3.4 block-scaled GEMMs on the GPU: y[m, n] = Σ_k (q_x[m,k]·s_x[m,k/32]) · (q_w[n,k]·s_w[..]), FP32
// accumulation, BF16 out (or FP32). Activations come quantized (quant.cuh: E4M3 codes + UE8M0 per 32).
//
// Weights: FP8 = E4M3 [N, K] with UE8M0 per 32x32 block [N/32, K/32]; FP4 = packed E2M1 [N, K/2] with UE8M0
// per row and 32 inputs [N, K/32] (routed experts). E2M1 codes are widened to E4M3 in registers (exact).
//
// Tensor cores: mma.sync m16n8k32 E4M3 with C = 0 for each 32-wide K block (one scale block), then the
// partial sum is promoted into the FP32 accumulator times s_x·s_w (a power of two: exact). Products are
// exact; what differs from the CPU's sequential FP32 sum is the order, and the tensor core's own
// 32-term inner sum (Hopper keeps ~14 bits below the largest product's leading bit, truncating).
//
// Kernels:
//  - skinny (N % 16 == 0; M ≤ 64 rows per tile, "swapped": the weight rows are the mma's M side, the activation
//    rows its N side; grouped over a row-tile list for MoE; split-K): decode shapes and the MoE expert GEMMs,
//    in gemm_skinny.cuh; its math with the weights streamed through shared memory (gemm_stream.cuh: the decode
//    expert GEMMs, the same bits); staged / wgmma forms for prefill tiles (gemm_staged.cuh, gemm_wgmma_bf16.cuh);
//  - wide (128x128 CTA tile, 3-stage cp.async pipeline, ldmatrix, swizzled shared memory): prefill.
#pragma once
#include <algorithm>

#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/kernels/gemm_skinny.cuh>

namespace dsv41::gpu {

namespace detail {

// ---- wide FP8 kernel (prefill) ----
namespace wide {
constexpr int BM = 128, BN = 128, BK = 128, STAGES = 3, THREADS = 256;
constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK, SX_BYTES = BM * 4, SW_BYTES = (BN / 32) * 4;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES + SX_BYTES + SW_BYTES;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
}  // namespace wide

template <int = 0>
__global__ void __launch_bounds__(256) wide_gemm_fp8_kernel(const uint8_t* __restrict__ xc,
                                                            const uint8_t* __restrict__ xe,
                                                            const uint8_t* __restrict__ w,
                                                            const uint8_t* __restrict__ ws, int M, int N, int K,
                                                            bf16_t* __restrict__ y, int64_t ldy) {
  using namespace wide;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wm = warp >> 2, wn = warp & 3;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int nkb = K / 32, nsteps = K / BK;

  auto load_stage = [&](int stage, int step) {
    uint8_t* As = smem + stage * STAGE_BYTES;
    uint8_t* Bs = As + A_BYTES;
    uint8_t* SXs = Bs + B_BYTES;
    uint8_t* SWs = SXs + SX_BYTES;
    const int k0 = step * BK;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = tid + i * THREADS, r = c >> 3, ch = c & 7;
      const int gr = m0 + r;
      const bool ok = gr < M;
      cp_async16(As + r * 128 + ((ch ^ (r & 7)) << 4), xc + int64_t(ok ? gr : 0) * K + k0 + ch * 16, ok ? 16 : 0);
      cp_async16(Bs + r * 128 + ((ch ^ (r & 7)) << 4), w + int64_t(n0 + r) * K + k0 + ch * 16);
    }
    if (tid < BM) {
      const int gr = m0 + tid;
      if (gr < M) cp_async4(SXs + tid * 4, xe + int64_t(gr) * nkb + k0 / 32);
      else *reinterpret_cast<uint32_t*>(SXs + tid * 4) = 0x7F7F7F7Fu;
    } else if (tid < BM + BN / 32) {
      const int nb = tid - BM;
      cp_async4(SWs + nb * 4, ws + int64_t(n0 / 32 + nb) * nkb + k0 / 32);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nsteps) load_stage(s, s);
    cp_async_commit();
  }
  for (int step = 0; step < nsteps; ++step) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int nxt = step + STAGES - 1;
    if (nxt < nsteps) load_stage(nxt % STAGES, nxt);
    cp_async_commit();
    const uint8_t* As = smem + (step % STAGES) * STAGE_BYTES;
    const uint8_t* Bs = As + A_BYTES;
    const uint8_t* SXs = Bs + B_BYTES;
    const uint8_t* SWs = SXs + SX_BYTES;
#pragma unroll
    for (int s4 = 0; s4 < 4; ++s4) {
      // Each E4M3 mma as the two f16 mma sm_90 runs it as (mma_e4m3_zero_f16: the same bits through the fmaf into
      // accumulators that start at +0), every fragment widened once.
      uint32_t bl[4][2], bh[4][2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int mat = lane >> 3;
        const int nrow = wn * 32 + (2 * jj + (mat >> 1)) * 8 + (lane & 7);
        const int ch = 2 * s4 + (mat & 1);
        uint32_t r[4];
        ldmatrix_x4(r, Bs + nrow * 128 + ((ch ^ (nrow & 7)) << 4));
#pragma unroll
        for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(r[q], bl[2 * jj + (q >> 1)][q & 1], bh[2 * jj + (q >> 1)][q & 1]);
      }
      const float sw = ue8m0_f(SWs[wn * 4 + s4]);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int rbase = wm * 64 + mi * 16;
        const int mrow = rbase + (lane & 7) + 8 * ((lane >> 3) & 1);
        const int ch = 2 * s4 + (lane >> 4);
        uint32_t a[4], al[4], ah[4];
        ldmatrix_x4(a, As + mrow * 128 + ((ch ^ (mrow & 7)) << 4));
#pragma unroll
        for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(a[q], al[q], ah[q]);
        const float slo = ue8m0_f(SXs[(rbase + g) * 4 + s4]) * sw;
        const float shi = ue8m0_f(SXs[(rbase + g + 8) * 4 + s4]) * sw;
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
          float part[4];
          mma_e4m3_zero_f16(part, al, ah, bl[nj], bh[nj]);
          acc[mi][nj][0] = fmaf(part[0], slo, acc[mi][nj][0]);
          acc[mi][nj][1] = fmaf(part[1], slo, acc[mi][nj][1]);
          acc[mi][nj][2] = fmaf(part[2], shi, acc[mi][nj][2]);
          acc[mi][nj][3] = fmaf(part[3], shi, acc[mi][nj][3]);
        }
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int nj = 0; nj < 4; ++nj) {
      const int r = m0 + wm * 64 + mi * 16 + g;
      const int c = n0 + wn * 32 + nj * 8 + 2 * t;
      if (r < M) *reinterpret_cast<uint32_t*>(y + int64_t(r) * ldy + c) = pack_bf16x2(acc[mi][nj][0], acc[mi][nj][1]);
      if (r + 8 < M)
        *reinterpret_cast<uint32_t*>(y + int64_t(r + 8) * ldy + c) = pack_bf16x2(acc[mi][nj][2], acc[mi][nj][3]);
    }
}

// ---- BF16 weights (gate, indexer weights_proj): skinny, m16n8k16 BF16 mma, FP32 accumulate ----
// x BF16 [M, K] (activation row stride K), W BF16 [N, K]; out FP32 or BF16 (split-K partials as above).
template <int = 0>
__global__ void __launch_bounds__(128) skinny_bf16_kernel(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w,
                                                          int M, int N, int K, float* __restrict__ partial, int ksplit,
                                                          float* __restrict__ yf, bf16_t* __restrict__ yb, int64_t ldy) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.y * 64, rows = min(64, M - row0);
  const int n0 = blockIdx.x * 64 + warp * 16;
  if (n0 >= N) return;  // N % 16 == 0: whole warps drop out
  const int nkb = K / 32, kb_per = (nkb + ksplit - 1) / ksplit;
  const int kb0 = blockIdx.z * kb_per, kb1 = min(nkb, kb0 + kb_per);
  const int nt = (rows + 7) / 8;
  const bf16_t* wg = w + int64_t(n0 + g) * K;
  const bf16_t* wg8 = wg + 8 * int64_t(K);
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = 0.f;
  for (int kb = kb0; kb < kb1; ++kb) {
    const uint4 r0 = __ldg(reinterpret_cast<const uint4*>(wg + kb * 32 + 8 * t));
    const uint4 r1 = __ldg(reinterpret_cast<const uint4*>(wg8 + kb * 32 + 8 * t));
    const uint32_t a0[4] = {r0.x, r1.x, r0.y, r1.y}, a1[4] = {r0.z, r1.z, r0.w, r1.w};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (j < nt) {
        const int xr = row0 + min(8 * j + g, rows - 1);
        const uint4 b = __ldg(reinterpret_cast<const uint4*>(x + int64_t(xr) * K + kb * 32 + 8 * t));
        mma_bf16(acc[j], a0, b.x, b.y);
        mma_bf16(acc[j], a1, b.z, b.w);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if (j >= nt) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = 8 * j + 2 * t + (c & 1);
      if (r >= rows) continue;
      const int64_t pr = row0 + r;
      const int n = n0 + g + 8 * (c >> 1);
      if (ksplit > 1) partial[(int64_t(blockIdx.z) * M + pr) * N + n] = acc[j][c];
      else if (yf) yf[pr * ldy + n] = acc[j][c];
      else yb[pr * ldy + n] = __float2bfloat16_rn(acc[j][c]);
    }
  }
}

// Split so that the grid has about two waves of 132 SMs, each split at least 4 K blocks.
inline int choose_ksplit(int blocks, int nkb) {
  int ks = 1;
  while (blocks * ks < 264 && nkb / (ks * 2) >= 4) ks *= 2;
  return ks;
}

}  // namespace detail

// ---------------- launchers ----------------

namespace detail {
// Split-K factor of the skinny kernel at this shape (1 above 64 rows).
inline int skinny_ksplit(int M, int N, int K) {
  if (M > 64) return 1;
  return choose_ksplit(ceil_div(N, 64) * ceil_div(M, 16), K / 32);
}
}  // namespace detail

// FP32 workspace (bytes) that gemm_fp8 / gemm_bf16 may use for split-K at this shape.
inline size_t gemm_workspace_bytes(int M, int N, int K) {
  const int ks = std::max(detail::skinny_ksplit(M, N, K),
                          M > 64 ? 1 : detail::choose_ksplit(ceil_div(N, 64) * ceil_div(M, 64), K / 32));
  return ks > 1 ? size_t(ks) * M * N * sizeof(float) : 0;
}

// y = SwiGLU of the split-K partials written by gemm_skinny<F, true> (see swiglu_reduce_kernel).
inline Status swiglu_splitk_reduce(const SkinnyParams& p, cudaStream_t stream) {
  const int64_t n = int64_t(p.M) * p.N;
  detail::swiglu_reduce_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(p.partial, p.ksplit, p.M, p.N,
                                                                                 p.limit, p.row_weight, p.y, p.ldy);
  return launch_status("swiglu split-K reduce");
}

// y [M, N] (row stride ldy) = act_quant(x)·Wᵀ, x given as codes [M, K] + exps [M, K/32], W FP8.
// N % 16 == 0, K % 32 == 0. M ≤ 64 (or N, K not multiples of 128): skinny kernel with split-K into `workspace`
// (gemm_workspace_bytes); otherwise the wide kernel.
inline Status gemm_fp8(const uint8_t* xc, const uint8_t* xe, int M, const uint8_t* w, const uint8_t* ws, int N, int K,
                       bf16_t* y, int64_t ldy, float* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (M < 0 || N <= 0 || K <= 0 || N % 16 || K % 32) return bad_arg("gemm_fp8: N % 16 or K % 32");
  if (M == 0) return Status::Ok();
  if (M > 64 && N % 128 == 0 && K % 128 == 0) {
    static_assert(detail::wide::SMEM_BYTES <= 227 * 1024);
    DSV41_CUDA_TRY(cudaFuncSetAttribute(detail::wide_gemm_fp8_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        detail::wide::SMEM_BYTES),
                   "gemm_fp8: smem attribute");
    dim3 grid(N / detail::wide::BN, ceil_div(M, detail::wide::BM));
    detail::wide_gemm_fp8_kernel<<<grid, detail::wide::THREADS, detail::wide::SMEM_BYTES, stream>>>(xc, xe, w, ws, M, N,
                                                                                                    K, y, ldy);
    return launch_status("gemm_fp8 wide");
  }
  SkinnyParams p;
  p.w1 = {w, ws, 0, 0};
  p.N = N; p.K = K; p.xc = xc; p.xe = xe; p.M = M; p.y = y; p.ldy = ldy;
  int ks = detail::skinny_ksplit(M, N, K);
  if (ks > 1 && (!workspace || workspace_bytes < size_t(ks) * M * N * sizeof(float))) ks = 1;
  p.ksplit = ks;
  p.partial = workspace;
  // The register kernel: the streaming one (gemm_stream.cuh) was 0.94-1.06x of it on the dense FP8 decode shapes
  // (bench/gemm_stream.cu, notes/gpu.md session 17 run 3).
  DSV41_TRY((gemm_skinny<WFmt::FP8, false>(p, 0, M, stream)));
  if (ks > 1) {
    const int64_t n = int64_t(M) * N;
    detail::splitk_reduce_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(workspace, ks, M, N, y, ldy, nullptr);
    return launch_status("gemm_fp8 split-K reduce");
  }
  return Status::Ok();
}

// y [M, N] = x·Wᵀ with BF16 x [M, K] and BF16 W [N, K], FP32 accumulation; FP32 out (yf) or BF16 out (yb).
// N % 16 == 0 (the indexer's 32 head weights), K % 32 == 0.
inline Status gemm_bf16(const bf16_t* x, int M, const bf16_t* w, int N, int K, float* yf, bf16_t* yb, int64_t ldy,
                        float* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (M < 0 || N <= 0 || K <= 0 || N % 16 || K % 32 || (!yf && !yb)) return bad_arg("gemm_bf16: N % 16 or K % 32");
  if (M == 0) return Status::Ok();
  const int blocks = ceil_div(N, 64) * ceil_div(M, 64);
  int ks = M <= 64 ? detail::choose_ksplit(blocks, K / 32) : 1;
  if (ks > 1 && (!workspace || workspace_bytes < size_t(ks) * M * N * sizeof(float))) ks = 1;
  dim3 grid(ceil_div(N, 64), ceil_div(M, 64), ks);
  detail::skinny_bf16_kernel<<<grid, 128, 0, stream>>>(x, w, M, N, K, workspace, ks, yf, yb, ldy);
  DSV41_TRY(launch_status("gemm_bf16"));
  if (ks > 1) {
    const int64_t n = int64_t(M) * N;
    detail::splitk_reduce_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(workspace, ks, M, N, yb, ldy, yf);
    return launch_status("gemm_bf16 split-K reduce");
  }
  return Status::Ok();
}

}  // namespace dsv41::gpu
