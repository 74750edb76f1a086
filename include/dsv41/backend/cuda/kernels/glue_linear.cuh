// Linear fallbacks of the GPU forward (one warp per output) for shapes the tensor-core GEMMs do not take, and the
// grouped wo_a projection at few rows.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/glue_common.cuh>

namespace dsv41::gpu {

namespace glue {

// ---- linear fallbacks (one warp per output) ----

// y[m, n] = Σ_k x[m, k]·W[n, k], BF16 x and W, FP32 accumulation; FP32 (yf) or BF16 (yb) out.
template <int = 0>
__global__ void linear_bf16_simple_kernel(const bf16_t* __restrict__ x, int64_t ldx, const bf16_t* __restrict__ W,
                                          int M, int N, int K, float* __restrict__ yf, bf16_t* __restrict__ yb,
                                          int64_t ldy) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(M) * N) return;
  const int m = int(wid / N), n = int(wid % N);
  float acc = 0.f;
  for (int k = lane; k < K; k += 32) acc = fmaf(bf2f(x[int64_t(m) * ldx + k]), bf2f(W[int64_t(n) * K + k]), acc);
  acc = warp_sum(acc);
  if (lane == 0) {
    if (yf) yf[int64_t(m) * ldy + n] = acc;
    else yb[int64_t(m) * ldy + n] = __float2bfloat16_rn(acc);
  }
}

// y[m, n] = Σ_k (q_x·s_x)(q_w·s_w): quantized activations (codes + UE8M0 per 32) against FP8 weights with
// UE8M0 per 32x32 block; BF16 out. For shapes the tensor-core kernels do not take (N % 64 ≠ 0).
template <int = 0>
__global__ void linear_fp8_simple_kernel(const uint8_t* __restrict__ xc, const uint8_t* __restrict__ xe,
                                         const uint8_t* __restrict__ w, const uint8_t* __restrict__ ws, int M, int N,
                                         int K, bf16_t* __restrict__ y, int64_t ldy) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(M) * N) return;
  const int m = int(wid / N), n = int(wid % N);
  const int kb = K / 32, sb = (K + 31) / 32;
  float acc = 0.f;
  for (int k = lane; k < K; k += 32) {
    const float xv = num::e4m3_to_f32(xc[int64_t(m) * K + k]) * num::ue8m0_to_f32(xe[int64_t(m) * kb + k / 32]);
    const float wv = num::e4m3_to_f32(w[int64_t(n) * K + k]) * num::ue8m0_to_f32(ws[int64_t(n / 32) * sb + k / 32]);
    acc = fmaf(xv, wv, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) y[int64_t(m) * ldy + n] = __float2bfloat16_rn(acc);
}

// Grouped low-rank output, no activation quant: u[t, g·R + r] = bf16(Σ_i o[t, g·gw + i]·Wdeq[g·R + r, i]).
template <int = 0>
__global__ void wo_a_kernel(const bf16_t* __restrict__ o, int S, int G, int R, int gw, const uint8_t* __restrict__ w,
                            const uint8_t* __restrict__ ws, bf16_t* __restrict__ u) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(S) * G * R) return;
  const int n = int(wid % (int64_t(G) * R)), t = int(wid / (int64_t(G) * R));
  const int g = n / R, sb = (gw + 31) / 32;
  const bf16_t* og = o + int64_t(t) * G * gw + int64_t(g) * gw;
  float acc = 0.f;
  for (int i = lane; i < gw; i += 32) {
    const float wv = num::e4m3_to_f32(w[int64_t(n) * gw + i]) * num::ue8m0_to_f32(ws[int64_t(n / 32) * sb + i / 32]);
    acc = fmaf(bf2f(og[i]), wv, acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) u[int64_t(t) * G * R + n] = __float2bfloat16_rn(acc);
}

}  // namespace glue

}  // namespace dsv41::gpu
