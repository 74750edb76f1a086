// SPEC §4.1 mHC on the GPU, one step of the single-pass scheme, fused so that the residual streams are
// read once and written once:
//   H_out = x ? hc_post(x, H_in, post_prev, comb_prev) : H_in          (BF16, written only when x is given)
//   mix   = mixes(H_out, fn, base, scale)                                (pre, post, comb: FP32 [T, (2+hc)·hc])
//   y     = rmsnorm(hc_pre(H_out, pre_use), norm_w)                       (BF16 [T, d])
// Kernel 1 does the elementwise work and the partial sums (Σz², the (2+hc)·hc dot products with fn, Σv² of the
// collapsed row) over 64-channel slices × 3 groups of outputs × token groups, so that even one token spreads fn
// (1.5-2 MB of FP32) over a few hundred CTAs; a token's sums do not depend on T (the forward must not depend on
// how a prompt is chunked: a T-dependent order moved the bundled model's logits by 2.6%). Kernel 2 (token ×
// 1024-channel chunks) reduces the partials in a fixed order, runs the sigmoid/softmax/Sinkhorn on one lane per
// comb entry with the reference's operation order per value (the serial version's bits), and applies the norm to
// the collapsed row.
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
  float* partial = nullptr;         // [T, NM + 2, d/64] partial sums
};

namespace detail {
namespace mhc {
constexpr int THREADS = 128, NSLICE = 64, OPG = 8;  // kernel 1: threads, channels per CTA, outputs per group
constexpr int CHUNK = 1024;  // channels normalized per CTA of the finish kernel
}

// Kernel 1, HC = 4: grid (d/64, NM/OPG, ceil(T/TPB)), 4 warps. Warp w takes stream w's share of the
// group's dot products, each lane 2 channels; every thread forms all HC streams of its channels (hc_post is 16
// products per channel, cheaper than an exchange). Group 0 also writes H_out (warp w: stream w), v (warp 0) and
// the sums of squares.
template <int TPB, int OPG>
__global__ void __launch_bounds__(128) mhc_slice_kernel(const MhcParams p) {
  constexpr int HC = 4, NM = (2 + HC) * HC, NQ = NM + 2, NV = OPG + 2;
  static_assert(NM % OPG == 0);
  const int d = p.d, P = d / mhc::NSLICE, slice = blockIdx.x, g = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = slice * mhc::NSLICE + 2 * lane;
  const int t0 = blockIdx.z * TPB;
  const bool lead = g == 0;
  float2 f[OPG];  // weights first: they do not depend on the previous kernel's outputs
#pragma unroll
  for (int o = 0; o < OPG; ++o)
    f[o] = __ldg(reinterpret_cast<const float2*>(p.fn + int64_t(g * OPG + o) * HC * d + int64_t(warp) * d + c));
  // Every token's inputs are loaded before the first store (the stores could alias them, so loads after a store
  // would wait for it: the tokens of a CTA ran one after another). The per-token coefficients go through shared
  // memory.
  __shared__ float smp[TPB][NM], spu[TPB][HC];
  for (int i = threadIdx.x; i < TPB * NM; i += blockDim.x) {
    const int t = t0 + i / NM;
    smp[i / NM][i % NM] = p.x && t < p.T ? p.mix_prev[int64_t(t) * NM + i % NM] : 0.f;
  }
  if (threadIdx.x < TPB * HC) {
    const int t = t0 + int(threadIdx.x) / HC;
    spu[threadIdx.x / HC][threadIdx.x % HC] = t < p.T ? p.pre_use[int64_t(t) * p.pre_stride + threadIdx.x % HC] : 0.f;
  }
  uint32_t hraw[TPB][HC], xraw[TPB];
#pragma unroll
  for (int u = 0; u < TPB; ++u) {
    const int t = t0 + u;
    xraw[u] = 0;
#pragma unroll
    for (int j = 0; j < HC; ++j) hraw[u][j] = 0;
    if (t >= p.T) continue;
#pragma unroll
    for (int j = 0; j < HC; ++j) hraw[u][j] = *reinterpret_cast<const uint32_t*>(p.H_in + (int64_t(t) * HC + j) * d + c);
    if (p.x) xraw[u] = *reinterpret_cast<const uint32_t*>(p.x + int64_t(t) * d + c);
  }
  __syncthreads();
  float acc[TPB][NV];
#pragma unroll
  for (int u = 0; u < TPB; ++u) {
#pragma unroll
    for (int q = 0; q < NV; ++q) acc[u][q] = 0.f;
    const int t = t0 + u;
    if (t >= p.T) continue;
    float h[HC][2];
#pragma unroll
    for (int j = 0; j < HC; ++j) {
      h[j][0] = __uint_as_float(hraw[u][j] << 16);
      h[j][1] = __uint_as_float(hraw[u][j] & 0xFFFF0000u);
    }
    if (p.x) {
      const float* mp = smp[u];
      const float xx[2] = {__uint_as_float(xraw[u] << 16), __uint_as_float(xraw[u] & 0xFFFF0000u)};
      float ho[HC][2];
#pragma unroll
      for (int k = 0; k < HC; ++k) {
        const float post = mp[HC + k];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float a = 0.f;
#pragma unroll
          for (int j = 0; j < HC; ++j) a = __fadd_rn(a, __fmul_rn(mp[2 * HC + j * HC + k], h[j][e]));
          ho[k][e] = bf16r(__fadd_rn(__fmul_rn(post, xx[e]), a));
        }
      }
#pragma unroll
      for (int k = 0; k < HC; ++k) {
        h[k][0] = ho[k][0];
        h[k][1] = ho[k][1];
        if (lead && k == warp)
          *reinterpret_cast<uint32_t*>(p.H_out + (int64_t(t) * HC + k) * d + c) = pack_bf16x2(ho[k][0], ho[k][1]);
      }
    }
    float hw[2] = {h[0][0], h[0][1]};
#pragma unroll
    for (int k = 1; k < HC; ++k)
      if (k == warp) { hw[0] = h[k][0]; hw[1] = h[k][1]; }
#pragma unroll
    for (int o = 0; o < OPG; ++o) acc[u][o] = fmaf(hw[0], f[o].x, __fmul_rn(hw[1], f[o].y));
    if (lead) {
      acc[u][OPG] = __fadd_rn(__fmul_rn(hw[0], hw[0]), __fmul_rn(hw[1], hw[1]));
      if (warp == 0) {
        const float* pu = spu[u];
        float vv[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float a = 0.f;
#pragma unroll
          for (int j = 0; j < HC; ++j) a = __fadd_rn(a, __fmul_rn(pu[j], h[j][e]));
          vv[e] = bf16r(a);
        }
        *reinterpret_cast<uint32_t*>(p.v + int64_t(t) * d + c) = pack_bf16x2(vv[0], vv[1]);
        acc[u][OPG + 1] = __fadd_rn(__fmul_rn(vv[0], vv[0]), __fmul_rn(vv[1], vv[1]));
      }
    }
  }
  // block reduction, fixed order: lanes (xor tree), then the 4 warps in order
  __shared__ float red[4][TPB * NV];
#pragma unroll
  for (int u = 0; u < TPB; ++u)
#pragma unroll
    for (int q = 0; q < NV; ++q) {
      const float s = warp_sum(acc[u][q]);
      if (lane == 0) red[warp][u * NV + q] = s;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < TPB * NV; i += blockDim.x) {
    const int u = i / NV, k = i % NV, t = t0 + u;
    if (t >= p.T || (k >= OPG && !lead)) continue;
    const float s = __fadd_rn(__fadd_rn(__fadd_rn(red[0][i], red[1][i]), red[2][i]), red[3][i]);
    const int q = k < OPG ? g * OPG + k : NM + (k - OPG);
    p.partial[(int64_t(t) * NQ + q) * P + slice] = s;
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

// mhc_coefficients with one lane per comb entry (HC·HC <= 32 lanes of the calling warp, which must be whole):
// every value goes through the same operations in the same order as in the serial version (sums over a row
// or column gathered by shuffles in index order), so the results are the same bits.
template <int HC>
__device__ inline void mhc_coefficients_warp(const float* q, float qss, int d, float norm_eps, const float* scale,
                                             const float* base, float hc_eps, int iters, float* out) {
  static_assert(HC * HC <= 32);
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31, e = lane < HC * HC ? lane : 0, j = e / HC, k = e % HC;
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(qss, float(HC * d)), norm_eps)));
  if (lane < HC) {
    out[lane] = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(__fmul_rn(q[lane], rs), scale[0]), base[lane])), hc_eps);
    out[HC + lane] = __fmul_rn(
        2.f, sigmoid_ref(__fadd_rn(__fmul_rn(__fmul_rn(q[HC + lane], rs), scale[1]), base[HC + lane])));
  }
  float C = __fadd_rn(__fmul_rn(__fmul_rn(q[2 * HC + e], rs), scale[2]), base[2 * HC + e]);
  float mx = -INFINITY;
#pragma unroll
  for (int kk = 0; kk < HC; ++kk) mx = fmaxf(mx, __shfl_sync(kAll, C, j * HC + kk));
  C = expf(__fsub_rn(C, mx));
  float sum = 0.f;
#pragma unroll
  for (int kk = 0; kk < HC; ++kk) sum = __fadd_rn(sum, __shfl_sync(kAll, C, j * HC + kk));
  C = __fadd_rn(__fdiv_rn(C, sum), hc_eps);
  auto norm = [&](int stride, int first) {  // columns: (j·HC + k) over j; rows: over k
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < HC; ++i) s = __fadd_rn(s, __shfl_sync(kAll, C, first + i * stride));
    C = __fdiv_rn(C, __fadd_rn(s, hc_eps));
  };
  norm(HC, k);
  for (int it = 0; it < iters - 1; ++it) {
    norm(1, j * HC);
    norm(HC, k);
  }
  if (lane < HC * HC) out[2 * HC + lane] = C;
}

// grid (T, ceil(d / CHUNK)), 256 threads: every CTA reduces its token's Σv² (the same bits in each) and normalizes
// its chunk of channels; chunk 0 also reduces the projections and Σz² and writes the coefficients. P partials per
// quantity, summed lane-strided then by the xor tree (a fixed order). All partials are loaded before the first add (with
// a loop of dependent loads the kernel took 9.9 us at one token).
template <int HC>
__global__ void __launch_bounds__(256) mhc_finish_kernel(const MhcParams p, int P) {
  constexpr int NM = (2 + HC) * HC, NQ = NM + 2;
  const int t = blockIdx.x, d = p.d;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool lead = blockIdx.y == 0;
  __shared__ float q[NQ];
  const float* part = p.partial + int64_t(t) * NQ * P;
  // warp w: quantities w, w + 8, ... (outside chunk 0 only Σv²); all loads issued before the first add
  constexpr int R = (NQ + 7) / 8, M = 4;  // M·32 partials per quantity in the unrolled part
  float v[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int i = warp + 8 * r, j = lane + 32 * m;
      v[r][m] = i < NQ && (lead || i == NM + 1) && j < P ? part[int64_t(i) * P + j] : 0.f;
    }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = warp + 8 * r;
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) s = __fadd_rn(s, v[r][m]);
    if (i < NQ && (lead || i == NM + 1))
      for (int j = lane + 32 * M; j < P; j += 32) s = __fadd_rn(s, part[int64_t(i) * P + j]);
    s = warp_sum(s);
    if (lane == 0 && i < NQ) q[i] = s;
  }
  __syncthreads();
  if (lead && warp == 0)
    mhc_coefficients_warp<HC>(q, q[NM], d, p.norm_eps, p.scale, p.base, p.hc_eps, p.iters, p.mix_out + int64_t(t) * NM);
  // y = rmsnorm(v) over this CTA's chunk
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(q[NM + 1], float(d)), p.norm_eps)));
  const int c1 = min(d, (int(blockIdx.y) + 1) * mhc::CHUNK);
  for (int c = int(blockIdx.y) * mhc::CHUNK + 2 * threadIdx.x; c < c1; c += 2 * blockDim.x) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(p.v + int64_t(t) * d + c);
    const float2 w = *reinterpret_cast<const float2*>(p.norm_w + c);
    *reinterpret_cast<uint32_t*>(p.y + int64_t(t) * d + c) =
        pack_bf16x2(__fmul_rn(w.x, __fmul_rn(__low2float(v), rs)), __fmul_rn(w.y, __fmul_rn(__high2float(v), rs)));
  }
}

}  // namespace detail

// Workspace bytes for v and the partials.
inline size_t mhc_workspace_bytes(int T, int d, int hc) {
  return size_t(T) * d * 2 + 256 + size_t(T) * (d / detail::mhc::NSLICE) * ((2 + hc) * hc + 2) * 4;
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
  if (p.T > 65535 * 8) return bad_arg("mhc_step: T too large");
  if (p.x && (!p.mix_prev || !p.H_out)) return bad_arg("mhc_step: x needs mix_prev and H_out");
  if (p.T == 0) return Status::Ok();
  namespace m = detail::mhc;
  const int P = p.d / m::NSLICE, groups = 24 / m::OPG;  // P partial sums per quantity
  if (p.T <= 4) detail::mhc_slice_kernel<1, m::OPG><<<dim3(P, groups, p.T), m::THREADS, 0, stream>>>(p);
  else if (p.T <= 32) detail::mhc_slice_kernel<4, m::OPG><<<dim3(P, groups, ceil_div(p.T, 4)), m::THREADS, 0, stream>>>(p);
  else detail::mhc_slice_kernel<8, m::OPG><<<dim3(P, groups, ceil_div(p.T, 8)), m::THREADS, 0, stream>>>(p);
  DSV41_TRY(launch_status("mhc_step streams"));
  detail::mhc_finish_kernel<4><<<dim3(p.T, ceil_div(p.d, m::CHUNK)), 256, 0, stream>>>(p, P);
  return launch_status("mhc_step finish");
}

}  // namespace dsv41::gpu
