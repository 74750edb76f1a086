// SPEC §4.1 mHC on the GPU, one step of the single-pass scheme, fused so that the residual streams are
// read once and written once:
//   H_out = x ? hc_post(x, H_in, post_prev, comb_prev) : H_in          (BF16, written only when x is given)
//   mix   = mixes(H_out, fn, base, scale)                                (pre, post, comb: FP32 [T, (2+hc)·hc])
//   y     = rmsnorm(hc_pre(H_out, pre_use), norm_w)                       (BF16 [T, d])
// Kernel 1 (grid: channel slices × token groups) does the elementwise work and the partial sums (Σz², the
// (2+hc)·hc dot products with fn, Σv² of the collapsed row); kernel 2 (one CTA per token) reduces the
// partials in a fixed order, runs the sigmoid/softmax/Sinkhorn in one thread with the reference's
// operation order, and applies the norm to the collapsed row.
// Elementwise parts use separate FP32 multiplies and adds as the CPU does (bit-exact); the long sums
// (over hc·d and d) are reordered (bounds in tests/gpu/check_mhc.cuh).
#pragma once
#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

struct MhcParams {
  int T = 0, d = 0;
  const bf16_t* H_in = nullptr;     // [T, HC, d]
  const bf16_t* x = nullptr;        // [T, d] sub-layer output, or nullptr
  const float* mix_prev = nullptr;  // [T, NM] previous coefficients (post, comb used) when x is given
  const float* pre_use = nullptr;   // collapse weights, row t at pre_use + t·pre_stride
  int pre_stride = 0;
  const float* fn = nullptr;        // [NM, HC·d]
  const float* base = nullptr;      // [NM]
  const float* scale = nullptr;     // [3]
  const float* norm_w = nullptr;    // [d]
  float norm_eps = 1e-20f, hc_eps = 1e-6f;
  int iters = 20;
  bf16_t* H_out = nullptr;          // [T, HC, d] (used when x is given)
  float* mix_out = nullptr;         // [T, NM]: pre[HC], post[HC], comb[HC·HC] (comb[j·HC+k])
  bf16_t* y = nullptr;              // [T, d]
  // workspace
  bf16_t* v = nullptr;              // [T, d]
  float* partial = nullptr;         // [T, d/256, NM + 2]
};

namespace detail {
namespace mhc {
constexpr int SLICE = 256, THREADS = 128;
}

template <int HC, int TPB>
__global__ void __launch_bounds__(128) mhc_stream_kernel(const MhcParams p) {
  constexpr int NM = (2 + HC) * HC, NQ = NM + 2;
  const int d = p.d, nsl = d / mhc::SLICE, slice = blockIdx.x;
  const int c = slice * mhc::SLICE + 2 * threadIdx.x;
  const int t0 = blockIdx.y * TPB;
  float h[TPB][HC][2];
  float acc[TPB][NQ];
#pragma unroll
  for (int u = 0; u < TPB; ++u) {
#pragma unroll
    for (int q = 0; q < NQ; ++q) acc[u][q] = 0.f;
    const int t = t0 + u;
    if (t >= p.T) {
#pragma unroll
      for (int k = 0; k < HC; ++k) h[u][k][0] = h[u][k][1] = 0.f;
      continue;
    }
    float hin[HC][2];
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(p.H_in + (int64_t(t) * HC + j) * d + c);
      hin[j][0] = __low2float(v);
      hin[j][1] = __high2float(v);
    }
    if (p.x) {
      const float* mp = p.mix_prev + int64_t(t) * NM;
      const __nv_bfloat162 xv = *reinterpret_cast<const __nv_bfloat162*>(p.x + int64_t(t) * d + c);
      const float xx[2] = {__low2float(xv), __high2float(xv)};
#pragma unroll
      for (int k = 0; k < HC; ++k) {
        const float post = mp[HC + k];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float a = 0.f;
#pragma unroll
          for (int j = 0; j < HC; ++j) a = __fadd_rn(a, __fmul_rn(mp[2 * HC + j * HC + k], hin[j][e]));
          h[u][k][e] = bf16r(__fadd_rn(__fmul_rn(post, xx[e]), a));
        }
        *reinterpret_cast<uint32_t*>(p.H_out + (int64_t(t) * HC + k) * d + c) = pack_bf16x2(h[u][k][0], h[u][k][1]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < HC; ++k) { h[u][k][0] = hin[k][0]; h[u][k][1] = hin[k][1]; }
    }
    // collapse with pre_use, and the sums of squares
    const float* pu = p.pre_use + int64_t(t) * p.pre_stride;
    float vv[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float a = 0.f;
#pragma unroll
      for (int j = 0; j < HC; ++j) a = __fadd_rn(a, __fmul_rn(pu[j], h[u][j][e]));
      vv[e] = bf16r(a);
    }
    *reinterpret_cast<uint32_t*>(p.v + int64_t(t) * d + c) = pack_bf16x2(vv[0], vv[1]);
    acc[u][NM + 1] = vv[0] * vv[0] + vv[1] * vv[1];
#pragma unroll
    for (int k = 0; k < HC; ++k) acc[u][NM] += h[u][k][0] * h[u][k][0] + h[u][k][1] * h[u][k][1];
  }
  // dot products with fn (each fn value read once per TPB tokens)
#pragma unroll
  for (int o = 0; o < NM; ++o) {
#pragma unroll
    for (int k = 0; k < HC; ++k) {
      const float2 f = __ldg(reinterpret_cast<const float2*>(p.fn + int64_t(o) * HC * d + int64_t(k) * d + c));
#pragma unroll
      for (int u = 0; u < TPB; ++u) acc[u][o] = fmaf(h[u][k][0], f.x, fmaf(h[u][k][1], f.y, acc[u][o]));
    }
  }
  // block reduction, fixed order
  __shared__ float red[mhc::THREADS / 32][TPB * NQ];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int u = 0; u < TPB; ++u)
#pragma unroll
    for (int q = 0; q < NQ; ++q) {
      const float s = warp_sum(acc[u][q]);
      if (lane == 0) red[warp][u * NQ + q] = s;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < TPB * NQ; i += blockDim.x) {
    const int u = i / NQ, q = i % NQ, t = t0 + u;
    if (t >= p.T) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < mhc::THREADS / 32; ++w) s += red[w][i];
    p.partial[(int64_t(t) * nsl + slice) * NQ + q] = s;
  }
}

__device__ __forceinline__ float sigmoid_ref(float x) { return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x))); }

// SPEC §4.1 mixes from the reduced sums q[0..NM) (projections) and q[NM] (sum of squares of the streams):
// pre, post and the Sinkhorn-normalized comb, in the reference's operation order. One thread. HC > 0: the
// stream count as a template argument (local arrays); HC = 0: hc_rt streams, computed in place in `out`
// (q may be out itself: every step reads and writes the same index).
template <int HC>
__device__ inline void mhc_coefficients(const float* q, float qss, int d, float norm_eps, const float* scale,
                                        const float* base, float hc_eps, int iters, float* out, int hc_rt = HC) {
  const int hc = HC > 0 ? HC : hc_rt, NM = (2 + hc) * hc;
  float m_loc[HC > 0 ? (2 + HC) * HC : 1], C_loc[HC > 0 ? HC * HC : 1];
  float* m = HC > 0 ? m_loc : out;
  float* C = HC > 0 ? C_loc : out + 2 * hc;
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(qss, float(hc * d)), norm_eps)));
  for (int o = 0; o < NM; ++o) m[o] = __fmul_rn(q[o], rs);
  for (int j = 0; j < hc; ++j) {
    out[j] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(m[j], scale[0]), base[j])), hc_eps);
    out[hc + j] = __fmul_rn(2.f, sigmoid_ref(__fadd_rn(__fmul_rn(m[hc + j], scale[1]), base[hc + j])));
  }
  for (int j = 0; j < hc; ++j) {
    float mx = -INFINITY;
    for (int k = 0; k < hc; ++k) {
      C[j * hc + k] = __fadd_rn(__fmul_rn(m[2 * hc + j * hc + k], scale[2]), base[2 * hc + j * hc + k]);
      mx = fmaxf(mx, C[j * hc + k]);
    }
    float sum = 0.f;
    for (int k = 0; k < hc; ++k) sum = __fadd_rn(sum, (C[j * hc + k] = expf(__fsub_rn(C[j * hc + k], mx))));
    for (int k = 0; k < hc; ++k) C[j * hc + k] = __fadd_rn(__fdiv_rn(C[j * hc + k], sum), hc_eps);
  }
  auto norm_cols = [&] {
    for (int k = 0; k < hc; ++k) {
      float sum = 0.f;
      for (int j = 0; j < hc; ++j) sum = __fadd_rn(sum, C[j * hc + k]);
      for (int j = 0; j < hc; ++j) C[j * hc + k] = __fdiv_rn(C[j * hc + k], __fadd_rn(sum, hc_eps));
    }
  };
  auto norm_rows = [&] {
    for (int j = 0; j < hc; ++j) {
      float sum = 0.f;
      for (int k = 0; k < hc; ++k) sum = __fadd_rn(sum, C[j * hc + k]);
      for (int k = 0; k < hc; ++k) C[j * hc + k] = __fdiv_rn(C[j * hc + k], __fadd_rn(sum, hc_eps));
    }
  };
  norm_cols();
  for (int it = 0; it < iters - 1; ++it) { norm_rows(); norm_cols(); }
  for (int i = 0; i < hc * hc; ++i) out[2 * hc + i] = C[i];
}

template <int HC>
__global__ void __launch_bounds__(256) mhc_finish_kernel(const MhcParams p) {
  constexpr int NM = (2 + HC) * HC, NQ = NM + 2;
  const int t = blockIdx.x, d = p.d, nsl = d / mhc::SLICE;
  __shared__ float q[NQ];
  if (threadIdx.x < NQ) {
    float s = 0.f;
    for (int sl = 0; sl < nsl; ++sl) s += p.partial[(int64_t(t) * nsl + sl) * NQ + threadIdx.x];
    q[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mhc_coefficients<HC>(q, q[NM], d, p.norm_eps, p.scale, p.base, p.hc_eps, p.iters, p.mix_out + int64_t(t) * ((2 + HC) * HC));
  }
  // y = rmsnorm(v)
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(q[NM + 1], float(d)), p.norm_eps)));
  for (int c = 2 * threadIdx.x; c < d; c += 2 * blockDim.x) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(p.v + int64_t(t) * d + c);
    const float2 w = *reinterpret_cast<const float2*>(p.norm_w + c);
    *reinterpret_cast<uint32_t*>(p.y + int64_t(t) * d + c) =
        pack_bf16x2(__fmul_rn(w.x, __fmul_rn(__low2float(v), rs)), __fmul_rn(w.y, __fmul_rn(__high2float(v), rs)));
  }
}
}  // namespace detail

// Workspace floats for v and the partials.
inline size_t mhc_workspace_bytes(int T, int d, int hc) {
  return size_t(T) * d * 2 + 256 + size_t(T) * (d / 256) * ((2 + hc) * hc + 2) * 4;
}
// Carves p.v and p.partial from a caller-owned workspace of mhc_workspace_bytes.
inline void mhc_set_workspace(MhcParams& p, int hc, void* ws) {
  uint8_t* b = static_cast<uint8_t*>(ws);
  p.v = reinterpret_cast<bf16_t*>(b);
  p.partial = reinterpret_cast<float*>(b + ((size_t(p.T) * p.d * 2 + 255) & ~size_t(255)));
  (void)hc;
}

// The fast path: hc = 4 (the release), d % 256 == 0, workspace set (mhc_step_any in glue.cuh takes any shape).
inline Status mhc_step(const MhcParams& p, int hc, cudaStream_t stream) {
  if (hc != 4 || p.d % 256 || p.T < 0 || !p.v || !p.partial) return bad_arg("mhc_step: hc 4, d % 256");
  if (p.x && (!p.mix_prev || !p.H_out)) return bad_arg("mhc_step: x needs mix_prev and H_out");
  if (p.T == 0) return Status::Ok();
  const int tpb = p.T >= 64 ? 4 : 1;  // tokens per CTA: each fn value is read once per tpb tokens
  dim3 grid(p.d / detail::mhc::SLICE, ceil_div(p.T, tpb));
  if (tpb == 4) detail::mhc_stream_kernel<4, 4><<<grid, detail::mhc::THREADS, 0, stream>>>(p);
  else detail::mhc_stream_kernel<4, 1><<<grid, detail::mhc::THREADS, 0, stream>>>(p);
  DSV41_TRY(launch_status("mhc_step streams"));
  detail::mhc_finish_kernel<4><<<p.T, 256, 0, stream>>>(p);
  return launch_status("mhc_step finish");
}

}  // namespace dsv41::gpu
