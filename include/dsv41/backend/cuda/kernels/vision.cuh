// SPEC §4.10 vision kernels (the GEMMs are cuBLASLt, blaslt.hpp): patch padding, 2-D rope, bidirectional
// flash attention, residual add, SwiGLU product, the r×r unfold merge and exact GELU. BF16 in/out; every
// rounding point follows DeepSeek's vision.py run in BF16:
//  - rope: (x1·cos − x2·sin, x2·cos + x1·sin) in FP32, one rounding;
//  - attention: scores and softmax in FP32, out = bf16(Σ p·v / Σ p). The P·V product on BF16 tensor cores
//    takes P as a pair hi = bf16(p), lo = bf16(p − hi) (two MMAs, P good to ~2⁻¹⁷): the vision-tiny golden
//    follows FP32 probabilities (row rel 3.6e-3 against 6.6e-3 with P rounded once, measured with the test's
//    host reference). SPLIT_P = false rounds P to BF16 once (FlashAttention-2's way, faster);
//  - residual: bf16(x + bf16(y)); SwiGLU: bf16(bf16(silu(g))·u); GELU: bf16(0.5·x·(1 + erf(x/√2))).
#pragma once
#include <cmath>

#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

// θ^(−2i/r) for i < r/2 (r = head_dim/2), computed on the host in FP32 like the reference.
struct VisionRopeFreqs {
  float f[32];
  int nf = 0;  // r/2 = head_dim/4
};

namespace vision_detail {

// dst [n, kp] = src [n, k] with zero columns k..kp.
template <int = 0>
__global__ void pad_cols_kernel(const bf16_t* __restrict__ src, int n, int k, int kp, bf16_t* __restrict__ dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * kp) return;
  const int64_t r = i / kp;
  const int c = int(i % kp);
  dst[i] = c < k ? src[r * k + c] : __float2bfloat16_rn(0.f);
}

// In place on q and k of qkv [n, 3·heads·hd]: patch p sits at (p / n_w, p % n_w); pair j < hd/2 of a head
// rotates by angle (j < nf ? row : col) · f[j % nf].
template <int = 0>
__global__ void rope2d_kernel(bf16_t* __restrict__ qkv, int n_w, int heads, int hd, const VisionRopeFreqs fr) {
  const int p = blockIdx.x, half = hd / 2, per = 2 * heads * half;
  const float row = float(p / n_w), col = float(p % n_w);
  bf16_t* base = qkv + int64_t(p) * 3 * heads * hd;
  for (int i = threadIdx.x; i < per; i += blockDim.x) {
    const int which = i / (heads * half), rem = i % (heads * half), h = rem / half, j = rem % half;
    bf16_t* x = base + which * heads * hd + h * hd;
    const float ang = __fmul_rn(j < fr.nf ? row : col, fr.f[j % fr.nf]);
    float s, c;
    sincosf(ang, &s, &c);
    const float x1 = bf2f(x[j]), x2 = bf2f(x[j + half]);
    x[j] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    x[j + half] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

// Flash attention over one image: CTA = 4 warps, each 16·MT query rows of one head (blockIdx.y); keys in
// blocks of 64 through double-buffered shared memory (cp.async), rows padded by 8 elements (conflict-free
// ldmatrix). q, k, v read in place from qkv [n, 3·heads·HD]; out [n, heads·HD].
template <int HD, int MT>
struct FlashCfg {
  static constexpr int BN = 64, LDS = HD + 8, BM = 64 * MT;
  static constexpr int SMEM = (BM + 4 * BN) * LDS * 2;
};

template <int HD, int MT, bool SPLIT_P>
__global__ void __launch_bounds__(128) vit_flash_kernel(const bf16_t* __restrict__ qkv, int n, int heads,
                                                        float scale_log2, bf16_t* __restrict__ out) {
  using C = FlashCfg<HD, MT>;
  constexpr int BN = C::BN, LDS = C::LDS, BM = C::BM, KS = HD / 16, NT = BN / 8, DT = HD / 8, CH = HD / 8;
  static_assert(HD % 16 == 0 && HD <= 128, "head_dim: a multiple of 16, at most 128");
  extern __shared__ __align__(16) uint8_t vit_smem[];
  bf16_t* Qs = reinterpret_cast<bf16_t*>(vit_smem);  // [BM][LDS]
  bf16_t* Ks = Qs + BM * LDS;                         // [2][BN][LDS]
  bf16_t* Vs = Ks + 2 * BN * LDS;                     // [2][BN][LDS]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y, q0 = blockIdx.x * BM;
  const int64_t ld = int64_t(3) * heads * HD;
  const bf16_t* Qg = qkv + h * HD;
  const bf16_t* Kg = qkv + int64_t(heads) * HD + h * HD;
  const bf16_t* Vg = qkv + int64_t(2) * heads * HD + h * HD;

  auto load_rows = [&](bf16_t* dst, const bf16_t* src, int row0, int rows) {
    for (int c = tid; c < rows * CH; c += 128) {
      const int r = c / CH, ch = c % CH, gr = row0 + r;
      const bool ok = gr < n;
      cp_async16(dst + r * LDS + ch * 8, src + int64_t(ok ? gr : 0) * ld + ch * 8, ok ? 16 : 0);
    }
  };
  load_rows(Qs, Qg, q0, BM);
  load_rows(Ks, Kg, 0, BN);
  load_rows(Vs, Vg, 0, BN);
  cp_async_commit();

  const int nkb = (n + BN - 1) / BN;
  float o[MT][DT][4], m[MT][2], l[MT][2];
  uint32_t qf[MT][KS][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int d = 0; d < DT; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mt][d][c] = 0.f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.f;
  }
  const int mi = lane >> 3;
  for (int j = 0; j < nkb; ++j) {
    cp_async_wait<0>();
    __syncthreads();  // block j landed; everyone is done with buffer (j + 1) & 1
    if (j + 1 < nkb) {
      load_rows(Ks + ((j + 1) & 1) * BN * LDS, Kg, (j + 1) * BN, BN);
      load_rows(Vs + ((j + 1) & 1) * BN * LDS, Vg, (j + 1) * BN, BN);
    }
    cp_async_commit();
    if (j == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          const int r = warp * 16 * MT + mt * 16 + (lane & 7) + 8 * (mi & 1);
          ldmatrix_x4(qf[mt][kk], Qs + r * LDS + 16 * kk + 8 * (mi >> 1));
        }
    }
    const bf16_t* Kb = Ks + (j & 1) * BN * LDS;
    const bf16_t* Vb = Vs + (j & 1) * BN * LDS;
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int jn = 0; jn < NT; ++jn)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mt][jn][c] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
#pragma unroll
      for (int jn = 0; jn < NT; jn += 2) {
        uint32_t r[4];
        ldmatrix_x4(r, Kb + (8 * (jn + (mi >> 1)) + (lane & 7)) * LDS + 16 * kk + 8 * (mi & 1));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][jn], qf[mt][kk], r[0], r[1]);
          mma_bf16(s[mt][jn + 1], qf[mt][kk], r[2], r[3]);
        }
      }
    // scale (log2 domain), mask keys past n, online softmax per row (rows g and g + 8 of each 16-row tile)
    const int kbase = j * BN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int jn = 0; jn < NT; ++jn)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = kbase + 8 * jn + 2 * t + (c & 1);
          s[mt][jn][c] = key < n ? s[mt][jn][c] * scale_log2 : -INFINITY;
        }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx = -INFINITY;
#pragma unroll
        for (int jn = 0; jn < NT; ++jn) mx = fmaxf(mx, fmaxf(s[mt][jn][2 * hh], s[mt][jn][2 * hh + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m[mt][hh], mx);  // finite: key kbase < n is in every block
        const float alpha = exp2f(m[mt][hh] - mnew);
        m[mt][hh] = mnew;
        float rs = 0.f;
#pragma unroll
        for (int jn = 0; jn < NT; ++jn)
#pragma unroll
          for (int c = 2 * hh; c < 2 * hh + 2; ++c) {
            const float p = exp2f(s[mt][jn][c] - mnew);
            s[mt][jn][c] = p;
            rs += p;
          }
        l[mt][hh] = l[mt][hh] * alpha + rs;
#pragma unroll
        for (int d = 0; d < DT; ++d) {
          o[mt][d][2 * hh] *= alpha;
          o[mt][d][2 * hh + 1] *= alpha;
        }
      }
    }
    // o += bf16(P) · V
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[MT][4], pl[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float* s0 = s[mt][2 * kk];
        const float* s1 = s[mt][2 * kk + 1];
        const float e[8] = {s0[0], s0[1], s0[2], s0[3], s1[0], s1[1], s1[2], s1[3]};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          pa[mt][q] = pack_bf16x2(e[2 * q], e[2 * q + 1]);
          if constexpr (SPLIT_P) {
            const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&pa[mt][q]);
            pl[mt][q] = pack_bf16x2(__fsub_rn(e[2 * q], __low2float(hi)), __fsub_rn(e[2 * q + 1], __high2float(hi)));
          }
        }
      }
#pragma unroll
      for (int d = 0; d < DT; d += 2) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, Vb + (16 * kk + 8 * (mi & 1) + (lane & 7)) * LDS + 8 * (d + (mi >> 1)));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][d], pa[mt], r[0], r[1]);
          mma_bf16(o[mt][d + 1], pa[mt], r[2], r[3]);
          if constexpr (SPLIT_P) {
            mma_bf16(o[mt][d], pl[mt], r[0], r[1]);
            mma_bf16(o[mt][d + 1], pl[mt], r[2], r[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  const int64_t ldo = int64_t(heads) * HD;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float L = l[mt][hh];
      L += __shfl_xor_sync(0xffffffffu, L, 1);
      L += __shfl_xor_sync(0xffffffffu, L, 2);
      const float inv = 1.f / L;
      const int q = q0 + warp * 16 * MT + mt * 16 + g + 8 * hh;
      if (q >= n) continue;
      bf16_t* orow = out + int64_t(q) * ldo + h * HD;
#pragma unroll
      for (int d = 0; d < DT; ++d)
        *reinterpret_cast<uint32_t*>(orow + 8 * d + 2 * t) =
            pack_bf16x2(o[mt][d][2 * hh] * inv, o[mt][d][2 * hh + 1] * inv);
    }
}

// x = bf16(x + y), n elements.
template <int = 0>
__global__ void add_kernel(bf16_t* __restrict__ x, const bf16_t* __restrict__ y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2bfloat16_rn(__fadd_rn(bf2f(x[i]), bf2f(y[i])));
}

// a [n, I] = bf16(bf16(silu(g)) · u) with (g, u) the halves of gu [n, 2I].
template <int = 0>
__global__ void silu_mul_kernel(const bf16_t* __restrict__ gu, int n, int inter, bf16_t* __restrict__ a) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * inter) return;
  const int64_t r = i / inter;
  const int c = int(i % inter);
  const float g = bf2f(gu[r * 2 * inter + c]), u = bf2f(gu[r * 2 * inter + inter + c]);
  const float sg = bf16r(__fdiv_rn(g, __fadd_rn(1.f, expf(-g))));
  a[i] = __float2bfloat16_rn(__fmul_rn(sg, u));
}

// cells [ch·cw, d·r·r]: cell (ci, cj) (row-major), element e = c·r·r + ki·r + kj reads x[(ci·r+ki)·n_w +
// cj·r+kj][c], zero outside the n_h × n_w grid (F.unfold of the bottom/right zero-padded [d, n_h, n_w]).
template <int = 0>
__global__ void merge_kernel(const bf16_t* __restrict__ x, int n_h, int n_w, int d, int r, bf16_t* __restrict__ cells) {
  const int cw = (n_w + r - 1) / r, cell = blockIdx.x, ci = cell / cw, cj = cell % cw, rr = r * r;
  bf16_t* dst = cells + int64_t(cell) * d * rr;
  for (int e = threadIdx.x; e < d * rr; e += blockDim.x) {
    const int c = e / rr, k = e % rr, y = ci * r + k / r, xx = cj * r + k % r;
    dst[e] = (y < n_h && xx < n_w) ? x[(int64_t(y) * n_w + xx) * d + c] : __float2bfloat16_rn(0.f);
  }
}

// x = bf16(gelu(x)), exact (erf) form.
template <int = 0>
__global__ void gelu_kernel(bf16_t* __restrict__ x, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = bf2f(x[i]);
  x[i] = __float2bfloat16_rn(__fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.f, erff(__fmul_rn(v, 0.70710678118654752f)))));
}

// Image span rows of a forward's streams H [S, hc, d]: entry j writes row rows[j] of every stream with
// src[j] ≥ 0: embeds row src[j]; −1, −2, −3: vecs row 0, 1, 2 (image_start, image_newline, image_end).
template <int = 0>
__global__ void span_rows_kernel(const int32_t* __restrict__ rows, const int32_t* __restrict__ src,
                                 const bf16_t* __restrict__ embeds, const bf16_t* __restrict__ vecs, int hc, int d,
                                 bf16_t* __restrict__ H) {
  const int j = blockIdx.x, s = src[j];
  const bf16_t* from = s >= 0 ? embeds + int64_t(s) * d : vecs + int64_t(-1 - s) * d;
  bf16_t* to = H + int64_t(rows[j]) * hc * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const bf16_t v = from[i];
    for (int k = 0; k < hc; ++k) to[int64_t(k) * d + i] = v;
  }
}

}  // namespace vision_detail
}  // namespace dsv41::gpu
