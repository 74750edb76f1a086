// Linear fallbacks of the GPU forward (one warp per output) for shapes the tensor-core GEMMs do not take, and the
// grouped wo_a projection at few rows (one warp per output, and one warp per two weight rows for all rows at once).
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

// Grouped low-rank output at up to 64 rows: one warp per NR weight rows (2 up to 16 activation rows, 1 above),
// every activation row at once, so that each weight row is read once (16-byte loads, E4M3 widened by the hardware
// conversion) and the rows' activations come from L1. u[t, n] = bf16(Σ_i o[t, g·gw + i]·Wdeq[n, i]), n = g·R + r;
// lane-strided FP32 sums, then the xor tree (the same order for every S and NR). gw % 16 == 0, G·R % NR == 0.
template <int SMAX, int NR>
__global__ void __launch_bounds__(256) wo_a_rows_kernel(const bf16_t* __restrict__ o, int S, int G, int R, int gw,
                                                        const uint8_t* __restrict__ w, const uint8_t* __restrict__ ws,
                                                        bf16_t* __restrict__ u) {
  const int n0 = NR * int((int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (n0 >= G * R) return;
  const int g = n0 / R, sb = (gw + 31) / 32;
  float acc[NR][SMAX];
#pragma unroll
  for (int j = 0; j < NR; ++j)
#pragma unroll
    for (int t = 0; t < SMAX; ++t) acc[j][t] = 0.f;
  for (int i = lane * 16; i < gw; i += 32 * 16) {
    float wv[NR][16];
#pragma unroll
    for (int j = 0; j < NR; ++j) {
      const int n = n0 + j;
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(w + int64_t(n) * gw + i));
      const float sc = ue8m0_f(__ldg(ws + int64_t(n / 32) * sb + i / 32));
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[q] >> (16 * h)), __NV_E4M3);
          const float2 f = __half22float2(__half2(hr));
          wv[j][4 * q + 2 * h] = f.x * sc;
          wv[j][4 * q + 2 * h + 1] = f.y * sc;
        }
    }
#pragma unroll
    for (int t = 0; t < SMAX; ++t) {
      if (t >= S) break;
      const uint4* op = reinterpret_cast<const uint4*>(o + (int64_t(t) * G + g) * gw + i);
      const uint4 a = __ldg(op), b = __ldg(op + 1);
      const uint32_t ow[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const float ov = __uint_as_float((e & 1) ? (ow[e / 2] & 0xFFFF0000u) : (ow[e / 2] << 16));
#pragma unroll
        for (int j = 0; j < NR; ++j) acc[j][t] = fmaf(ov, wv[j][e], acc[j][t]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < SMAX; ++t) {
    if (t >= S) break;
#pragma unroll
    for (int j = 0; j < NR; ++j) {
      const float s = warp_sum(acc[j][t]);
      if (lane == 0) u[int64_t(t) * G * R + n0 + j] = __float2bfloat16_rn(s);
    }
  }
}

// wo_a's weights as the reference applies them: E4M3 [G·R, gw] times UE8M0 per 32x32 block, in BF16 (exact: an E4M3
// value has 4 significant bits and the scale is a power of two). Eight weights per thread; gw % 8 == 0.
template <int = 0>
__global__ void wo_a_dequant_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ ws, int64_t rows, int gw,
                                    bf16_t* __restrict__ out) {
  const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= rows * gw) return;
  const int64_t n = i / gw;
  const int k = int(i % gw), sb = (gw + 31) / 32;
  const float sc = num::ue8m0_to_f32(ws[(n / 32) * sb + k / 32]);
  const uint2 c = *reinterpret_cast<const uint2*>(w + i);
  const uint32_t cw[2] = {c.x, c.y};
  alignas(16) bf16_t v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __float2bfloat16_rn(num::e4m3_to_f32(uint8_t(cw[j / 4] >> (8 * (j % 4)))) * sc);
  *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(v);
}

// wo_a_rows_kernel for S rows (1..64); false when the shape is not its own (gw % 16, G·R odd at 16 rows or
// fewer): the caller then uses wo_a_kernel or the tiled FP32 GEMM.
inline bool wo_a_rows_fits(int S, int G, int R, int gw) {
  return S >= 1 && S <= 64 && gw % 16 == 0 && (S > 16 || (G * R) % 2 == 0);
}
inline Status wo_a_rows(const bf16_t* o, int S, int G, int R, int gw, const uint8_t* w, const uint8_t* ws, bf16_t* u,
                        cudaStream_t stream) {
  if (!wo_a_rows_fits(S, G, R, gw)) return bad_arg("wo_a_rows: S 1..64, gw % 16, G·R even");
  const unsigned b2 = unsigned(ceil_div64(int64_t(G) * R / 2 * 32, 256)), b1 = unsigned(ceil_div64(int64_t(G) * R * 32, 256));
  if (S <= 4) wo_a_rows_kernel<4, 2><<<b2, 256, 0, stream>>>(o, S, G, R, gw, w, ws, u);
  else if (S <= 8) wo_a_rows_kernel<8, 2><<<b2, 256, 0, stream>>>(o, S, G, R, gw, w, ws, u);
  else if (S <= 16) wo_a_rows_kernel<16, 2><<<b2, 256, 0, stream>>>(o, S, G, R, gw, w, ws, u);
  else if (S <= 32) wo_a_rows_kernel<32, 1><<<b1, 256, 0, stream>>>(o, S, G, R, gw, w, ws, u);
  else wo_a_rows_kernel<64, 1><<<b1, 256, 0, stream>>>(o, S, G, R, gw, w, ws, u);
  return launch_status("wo_a rows");
}

}  // namespace glue

}  // namespace dsv41::gpu
