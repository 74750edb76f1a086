// Glue kernels of the layer unit on the GPU: embedding to the residual streams, Engram gather and gate, DSpark taps,
// the shape-generic mHC step (any hc, any d) and its launchers, hc_post, the final collapse and norm.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/glue_common.cuh>
#include <dsv41/backend/cuda/kernels/mhc.cuh>
#include <dsv41/numeric/sum_order.hpp>

namespace dsv41::gpu {

namespace glue {

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
// table holds rows [row0, row0 + n_rows) (a rank's share under expert/Engram parallel; 0 and all rows otherwise);
// other rows read as zero.
__global__ void engram_gather_kernel(const int64_t* __restrict__ ids, int stride, int col0, int cols, int hd,
                                     const uint8_t* __restrict__ table, const uint8_t* __restrict__ tscale,
                                     int64_t n_rows, int S, bf16_t* __restrict__ out, int64_t row0 = 0) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * cols * hd) return;
  const int i = int(id % hd);
  const int64_t tc = id / hd;
  const int c = int(tc % cols), t = int(tc / cols);
  const int64_t rid = ids[int64_t(t) * stride + col0 + c] - row0;
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
// memory grows with d. The sums of squares run in one thread each (the CPU's order): O(hc·d) serial steps, a
// price this path (odd shapes, tiny models) pays for BF16 outputs that round as the CPU's.
template <int HC>
__global__ void __launch_bounds__(256) mhc_generic_kernel(const MhcParams p) {
  constexpr int NM = (2 + HC) * HC, NQ = NM + 2;
  __shared__ float red[NQ][8];
  __shared__ float q[NQ];
  const int t = blockIdx.x, d = p.d;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float acc[NM];  // the NM dot products; the two sums of squares come after, in the CPU's order
#pragma unroll
  for (int o = 0; o < NM; ++o) acc[o] = 0.f;
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
#pragma unroll
    for (int o = 0; o < NM; ++o) {
      const float* f = p.fn + int64_t(o) * HC * d + i;
#pragma unroll
      for (int k = 0; k < HC; ++k) acc[o] = fmaf(h[k], f[int64_t(k) * d], acc[o]);
    }
  }
#pragma unroll
  for (int o = 0; o < NM; ++o) {
    const float s = warp_sum(acc[o]);
    if (lane == 0) red[o][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x < NM) {
    float s = 0.f;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s += red[threadIdx.x][w];
    q[threadIdx.x] = s;
  }
  __syncthreads();  // also makes every thread's H_out columns visible to the block
  const bf16_t* Hs = p.x ? p.H_out : p.H_in;
  // The two sums of squares again, in the CPU's order (cpu::sum_squares: torch's cascade, numeric/sum_order.hpp),
  // so the norm's BF16 outputs round as the CPU's do: on a tiny DSpark block one flipped value of x_attn moves
  // every row.
  if (threadIdx.x == 0) {
    q[NM + 1] = num::cascade_sum_squares(d, [&](int i) {
      float v = 0.f;
      for (int j = 0; j < HC; ++j) v = __fadd_rn(v, __fmul_rn(pu[j], bf2f(Hs[(int64_t(t) * HC + j) * d + i])));
      return bf16r(v);
    });
  } else if (threadIdx.x == 32) {
    const bf16_t* row = Hs + int64_t(t) * HC * d;
    q[NM] = num::cascade_sum_squares(HC * d, [&](int i) { return bf2f(row[i]); });
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // the coefficients in one thread (mhc_coefficients: the reference's operation order)
    detail::mhc_coefficients<HC>(q, q[NM], d, p.norm_eps, p.scale, p.base, p.hc_eps, p.iters,
                                 p.mix_out + int64_t(t) * ((2 + HC) * HC));
  }
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(q[NM + 1], float(d)), p.norm_eps)));
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
  if (d <= 256) {  // small rows (tiny models): the CPU's order (cpu::sum_squares), one thread
    __shared__ float exact;
    if (threadIdx.x == 0) exact = num::cascade_sum_squares(d, collapse);
    __syncthreads();
    ss = exact;
  }
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(d)), eps)));
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    y[int64_t(t) * d + i] = __float2bfloat16_rn(__fmul_rn(w[i], __fmul_rn(collapse(i), rs)));
}

}  // namespace glue

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

// The same with hc known at compile time (a preset's Dims<C>::hc): only that count's kernels are instantiated
// and the dispatch on hc is gone; HC > 8 takes the run-time kernel.
template <int HC>
inline Status mhc_step_fixed(const MhcParams& p, cudaStream_t stream) {
  static_assert(HC >= 1, "mHC needs at least one stream");
  if (p.T < 0 || p.d <= 0 || p.d % 2) return bad_arg("mhc_step_fixed: d even");
  if (p.x && (!p.mix_prev || !p.H_out)) return bad_arg("mhc_step_fixed: x needs mix_prev and H_out");
  if (p.T == 0) return Status::Ok();
  if constexpr (HC == 4)
    if (p.d % 256 == 0 && p.v && p.partial) return mhc_step(p, HC, stream);
  if constexpr (HC <= 8) glue::mhc_generic_kernel<HC><<<p.T, 256, 0, stream>>>(p);
  else glue::mhc_runtime_kernel<<<p.T, 256, 0, stream>>>(p, HC);
  return launch_status("mhc fixed");
}

// The final collapse and norm of rows [0, rows) (collapse_norm_kernel), any hc and d.
inline Status collapse_norm(const bf16_t* H, const float* pre, int pre_stride, int hc, int d, const float* w, float eps,
                            bf16_t* xb, bf16_t* y, int rows, cudaStream_t stream) {
  if (rows < 0 || hc < 1 || d <= 0) return bad_arg("collapse_norm: bad shape");
  if (rows == 0) return Status::Ok();
  glue::collapse_norm_kernel<<<rows, 128, 0, stream>>>(H, pre, pre_stride, hc, d, w, eps, xb, y);
  return launch_status("collapse norm");
}

}  // namespace dsv41::gpu
