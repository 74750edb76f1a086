// Tiled GEMM on CUDA cores with FP32 products and sums, for the linears the reference runs in FP32 or without
// activation quant: the head / Markov head (BF16 weights, FP32 out) and wo_a (FP8 weights dequantized exactly,
// BF16 activations, BF16 out), at more than a few rows. Each output is one FP32 FMA chain over k in order
// (a reordered sum of cpu::linear's); products of BF16 and dequantized FP8 values are exact in FP32.
// CTA: TM rows x 64 columns, 256 threads, K in chunks of 32 through shared memory. Groups (gridDim.z) take
// A columns g·a_goff.. and weight rows g·N.., and write output columns g·N.. (wo_a's o_groups).
#pragma once
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

struct GemmF32Params {
  const bf16_t* A = nullptr;  // [M, lda] BF16
  int64_t lda = 0, a_goff = 0;
  const uint8_t* W = nullptr;   // BF16 [G·N, K], or FP8 E4M3 [G·N, K] with
  const uint8_t* Ws = nullptr;  //   UE8M0 scales [ceil(G·N/32), ceil(K/32)] (Ws set: FP8)
  int M = 0, N = 0, K = 0, G = 1;
  float* yf = nullptr;  // FP32 out [M, ldy], or
  bf16_t* yb = nullptr;  // BF16 out (rounded once)
  int64_t ldy = 0;
};

namespace detail {
template <int TM>
__global__ void __launch_bounds__(256) gemm_f32_kernel(const GemmF32Params p) {
  constexpr int TN = 64, TK = 32, RPT = TM / 16;
  __shared__ float As[TK][TM];
  __shared__ float Bs[TK][TN + 4];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN, g = blockIdx.z;
  const bf16_t* A = p.A + int64_t(g) * p.a_goff;
  const int64_t wrow0 = int64_t(g) * p.N;  // this group's first weight row
  const int sb = (p.K + 31) / 32;
  float acc[RPT][4];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  for (int k0 = 0; k0 < p.K; k0 += TK) {
    for (int e = tid; e < TM * TK; e += 256) {
      const int r = e / TK, k = e % TK, m = m0 + r, kk = k0 + k;
      As[k][r] = (m < p.M && kk < p.K) ? bf2f(A[int64_t(m) * p.lda + kk]) : 0.f;
    }
    for (int e = tid; e < TN * TK; e += 256) {
      const int c = e / TK, k = e % TK, n = n0 + c, kk = k0 + k;
      float v = 0.f;
      if (n < p.N && kk < p.K) {
        const int64_t row = wrow0 + n;
        if (p.Ws) v = num::e4m3_to_f32(p.W[row * p.K + kk]) * num::ue8m0_to_f32(p.Ws[(row / 32) * sb + kk / 32]);
        else v = bf2f(reinterpret_cast<const bf16_t*>(p.W)[row * p.K + kk]);
      }
      Bs[k][c] = v;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < TK; ++k) {
      float a[RPT], b[4];
#pragma unroll
      for (int i = 0; i < RPT; ++i) a[i] = As[k][ty * RPT + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < RPT; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < RPT; ++i) {
    const int m = m0 + ty * RPT + i;
    if (m >= p.M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx * 4 + j;
      if (n >= p.N) continue;
      const int64_t o = int64_t(m) * p.ldy + int64_t(g) * p.N + n;
      if (p.yf) p.yf[o] = acc[i][j];
      else p.yb[o] = __float2bfloat16_rn(acc[i][j]);
    }
  }
}
}  // namespace detail

// CTAs a launch of gemm_f32 uses (its parallelism).
inline int64_t gemm_f32_ctas(int M, int N, int G) {
  const int tm = M <= 16 ? 16 : 64;
  return int64_t((N + 63) / 64) * ((M + tm - 1) / tm) * G;
}

inline Status gemm_f32(const GemmF32Params& p, cudaStream_t stream) {
  if (p.M < 0 || p.N <= 0 || p.K <= 0 || p.G <= 0 || !p.A || !p.W || (!p.yf && !p.yb)) return bad_arg("gemm_f32: bad shape");
  if (p.M == 0) return Status::Ok();
  const dim3 grid(unsigned((p.N + 63) / 64), 0, unsigned(p.G));
  if (p.M <= 16) {
    detail::gemm_f32_kernel<16><<<dim3(grid.x, unsigned((p.M + 15) / 16), grid.z), 256, 0, stream>>>(p);
  } else {
    detail::gemm_f32_kernel<64><<<dim3(grid.x, unsigned((p.M + 63) / 64), grid.z), 256, 0, stream>>>(p);
  }
  return launch_status("gemm_f32");
}

}  // namespace dsv41::gpu
