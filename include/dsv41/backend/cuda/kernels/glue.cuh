// The glue kernels of the CUDA forward pass (include/dsv41/model/cuda_model.hpp) and simple, shape-generic
// fallbacks for the fast kernels' shape limits (the tiny fixtures: H = 4, D = 64, nI = 4, dI = 32, d = 128,
// E = 8). Each follows its cpu:: counterpart operation for operation: FP32 inside, the same BF16 rounding
// points, separate multiplies and adds where the CPU's order is short and fixed; long sums are reordered
// (SPEC §3 allows it). Launchers take the caller's stream, return Status, never synchronize.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/attention.cuh>
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/backend/cuda/kernels/mhc.cuh>
#include <dsv41/backend/cuda/kernels/std_select.hpp>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::gpu {

namespace glue {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int t = kThreads) { return unsigned((n + t - 1) / t); }

// Block-wide sum of one value per thread (blockDim.x a multiple of 32, ≤ 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < nw; ++w) s += red[w];
  return s;
}


// ---- small host inputs as kernel parameters (no host→device copy: no staging, no stream wait, capturable) ----
struct ParamBytes {
  static constexpr int kBytes = 3072;
  uint8_t b[kBytes];
  int n = 0;
};
template <int = 0>
__global__ void param_bytes_kernel(const ParamBytes v, uint8_t* __restrict__ dst) {
  for (int i = threadIdx.x; i < v.n; i += blockDim.x) dst[i] = v.b[i];
}

// ---- embedding, Engram, taps ----

template <int = 0>
__global__ void embed_kernel(const bf16_t* __restrict__ embed, const int32_t* __restrict__ ids, int hc, int d,
                             bf16_t* __restrict__ H, float* __restrict__ pre) {
  const int t = blockIdx.x;
  const bf16_t* row = embed + int64_t(ids[t]) * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const bf16_t v = row[i];
    for (int k = 0; k < hc; ++k) H[(int64_t(t) * hc + k) * d + i] = v;
  }
  for (int k = threadIdx.x; k < hc; k += blockDim.x) pre[int64_t(t) * hc + k] = k == 0 ? 1.f : 0.f;
}

// rows[t, c, i] = bf16(e4m3(table[rid, i]) · 2^scale[rid, i/32]), zeros for an id outside the table.
template <int = 0>
__global__ void engram_gather_kernel(const int64_t* __restrict__ ids, int stride, int col0, int cols, int hd,
                                     const uint8_t* __restrict__ table, const uint8_t* __restrict__ tscale,
                                     int64_t n_rows, int S, bf16_t* __restrict__ out) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * cols * hd) return;
  const int i = int(id % hd);
  const int64_t tc = id / hd;
  const int c = int(tc % cols), t = int(tc / cols);
  const int64_t rid = ids[int64_t(t) * stride + col0 + c];
  float v = 0.f;
  if (rid >= 0 && rid < n_rows)
    v = num::e4m3_to_f32(table[rid * hd + i]) * num::ue8m0_to_f32(tscale[rid * (hd / 32) + i / 32]);
  out[id] = __float2bfloat16_rn(v);
}

// One CTA per (token, stream): SPEC §4.7 gate and update, as cpu::engram.
template <int = 0>
__global__ void engram_gate_kernel(const bf16_t* __restrict__ kv, const float* __restrict__ qk,
                                   const int32_t* __restrict__ tokens, int image_id, int hc, int d, float eps,
                                   float inv_sqrt_d, bf16_t* __restrict__ H) {
  __shared__ float red[32];
  const int t = blockIdx.x / hc, k = blockIdx.x % hc;
  bf16_t* h = H + (int64_t(t) * hc + k) * d;
  const bf16_t* key = kv + (int64_t(t) * (hc + 1) + k) * d;
  const bf16_t* value = kv + (int64_t(t) * (hc + 1) + hc) * d;
  const float* wk = qk + int64_t(k) * d;
  float hh = 0.f, kk = 0.f, dt = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float hv = bf2f(h[i]), kv_ = bf2f(key[i]);
    hh = __fadd_rn(hh, __fmul_rn(hv, hv));
    kk = __fadd_rn(kk, __fmul_rn(kv_, kv_));
    dt = __fadd_rn(dt, __fmul_rn(__fmul_rn(hv, wk[i]), kv_));
  }
  hh = block_sum(hh, red);
  kk = block_sum(kk, red);
  dt = block_sum(dt, red);
  const float rstd = __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(hh, float(d)), eps))),
                               __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(kk, float(d)), eps))));
  dt = __fmul_rn(__fmul_rn(dt, rstd), inv_sqrt_d);
  const float mag = __fsqrt_rn(fmaxf(fabsf(dt), 1e-6f));
  float gate = __fdiv_rn(1.f, __fadd_rn(1.f, expf(-copysignf(mag, dt))));
  if (image_id >= 0 && tokens && tokens[t] == image_id) gate = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    h[i] = __float2bfloat16_rn(__fadd_rn(bf2f(h[i]), __fmul_rn(gate, bf2f(value[i]))));
}

// taps[t, slot, i] = bf16((Σ_k H[t, k, i]) / hc)
template <int = 0>
__global__ void taps_kernel(const bf16_t* __restrict__ H, int S, int hc, int d, int nt, int slot,
                            bf16_t* __restrict__ taps) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * d) return;
  const int t = int(id / d), i = int(id % d);
  float acc = 0.f;
  for (int k = 0; k < hc; ++k) acc = __fadd_rn(acc, bf2f(H[(int64_t(t) * hc + k) * d + i]));
  taps[(int64_t(t) * nt + slot) * d + i] = __float2bfloat16_rn(__fdiv_rn(acc, float(hc)));
}

// ---- mHC ----

// One CTA per token: the whole mhc_step (mhc.cuh) for any d and HC ≤ 8 (the fast version needs HC = 4 and
// d % 256 == 0). The collapsed row is recomputed for the norm (same operations: same values), so no shared
// memory grows with d.
template <int HC>
__global__ void __launch_bounds__(256) mhc_generic_kernel(const MhcParams p) {
  constexpr int NM = (2 + HC) * HC, NQ = NM + 2;
  __shared__ float red[NQ][8];
  __shared__ float q[NQ];
  const int t = blockIdx.x, d = p.d;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[NQ];
#pragma unroll
  for (int o = 0; o < NQ; ++o) acc[o] = 0.f;
  const float* mp = p.x ? p.mix_prev + int64_t(t) * NM : nullptr;
  const float* pu = p.pre_use + int64_t(t) * p.pre_stride;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float h[HC];
#pragma unroll
    for (int j = 0; j < HC; ++j) h[j] = bf2f(p.H_in[(int64_t(t) * HC + j) * d + i]);
    if (p.x) {
      const float xv = bf2f(p.x[int64_t(t) * d + i]);
      float ho[HC];
#pragma unroll
      for (int k = 0; k < HC; ++k) {
        float a = 0.f;
#pragma unroll
        for (int j = 0; j < HC; ++j) a = __fadd_rn(a, __fmul_rn(mp[2 * HC + j * HC + k], h[j]));
        ho[k] = bf16r(__fadd_rn(__fmul_rn(mp[HC + k], xv), a));
        p.H_out[(int64_t(t) * HC + k) * d + i] = __float2bfloat16_rn(ho[k]);
      }
#pragma unroll
      for (int k = 0; k < HC; ++k) h[k] = ho[k];
    }
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < HC; ++j) v = __fadd_rn(v, __fmul_rn(pu[j], h[j]));
    v = bf16r(v);
    acc[NM + 1] += v * v;
#pragma unroll
    for (int k = 0; k < HC; ++k) acc[NM] += h[k] * h[k];
#pragma unroll
    for (int o = 0; o < NM; ++o) {
      const float* f = p.fn + int64_t(o) * HC * d + i;
#pragma unroll
      for (int k = 0; k < HC; ++k) acc[o] = fmaf(h[k], f[int64_t(k) * d], acc[o]);
    }
  }
#pragma unroll
  for (int o = 0; o < NQ; ++o) {
    const float s = warp_sum(acc[o]);
    if (lane == 0) red[o][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x < NQ) {
    float s = 0.f;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s += red[threadIdx.x][w];
    q[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the coefficients, as mhc_finish_kernel (the reference's operation order)
    detail::mhc_coefficients<HC>(q, q[NM], d, p.norm_eps, p.scale, p.base, p.hc_eps, p.iters,
                                 p.mix_out + int64_t(t) * ((2 + HC) * HC));
  }
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(q[NM + 1], float(d)), p.norm_eps)));
  const bf16_t* Hs = p.x ? p.H_out : p.H_in;  // this thread's own columns (written above when x is given)
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = 0.f;
#pragma unroll
    for (int j = 0; j < HC; ++j) v = __fadd_rn(v, __fmul_rn(pu[j], bf2f(Hs[(int64_t(t) * HC + j) * d + i])));
    p.y[int64_t(t) * d + i] = __float2bfloat16_rn(__fmul_rn(p.norm_w[i], __fmul_rn(bf16r(v), rs)));
  }
}

// The same for any hc (hc > 8: the stream count only known at run time). One CTA of 256 threads per token;
// the streams are re-read from global memory instead of held in registers, the NM dot products are reduced
// one after another into the token's mix_out row, and the coefficients are computed there in place.
template <int = 0>
__global__ void __launch_bounds__(256) mhc_runtime_kernel(const MhcParams p, int hc) {
  __shared__ float red[32];
  const int NM = (2 + hc) * hc;
  const int t = blockIdx.x, d = p.d;
  const float* mp = p.x ? p.mix_prev + int64_t(t) * NM : nullptr;
  const float* pu = p.pre_use + int64_t(t) * p.pre_stride;
  const bf16_t* Hin = p.H_in + int64_t(t) * hc * d;
  const bf16_t* Hs = p.x ? p.H_out + int64_t(t) * hc * d : Hin;
  float ssh = 0.f, ssv = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    if (p.x) {
      const float xv = bf2f(p.x[int64_t(t) * d + i]);
      for (int k = 0; k < hc; ++k) {
        float a = 0.f;
        for (int j = 0; j < hc; ++j) a = __fadd_rn(a, __fmul_rn(mp[2 * hc + j * hc + k], bf2f(Hin[int64_t(j) * d + i])));
        p.H_out[(int64_t(t) * hc + k) * d + i] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(mp[hc + k], xv), a));
      }
    }
    float v = 0.f;
    for (int j = 0; j < hc; ++j) {
      const float h = bf2f(Hs[int64_t(j) * d + i]);
      v = __fadd_rn(v, __fmul_rn(pu[j], h));
      ssh += h * h;
    }
    v = bf16r(v);
    ssv += v * v;
  }
  const float sh = block_sum(ssh, red);
  const float sv = block_sum(ssv, red);
  for (int o = 0; o < NM; ++o) {
    const float* f = p.fn + int64_t(o) * hc * d;
    float a = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
      for (int k = 0; k < hc; ++k) a = fmaf(bf2f(Hs[int64_t(k) * d + i]), f[int64_t(k) * d + i], a);
    a = block_sum(a, red);
    if (threadIdx.x == 0) p.mix_out[int64_t(t) * NM + o] = a;
  }
  if (threadIdx.x == 0) {
    float* row = p.mix_out + int64_t(t) * NM;
    detail::mhc_coefficients<0>(row, sh, d, p.norm_eps, p.scale, p.base, p.hc_eps, p.iters, row, hc);
  }
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sv, float(d)), p.norm_eps)));
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = 0.f;
    for (int j = 0; j < hc; ++j) v = __fadd_rn(v, __fmul_rn(pu[j], bf2f(Hs[int64_t(j) * d + i])));
    p.y[int64_t(t) * d + i] = __float2bfloat16_rn(__fmul_rn(p.norm_w[i], __fmul_rn(bf16r(v), rs)));
  }
}

// H_out[t, k] = bf16(post_k · x + Σ_j C_jk · H_in[t, j]); pre_out[t] = mix[t, 0..hc) (the next pre).
template <int = 0>
__global__ void hc_post_kernel(const bf16_t* __restrict__ x, const bf16_t* __restrict__ Hin,
                               const float* __restrict__ mix, int S, int hc, int d, bf16_t* __restrict__ Hout,
                               float* __restrict__ pre_out) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * d) return;
  const int t = int(id / d), i = int(id % d);
  const int nm = (2 + hc) * hc;
  const float* mp = mix + int64_t(t) * nm;
  float h[8];  // the streams of this column, hc ≤ 8 (more: read again from memory)
  for (int j = 0; j < hc && j < 8; ++j) h[j] = bf2f(Hin[(int64_t(t) * hc + j) * d + i]);
  const float xv = bf2f(x[int64_t(t) * d + i]);
  for (int k = 0; k < hc; ++k) {
    float a = 0.f;
    for (int j = 0; j < hc; ++j)
      a = __fadd_rn(a, __fmul_rn(mp[2 * hc + j * hc + k], hc <= 8 ? h[j] : bf2f(Hin[(int64_t(t) * hc + j) * d + i])));
    Hout[(int64_t(t) * hc + k) * d + i] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(mp[hc + k], xv), a));
  }
  for (int j = i; j < hc; j += d) pre_out[int64_t(t) * hc + j] = mp[j];
}

// y[t] = rmsnorm(bf16(Σ_j pre_j · H[t, j]), w): the final collapse and norm (head, DSpark). One CTA per row.
// The collapsed row is recomputed for the norm (same values), so any d runs without dynamic shared memory
// (launch through collapse_norm below; a launch with dynamic shared memory still works, unused).
template <int = 0>
__global__ void collapse_norm_kernel(const bf16_t* __restrict__ H, const float* __restrict__ pre, int pre_stride,
                                     int hc, int d, const float* __restrict__ w, float eps, bf16_t* __restrict__ xb,
                                     bf16_t* __restrict__ y) {
  __shared__ float red[32];
  const int t = blockIdx.x;
  const float* pr = pre + int64_t(t) * pre_stride;
  auto collapse = [&](int i) {
    float a = 0.f;
    for (int j = 0; j < hc; ++j) a = __fadd_rn(a, __fmul_rn(pr[j], bf2f(H[(int64_t(t) * hc + j) * d + i])));
    return bf16r(a);
  };
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float a = collapse(i);
    if (xb) xb[int64_t(t) * d + i] = __float2bfloat16_rn(a);
    ss += a * a;
  }
  ss = block_sum(ss, red);
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(d)), eps)));
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    y[int64_t(t) * d + i] = __float2bfloat16_rn(__fmul_rn(w[i], __fmul_rn(collapse(i), rs)));
}

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

// ---- rope at positions p0 + row·pstride (compressed entries: g·r) ----
template <int = 0>
__global__ void rope_strided_kernel(bf16_t* __restrict__ x, int rows, int heads, int dh, int rd,
                                    const float* __restrict__ freqs, int64_t p0, int64_t pstride) {
  const int pairs = rd / 2;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * heads * pairs) return;
  const int i = int(id % pairs);
  const int64_t rh = id / pairs;
  const int64_t row = rh / heads;
  const float ang = __fmul_rn(float(p0 + row * pstride), freqs[i]);
  const float c = float(cos(double(ang))), s = float(sin(double(ang)));
  bf16_t* t = x + rh * dh + (dh - rd) + 2 * i;
  const float a = bf2f(t[0]), b = bf2f(t[1]);
  t[0] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
  t[1] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}

// ---- packed cache entries (SPEC §6), one thread per scale block, with the numeric/quant.hpp functions ----

// Entry index of row t: wrap ? (p0 + t) mod W : off + t. Rows t < t0 are skipped.
__device__ __forceinline__ int64_t entry_of(int t, int64_t off, int64_t p0, int W, bool wrap) {
  return wrap ? (p0 + t) % W : off + t;
}

template <int = 0>
__global__ void pack_window_kernel(const bf16_t* __restrict__ x, int64_t ldx, int t0, int rows, int D,
                                   uint8_t* __restrict__ pool, int64_t off, int64_t p0, int W, bool wrap) {
  const int nb = D / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows - t0) * nb) return;
  const int t = t0 + int(id / nb), b = int(id % nb);
  uint8_t* e = pool + entry_of(t, off, p0, W, wrap) * num::window_entry_size(D);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * ldx + b * 32 + i]);
  num::fp8_quant_block32(v, 32, e + b * 32, e + D + b);
}

// Decode rows of several sequences: row t's entry goes to slot pos[t] mod W of rings[t].
template <int = 0>
__global__ void pack_window_rows_kernel(const bf16_t* __restrict__ x, int rows, int D, uint8_t* const* __restrict__ rings,
                                        const int64_t* __restrict__ pos, int W) {
  const int nb = D / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = rings[t] + (pos[t] % W) * num::window_entry_size(D);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * D + b * 32 + i]);
  num::fp8_quant_block32(v, 32, e + b * 32, e + D + b);
}

// Main KV entry (E2M1 + E4M3 scale per 16) of rows [0, rows) into entries first + t.
template <int = 0>
__global__ void pack_main_kernel(const bf16_t* __restrict__ x, int rows, int D, uint8_t* __restrict__ pool,
                                 int64_t first) {
  const int nb = D / 16;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = pool + (first + t) * num::main_entry_size(D);
  float v[16];
  uint8_t nib[16];
  for (int i = 0; i < 16; ++i) v[i] = bf2f(x[int64_t(t) * D + b * 16 + i]);
  num::fp4_quant_block16(v, 16, nib, e + D / 2 + b);
  for (int i = 0; i < 8; ++i) e[b * 8 + i] = num::pack_e2m1(nib[2 * i], nib[2 * i + 1]);
}

// Index key (E2M1 + UE8M0 per 32) of rows [0, rows) into entries first + t.
template <int = 0>
__global__ void pack_index_kernel(const bf16_t* __restrict__ x, int rows, int dI, uint8_t* __restrict__ pool,
                                  int64_t first) {
  const int nb = dI / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = pool + (first + t) * num::index_entry_size(dI);
  float v[32];
  uint8_t nib[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * dI + b * 32 + i]);
  num::fp4_quant_block32(v, 32, nib, e + dI / 2 + b);
  for (int i = 0; i < 16; ++i) e[b * 16 + i] = num::pack_e2m1(nib[2 * i], nib[2 * i + 1]);
}

// ring[(p0 + t) mod W] = pool[off + t] for t in [t0, rows).
template <int = 0>
__global__ void ring_store_kernel(const uint8_t* __restrict__ pool, int64_t off, int t0, int rows, int we,
                                  uint8_t* __restrict__ ring, int64_t p0, int W) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows - t0) * we) return;
  const int t = t0 + int(id / we), b = int(id % we);
  ring[((p0 + t) % W) * we + b] = pool[(off + t) * we + b];
}

// ---- attention lists ----

// Window entries of row t (position p = pos ? pos[t] : p0 + t): positions max(0, p − W + 1, floor)..p. In the ring (slot
// pos mod W) for positions before the chunk, or when decode (the new entry already stored in the ring);
// else entry W + (pos − p0) of the scratch pool. idx [S, W], −1 padded.
template <int = 0>
__global__ void window_idx_kernel(int S, int64_t p0, const int64_t* __restrict__ pos, int W, int64_t floor_pos,
                                  bool in_ring, int* __restrict__ idx) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * W) return;
  const int t = int(id / W), j = int(id % W);
  const int64_t p = pos ? pos[t] : p0 + t;
  int64_t lo = p - W + 1;
  if (lo < 0) lo = 0;
  if (lo < floor_pos) lo = floor_pos;
  const int64_t wp = lo + j;
  int v = -1;
  if (wp <= p) v = (in_ring || wp < p0) ? int(wp % W) : int(W + (wp - p0));
  idx[id] = v;
}

// DSpark block rows: every row attends ring positions lo..p (slots) then all B block rows (W + i).
template <int = 0>
__global__ void draft_idx_kernel(int B, int64_t p, int W, int* __restrict__ idx) {
  const int n = W + B;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(B) * n) return;
  const int j = int(id % n);
  const int64_t lo = p - W + 1 > 0 ? p - W + 1 : 0;
  const int cnt = int(p - lo + 1);
  int v = -1;
  if (j < cnt) v = int((lo + j) % W);
  else if (j - cnt < B) v = W + (j - cnt);
  idx[id] = v;
}

// comp[t, k] = lists[t, k] when it is a listed, existing and visible entry (j < floor((p+1)/ratio)), else −1.
// Per row when pos / nent are set: p = pos[t], entries nent[t] (rows of several sequences).
template <int = 0>
__global__ void comp_idx_kernel(const int32_t* __restrict__ lists, int S, int K, int64_t p0, const int64_t* __restrict__ pos,
                                int ratio, int64_t n_entries, const int64_t* __restrict__ nent, int* __restrict__ comp) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * K) return;
  const int t = int(id / K);
  const int32_t j = lists[id];
  const int64_t p = pos ? pos[t] : p0 + t, ne = nent ? nent[t] : n_entries;
  const bool ok = j >= 0 && j < ne && j < (p + 1) / ratio;
  comp[id] = ok ? j : -1;
}

// Rows of several sequences: vis[t] = min(floor((pos[t] + 1)/r), n_rows[t])
template <int = 0>
__global__ void fill_vis_rows_kernel(int S, const int64_t* __restrict__ pos, int r, const int* __restrict__ n_rows,
                                     int* __restrict__ vis) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int64_t v = (pos[t] + 1) / r;
  vis[t] = int(v < n_rows[t] ? v : n_rows[t]);
}

// vis[t] = min(floor((p0 + t + 1)/r), n)
template <int = 0>
__global__ void fill_vis_kernel(int S, int64_t p0, int r, int64_t n, int* __restrict__ vis) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int64_t v = (p0 + t + 1) / r;
  vis[t] = int(v < n ? v : n);
}

// ---- sparse attention with sink, shape-generic (one CTA per (head, row)) ----
template <int = 0>
__global__ void __launch_bounds__(128) sparse_attn_generic_kernel(const SparseAttnParams p) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  __shared__ int n_ent;
  const int h = blockIdx.x, row = blockIdx.y, D = p.D;
  const int tot = p.n_win + p.n_comp;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  float* qs = sm;              // [D]
  float* sc = qs + D;          // [tot]
  int* list = reinterpret_cast<int*>(sc + tot);  // [tot]
  const bf16_t* qh = p.q + (int64_t(row) * p.H + h) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) qs[i] = bf2f(qh[i]);
  if (threadIdx.x == 0) {
    int n = 0;
    for (int j = 0; j < tot; ++j) {
      int v;
      if (j < p.n_win) v = p.win_idx[int64_t(row) * p.n_win + j];
      else {
        const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
        v = c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
      }
      if (v != -1) list[n++] = v;
    }
    n_ent = n;
  }
  __syncthreads();
  const int n = n_ent;
  bf16_t* oh = p.out + (int64_t(row) * p.H + h) * D;
  if (n == 0) {
    for (int i = threadIdx.x; i < D; i += blockDim.x) oh[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int went = D + D / 32, ment = D / 2 + D / 16;
  auto value = [&](int v, int i) -> float {
    if (v >= 0) {
      const uint8_t* e = win_pool + int64_t(v) * went;
      return num::e4m3_to_f32(e[i]) * num::ue8m0_to_f32(e[D + i / 32]);
    }
    const uint8_t* e = comp_pool + int64_t(v & 0x7fffffff) * ment;
    const uint8_t byte = e[i / 2];
    return num::e2m1_to_f32((i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF)) * num::e4m3_to_f32(e[D / 2 + i / 16]);
  };
  // scores: one warp per entry
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int j = warp; j < n; j += nw) {
    float a = 0.f;
    for (int i = lane; i < D; i += 32) a = fmaf(qs[i], value(list[j], i), a);
    a = warp_sum(a);
    if (lane == 0) sc[j] = a * p.scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sc[j]);
  m = warp_max(m);
  __syncthreads();
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < nw; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float den = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(sc[j] - m);
    den += e;
    sc[j] = e;  // each thread rewrites only its own entries
  }
  den = block_sum(den, red);
  den += expf(p.sink[h] - m);
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float a = 0.f;
    for (int j = 0; j < n; ++j) a = fmaf(bf16r(sc[j]), value(list[j], i), a);
    oh[i] = __float2bfloat16_rn(__fdiv_rn(a, den));
  }
}

// The same for any number of entries: scores are not kept, but computed twice (pass 1: the max; pass 2, in
// chunks of kStreamChunk list slots: the numerators, summed into per-dimension accumulators in the order of
// the entry list, as sparse_attn_generic_kernel does). Any D: blockIdx.z takes output dimensions
// [z·kStreamDims, (z+1)·kStreamDims), each such CTA computing the scores again.
constexpr int kStreamChunk = 256, kStreamDims = 2048;
template <int = 0>
__global__ void __launch_bounds__(128) sparse_attn_stream_kernel(const SparseAttnParams p) {
  __shared__ float acc[kStreamDims];
  __shared__ float red[32];
  __shared__ float sc[kStreamChunk];
  __shared__ int list[kStreamChunk];
  __shared__ int n_chunk, n_all;
  const int h = blockIdx.x, row = blockIdx.y, D = p.D;
  const int tot = p.n_win + p.n_comp;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  const int i0 = blockIdx.z * kStreamDims, i1 = min(D, i0 + kStreamDims);
  const bf16_t* qh = p.q + (int64_t(row) * p.H + h) * D;
  for (int i = threadIdx.x; i < kStreamDims; i += blockDim.x) acc[i] = 0.f;
  if (threadIdx.x == 0) n_all = 0;
  const int went = D + D / 32, ment = D / 2 + D / 16;
  auto value = [&](int v, int i) -> float {
    if (v >= 0) {
      const uint8_t* e = win_pool + int64_t(v) * went;
      return num::e4m3_to_f32(e[i]) * num::ue8m0_to_f32(e[D + i / 32]);
    }
    const uint8_t* e = comp_pool + int64_t(v & 0x7fffffff) * ment;
    const uint8_t byte = e[i / 2];
    return num::e2m1_to_f32((i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF)) * num::e4m3_to_f32(e[D / 2 + i / 16]);
  };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  // The listed entries of slots [c0, c0 + kStreamChunk), in slot order, and their scores.
  auto chunk = [&](int c0) {
    __syncthreads();
    if (threadIdx.x == 0) {
      int n = 0;
      for (int j = c0; j < tot && j < c0 + kStreamChunk; ++j) {
        int v;
        if (j < p.n_win) v = p.win_idx[int64_t(row) * p.n_win + j];
        else {
          const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
          v = c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
        }
        if (v != -1) list[n++] = v;
      }
      n_chunk = n;
      n_all += n;
    }
    __syncthreads();
    for (int j = warp; j < n_chunk; j += nw) {
      float a = 0.f;
      for (int i = lane; i < D; i += 32) a = fmaf(bf2f(qh[i]), value(list[j], i), a);
      a = warp_sum(a);
      if (lane == 0) sc[j] = a * p.scale;
    }
    __syncthreads();
    return n_chunk;
  };
  float m = -INFINITY;
  for (int c0 = 0; c0 < tot; c0 += kStreamChunk) {
    const int n = chunk(c0);
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sc[j]);
  }
  m = warp_max(m);
  __syncthreads();
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < nw; ++w) m = fmaxf(m, red[w]);
  bf16_t* oh = p.out + (int64_t(row) * p.H + h) * D;
  if (n_all == 0) {
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) oh[i] = __float2bfloat16_rn(0.f);
    return;
  }
  float den = 0.f;
  for (int c0 = 0; c0 < tot; c0 += kStreamChunk) {
    const int n = chunk(c0);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const float e = expf(sc[j] - m);
      den += e;
      sc[j] = e;
    }
    __syncthreads();
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      float a = acc[i - i0];
      for (int j = 0; j < n; ++j) a = fmaf(bf16r(sc[j]), value(list[j], i), a);
      acc[i - i0] = a;
    }
  }
  den = block_sum(den, red);
  den += expf(p.sink[h] - m);
  for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) oh[i] = __float2bfloat16_rn(__fdiv_rn(acc[i - i0], den));
}

// ---- indexer ----

// w[t, h] = bf16(bf16(x·Wproj)[t, h] · wscale), as FP32 for the score kernels.
template <int = 0>
__global__ void index_weights_kernel(const bf16_t* __restrict__ wb, int n, float wscale, float* __restrict__ wf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) wf[i] = bf16r(__fmul_rn(bf2f(wb[i]), wscale));
}

// Scores for any nI, dI: one warp per (row, key); heads summed in order h = 0..nI−1 (separate mul, add).
template <int = 0>
__global__ void index_scores_generic_kernel(const IndexScoreParams p) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(p.R) * p.n) return;
  const int row = int(wid / p.n), key = int(wid % p.n);
  float* out = p.scores + int64_t(row) * p.n;
  if (key >= p.vis[row]) {
    if (lane == 0) out[key] = -INFINITY;
    return;
  }
  const int dI = p.dI, ent = dI / 2 + dI / 32;
  const uint8_t* kp = (p.keys_rows ? p.keys_rows[row] : p.keys) + int64_t(key) * ent;
  float acc = 0.f;
  for (int h = 0; h < p.nI; ++h) {
    const uint8_t* qp = p.q + (int64_t(row) * p.nI + h) * (dI / 2);
    const uint8_t* qe = p.qe + (int64_t(row) * p.nI + h) * (dI / 32);
    float a = 0.f;
    for (int i = lane; i < dI; i += 32) {
      const float qv = num::e2m1_to_f32(num::nibble_at(qp, i)) * ue8m0_f(qe[i / 32]);
      const float kv = num::e2m1_to_f32(num::nibble_at(kp, i)) * ue8m0_f(kp[dI / 2 + i / 32]);
      a = fmaf(qv, kv, a);
    }
    a = warp_sum(a);
    acc = __fadd_rn(acc, __fmul_rn(p.w[int64_t(row) * p.nI + h], fmaxf(a, 0.f)));
  }
  if (lane == 0) out[key] = acc;
}

// §4.5 candidate blocks of each row (cpu::candidate_mask over the row's visible entries), one thread per
// row with libstdc++'s selection (std_select.hpp). sel [S, nbmax]: 1 where the block is a candidate.
template <int = 0>
__global__ void candidate_kernel(const float* __restrict__ scores, int n, const int* __restrict__ vis, int S,
                                 int topk_blocks, int blk, stdsel::Pair* __restrict__ work, int nbmax,
                                 uint8_t* __restrict__ sel) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int nv = vis[t];
  const float* s = scores + int64_t(t) * n;
  stdsel::Pair* q = work + int64_t(t) * nbmax;
  uint8_t* o = sel + int64_t(t) * nbmax;
  for (int b = 0; b < nbmax; ++b) o[b] = 0;
  if (nv <= 0) return;
  const int nb = (nv + blk - 1) / blk;
  for (int b = 0; b < nb; ++b) {
    float m = -INFINITY;
    const int e = (b + 1) * blk < nv ? (b + 1) * blk : nv;
    for (int j = b * blk; j < e; ++j) m = (m < s[j]) ? s[j] : m;  // std::max(m, s[j])
    q[b] = {m, b};
  }
  q[(nv - 1) / blk].first = INFINITY;
  const int k = stdsel::select_blocks(q, nb, topk_blocks);
  for (int i = 0; i < k; ++i)
    if (q[i].first > -INFINITY) o[q[i].second] = 1;
}

// Reindex layers above the candidate source: scores outside the mask (or past its row's length) → −inf.
// Float → unsigned key with the same order (−inf lowest, +inf highest; no NaN here).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// candidate_kernel's choice, one CTA per row: the k-th largest block score by a 4-pass radix select; when
// the scores tied with it all fit (or it is −inf, whose blocks are dropped anyway) the chosen set is exact
// without knowing libstdc++'s order, else one thread runs the serial introselect (stdsel) on the row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) candidate_fast_kernel(const float* __restrict__ scores, int n,
                                                                 const int* __restrict__ vis, int topk_blocks, int blk,
                                                                 stdsel::Pair* __restrict__ work, int nbmax,
                                                                 uint8_t* __restrict__ sel) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sh_prefix;
  __shared__ int sh_k, sh_gt, sh_eq;
  const int t = blockIdx.x, tid = threadIdx.x;
  const int nv = vis[t];
  const float* s = scores + int64_t(t) * n;
  stdsel::Pair* q = work + int64_t(t) * nbmax;
  uint8_t* o = sel + int64_t(t) * nbmax;
  for (int b = tid; b < nbmax; b += THREADS) o[b] = 0;
  if (nv <= 0) return;
  const int nb = (nv + blk - 1) / blk;
  for (int b = tid; b < nb; b += THREADS) {
    float m = -INFINITY;
    const int e = (b + 1) * blk < nv ? (b + 1) * blk : nv;
    for (int j = b * blk; j < e; ++j) m = (m < s[j]) ? s[j] : m;  // std::max(m, s[j])
    q[b] = {b == (nv - 1) / blk ? INFINITY : m, b};
  }
  const int k = topk_blocks < nb ? topk_blocks : nb;
  if (k <= 0) return;
  __syncthreads();
  uint32_t prefix = 0, mask = 0;
  int krem = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += THREADS) hist[i] = 0;
    __syncthreads();
    for (int b = tid; b < nb; b += THREADS) {
      const uint32_t key = order_key(q[b].first);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int acc = 0, dg = 255;
      for (; dg > 0; --dg) {
        if (acc + int(hist[dg]) >= krem) break;
        acc += int(hist[dg]);
      }
      sh_prefix = prefix | (uint32_t(dg) << shift);
      sh_k = krem - acc;
      sh_gt = 0;
      sh_eq = 0;
    }
    __syncthreads();
    prefix = sh_prefix;
    krem = sh_k;
    mask |= 255u << shift;
    __syncthreads();
  }
  int gt = 0, eq = 0;
  for (int b = tid; b < nb; b += THREADS) {
    const uint32_t key = order_key(q[b].first);
    gt += key > prefix;
    eq += key == prefix;
  }
  atomicAdd(&sh_gt, gt);
  atomicAdd(&sh_eq, eq);
  __syncthreads();
  if (sh_gt + sh_eq == k || prefix == order_key(-INFINITY)) {
    for (int b = tid; b < nb; b += THREADS)
      if (order_key(q[b].first) >= prefix && q[b].first > -INFINITY) o[b] = 1;
  } else if (tid == 0) {  // ties straddle the k-th place: the serial order decides which of them are in
    const int kk = stdsel::select_blocks(q, nb, topk_blocks);
    for (int i = 0; i < kk; ++i)
      if (q[i].first > -INFINITY) o[q[i].second] = 1;
  }
}

template <int = 0>
__global__ void apply_candidates_kernel(float* __restrict__ scores, int S, int n, const int* __restrict__ vis,
                                        const uint8_t* __restrict__ sel, const int* __restrict__ cand_vis, int nbmax,
                                        int blk) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * n) return;
  const int t = int(id / n), j = int(id % n);
  if (j >= vis[t]) return;
  const bool ok = j < cand_vis[t] && sel[int64_t(t) * nbmax + j / blk];
  if (!ok) scores[id] = -INFINITY;
}

// ---- compressor (ratio > 1): softmax pooling over groups of r rows of [pending ; chunk] ----
template <int = 0>
__global__ void compress_pool_kernel(const float* __restrict__ pkv, const float* __restrict__ pz, int n_pend,
                                     const float* __restrict__ kv, const float* __restrict__ z, int r, int D,
                                     int n_groups, bf16_t* __restrict__ pooled) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(n_groups) * D) return;
  const int g = int(id / D), i = int(id % D);
  auto at = [&](const float* pend, const float* chunk, int row) {
    return row < n_pend ? pend[int64_t(row) * D + i] : chunk[int64_t(row - n_pend) * D + i];
  };
  float mx = -INFINITY;
  for (int t = 0; t < r; ++t) mx = fmaxf(mx, at(pz, z, g * r + t));
  float den = 0.f, acc = 0.f;
  for (int t = 0; t < r; ++t) den = __fadd_rn(den, expf(__fsub_rn(at(pz, z, g * r + t), mx)));
  for (int t = 0; t < r; ++t)
    acc = __fadd_rn(acc, __fmul_rn(at(pkv, kv, g * r + t), __fdiv_rn(expf(__fsub_rn(at(pz, z, g * r + t), mx)), den)));
  pooled[id] = __float2bfloat16_rn(acc);
}

// The unfinished group's rows become the pending rows: pend[q] = row n_groups·r + q of [pending ; chunk].
template <int = 0>
__global__ void compress_pending_kernel(float* __restrict__ pkv, float* __restrict__ pz, int n_pend,
                                        const float* __restrict__ kv, const float* __restrict__ z, int start, int rem,
                                        int D) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rem) * D) return;
  const int q = int(id / D), i = int(id % D);
  const int src = start + q;
  if (src < n_pend) return;  // only when no group completed: the row is already in place (src == q)
  pkv[int64_t(q) * D + i] = kv[int64_t(src - n_pend) * D + i];
  pz[int64_t(q) * D + i] = z[int64_t(src - n_pend) * D + i];
}

// ---- DSpark Markov head ----

// logits_i[v] += Σ_r membed[ids[i], r] · mhead[v, r]
template <int = 0>
__global__ void markov_add_kernel(const bf16_t* __restrict__ membed, const bf16_t* __restrict__ mhead,
                                  const int32_t* __restrict__ ids, int i, int V, int R, float* __restrict__ logits) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= V) return;
  const bf16_t* e = membed + int64_t(ids[i]) * R;
  const bf16_t* hr = mhead + int64_t(v) * R;
  float acc = 0.f;
  for (int r = 0; r < R; ++r) acc = fmaf(bf2f(e[r]), bf2f(hr[r]), acc);
  logits[v] = __fadd_rn(logits[v], acc);
}

// ids[i + 1] = first index of the largest logit (std::max_element). One CTA of 1024 threads.
template <int = 0>
__global__ void __launch_bounds__(1024) argmax_kernel(const float* __restrict__ logits, int V, int32_t* __restrict__ out) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  float best = -INFINITY;
  int idx = 0x7fffffff;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float x = logits[v];
    if (x > best || idx == 0x7fffffff) { best = x; idx = v; }  // strictly larger: the first of equals stays
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) { best = ob; idx = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = bv[0];
    int i = bi[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (bv[w] > b || (bv[w] == b && bi[w] < i)) { b = bv[w]; i = bi[w]; }
    *out = i;
  }
}

// conf[i] = [xb_i ; membed[ids[i]]] · proj (FP32). One CTA per block row.
template <int = 0>
__global__ void confidence_kernel(const bf16_t* __restrict__ xb, const bf16_t* __restrict__ membed,
                                  const int32_t* __restrict__ ids, const bf16_t* __restrict__ proj, int d, int R,
                                  float* __restrict__ conf) {
  __shared__ float red[32];
  const int i = blockIdx.x;
  const bf16_t* e = membed + int64_t(ids[i]) * R;
  float acc = 0.f;
  for (int c = threadIdx.x; c < d + R; c += blockDim.x) {
    const float xv = c < d ? bf2f(xb[int64_t(i) * d + c]) : bf2f(e[c - d]);
    acc = fmaf(xv, bf2f(proj[c]), acc);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) conf[i] = acc;
}

}  // namespace glue

// ---------------- launchers ----------------

// mHC step (mhc.cuh semantics) for any hc ≥ 1 and any even d: the fast two-kernel version when hc = 4,
// d % 256 == 0 and the workspace is set; else one CTA per token (HC a template argument up to 8, a run-time
// count above).
inline Status mhc_step_any(const MhcParams& p, int hc, cudaStream_t stream) {
  if (hc < 1 || p.T < 0 || p.d <= 0 || p.d % 2) return bad_arg("mhc_step_any: hc >= 1, d even");
  if (p.x && (!p.mix_prev || !p.H_out)) return bad_arg("mhc_step_any: x needs mix_prev and H_out");
  if (p.T == 0) return Status::Ok();
  if (hc == 4 && p.d % 256 == 0 && p.v && p.partial) return mhc_step(p, hc, stream);
  switch (hc) {
    case 1: glue::mhc_generic_kernel<1><<<p.T, 256, 0, stream>>>(p); break;
    case 2: glue::mhc_generic_kernel<2><<<p.T, 256, 0, stream>>>(p); break;
    case 3: glue::mhc_generic_kernel<3><<<p.T, 256, 0, stream>>>(p); break;
    case 4: glue::mhc_generic_kernel<4><<<p.T, 256, 0, stream>>>(p); break;
    case 5: glue::mhc_generic_kernel<5><<<p.T, 256, 0, stream>>>(p); break;
    case 6: glue::mhc_generic_kernel<6><<<p.T, 256, 0, stream>>>(p); break;
    case 7: glue::mhc_generic_kernel<7><<<p.T, 256, 0, stream>>>(p); break;
    case 8: glue::mhc_generic_kernel<8><<<p.T, 256, 0, stream>>>(p); break;
    default: glue::mhc_runtime_kernel<<<p.T, 256, 0, stream>>>(p, hc); break;
  }
  return launch_status("mhc generic");
}

// The final collapse and norm of rows [0, rows) (collapse_norm_kernel), any hc and d.
inline Status collapse_norm(const bf16_t* H, const float* pre, int pre_stride, int hc, int d, const float* w, float eps,
                            bf16_t* xb, bf16_t* y, int rows, cudaStream_t stream) {
  if (rows < 0 || hc < 1 || d <= 0) return bad_arg("collapse_norm: bad shape");
  if (rows == 0) return Status::Ok();
  glue::collapse_norm_kernel<<<rows, 128, 0, stream>>>(H, pre, pre_stride, hc, d, w, eps, xb, y);
  return launch_status("collapse norm");
}

// Sparse attention (attention.cuh semantics) for any R, H, D (D % 32 == 0) and any number of entries: the
// tensor-core kernel when H % 16 == 0, D % 128 == 0, D ≤ 1024 and its shared memory fits; else one CTA per
// (head, row), keeping the scores in shared memory when they fit and computing them twice when they do not.
inline Status sparse_attention_any(const SparseAttnParams& p, cudaStream_t stream) {
  if (p.R < 0 || p.H <= 0 || p.D <= 0 || p.D % 32 || p.n_win < 0 || p.n_comp < 0) return bad_arg("sparse_attention_any: bad shape");
  if (p.R == 0) return Status::Ok();
  if (p.H % 16 == 0 && p.D % 128 == 0 && p.D <= 1024 && detail::attn::smem_bytes(p, 16) <= 227 * 1024)
    return sparse_attention(p, stream);
  const int tot = p.n_win + p.n_comp;
  const size_t smem = size_t(p.D) * 4 + size_t(tot) * 8;
  if (smem <= 200 * 1024) {
    if (smem > 48 * 1024)
      DSV41_CUDA_TRY(cudaFuncSetAttribute(glue::sparse_attn_generic_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(smem)),
                     "sparse attention generic: smem attribute");
    glue::sparse_attn_generic_kernel<<<dim3(p.H, p.R), 128, smem, stream>>>(p);
    return launch_status("sparse attention generic");
  }
  glue::sparse_attn_stream_kernel<<<dim3(p.H, p.R, ceil_div(p.D, glue::kStreamDims)), 128, 0, stream>>>(p);
  return launch_status("sparse attention stream");
}

inline Status index_scores_any(const IndexScoreParams& p, cudaStream_t stream) {
  if (p.R == 0 || p.n == 0) return Status::Ok();
  if (p.dI == 128 && (p.nI == 16 || p.nI == 32)) return index_scores(p, stream);
  if (p.dI % 32) return bad_arg("index_scores_any: dI % 32");
  const int64_t warps = int64_t(p.R) * p.n;
  glue::index_scores_generic_kernel<<<glue::blocks_for(warps * 32), glue::kThreads, 0, stream>>>(p);
  return launch_status("index scores generic");
}

}  // namespace dsv41::gpu
