// SPEC §3.4 block-scaled GEMMs on the GPU, the skinny side: the parameter types shared by the skinny kernels,
// the register kernel (skinny_gemm_kernel) and the split-K reduces. gemm.cuh has the overview and the launchers
// that pick a kernel.
//
// Skinny ("swapped"): the weight rows are the mma's M side (16 per warp), the activation rows its N side (8 per
// mma), operands straight from global/L1; grouped over a row-tile list for MoE; split-K over blockIdx.z.
#pragma once
#include <algorithm>
#include <type_traits>

#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

enum class WFmt : int { FP8 = 0, FP4 = 1 };

// Rows [row0, row0 + rows) of the activation/output use the weights of `group`. rows ≤ 64.
struct RowTile {
  int group, row0, rows, pad;
};

// One weight matrix, or G of them at fixed strides (bytes).
struct WeightRef {
  const uint8_t* w = nullptr;
  const uint8_t* s = nullptr;
  int64_t group_w = 0, group_s = 0;
};

struct SkinnyParams {
  WeightRef w1, w3;  // w3: second matrix of the SwiGLU kernel
  int N = 0, K = 0;
  const uint8_t* xc = nullptr;  // activation codes [*, K]
  const uint8_t* xe = nullptr;  // activation exponents [*, K/32]
  const bf16_t* xb = nullptr;   // BF16 wgmma kernel only: act_bf16_perm of xc, xe [*, K] (gemm_wgmma_bf16.cuh)
  const int* row_src = nullptr;        // output row p reads activation row row_src[p] (nullptr: p)
  const float* row_weight = nullptr;   // SwiGLU: weight of output row p (nullptr: none)
  const RowTile* tiles = nullptr;      // nullptr: dense tiles of 64 rows over [0, M)
  const int* n_tiles = nullptr;
  int M = 0;                           // rows of y / partial
  bf16_t* y = nullptr;
  int64_t ldy = 0;
  float* partial = nullptr;            // split-K: FP32 [ksplit][M][N]
  int ksplit = 1;
  float limit = 0.f;                   // SwiGLU clamp (0: none)
};

namespace detail {

// This CTA's row tile (blockIdx.x): from the tile list (false past *p.n_tiles), or the dense tiles of R rows over
// [0, p.M). Every skinny-side kernel starts here.
__device__ __forceinline__ bool cta_tile(const SkinnyParams& p, int R, int& group, int& row0, int& rows) {
  group = 0;
  if (p.tiles) {
    if (int(blockIdx.x) >= *p.n_tiles) return false;
    const RowTile rt = p.tiles[blockIdx.x];
    group = rt.group; row0 = rt.row0; rows = rt.rows;
  } else {
    row0 = blockIdx.x * R;
    rows = min(R, p.M - row0);
  }
  return true;
}

__device__ __forceinline__ uint2 ldg_u2(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
__device__ __forceinline__ uint32_t ldg_u1(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }

// Raw weight words of one K block for rows g and g+8 (FP8: 8 bytes per row, FP4: 4 bytes per row).
template <WFmt F>
struct RawA {
  uint2 g, g8;
};
template <>
struct RawA<WFmt::FP4> {
  uint32_t g, g8;
};
template <WFmt F>
__device__ __forceinline__ RawA<F> load_raw(const uint8_t* row_g, const uint8_t* row_g8, int kb, int t) {
  RawA<F> r;
  if constexpr (F == WFmt::FP8) {
    r.g = ldg_u2(row_g + kb * 32 + 8 * t);
    r.g8 = ldg_u2(row_g8 + kb * 32 + 8 * t);
  } else {
    r.g = ldg_u1(row_g + kb * 16 + 4 * t);
    r.g8 = ldg_u1(row_g8 + kb * 16 + 4 * t);
  }
  return r;
}
// A fragment from the raw words; k slots permuted: thread (g, t) holds actual k = 32kb + 8t + 0..3 in
// a0/a1 and + 4..7 in a2/a3 (the activation side uses the same map).
template <WFmt F>
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const RawA<F>& r, const E2m1Lut& lut) {
  if constexpr (F == WFmt::FP8) {
    a[0] = r.g.x; a[1] = r.g8.x; a[2] = r.g.y; a[3] = r.g8.y;
  } else {
    a[0] = e2m1x4_to_e4m3x4(r.g & 0xFFFFu, lut); a[2] = e2m1x4_to_e4m3x4(r.g >> 16, lut);
    a[1] = e2m1x4_to_e4m3x4(r.g8 & 0xFFFFu, lut); a[3] = e2m1x4_to_e4m3x4(r.g8 >> 16, lut);
  }
}
// UE8M0 bytes of K blocks kb..kb+3 of one scale row (4-byte load when the row allows it).
__device__ __forceinline__ uint32_t ld_scale4(const uint8_t* row, int kb, int kb_last, bool vec4) {
  if (vec4) return ldg_u1(row + kb);
  uint32_t v = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) v |= uint32_t(__ldg(row + min(kb + i, kb_last))) << (8 * i);
  return v;
}
// ue8m0_f of byte i of w (widen.hpp).
__device__ __forceinline__ float sbyte(uint32_t w, int i) { return __uint_as_float(ue8m0_byte_bits(w, i)); }

// One m16n8 tile's K-block partial promoted into FP32: acc += part · (s_w · s_x), the scales powers of two (exact).
// c0 (weight row g, activation 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
__device__ __forceinline__ void promote(float (&acc)[4], const float (&part)[4], float sw0, float sw1, float sx0,
                                        float sx1) {
  acc[0] = fmaf(part[0], sw0 * sx0, acc[0]);
  acc[1] = fmaf(part[1], sw0 * sx1, acc[1]);
  acc[2] = fmaf(part[2], sw1 * sx0, acc[2]);
  acc[3] = fmaf(part[3], sw1 * sx1, acc[3]);
}

__device__ __forceinline__ float silu_ref(float x) { return __fdiv_rn(x, __fadd_rn(1.f, expf(-x))); }
// The SwiGLU output of one element from its FP32 sums g (w1) and u (w3): bf16(g), bf16(u), clamped to the limit
// (0: none), silu(g)·u, times the row's routing weight w (1 when there is none: skipped), as cpu::moe.
__device__ __forceinline__ float swiglu_ref(float g, float u, float limit, const float* w) {
  float gv = bf16r(g), uv = bf16r(u);
  if (limit > 0.f) {
    gv = fminf(gv, limit);
    uv = fminf(fmaxf(uv, -limit), limit);
  }
  float v = __fmul_rn(silu_ref(gv), uv);
  if (w) v = __fmul_rn(*w, v);
  return v;
}

// The epilogue of both skinny kernels: this thread's outputs of the row tile (NTM 8-row tiles, nt of them used),
// weight rows n_g and n_g + 8: c0 (row n_g, activation 2t), c1 (n_g, 2t+1), c2 (n_g+8, 2t), c3 (n_g+8, 2t+1).
// SPLIT: with p.ksplit > 1, FP32 partials (the w3 partials after the w1 ones) instead of the outputs.
template <bool SWIGLU, bool SPLIT, int NTM>
__device__ __forceinline__ void store_tiles(const SkinnyParams& p, const float (&acc)[NTM][4], const float (&acc3)[NTM][4],
                                            int nt, int rows, int row0, int n_g, int t) {
#pragma unroll
  for (int j = 0; j < NTM; ++j) {
    if (j >= nt) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = 8 * j + 2 * t + (c & 1);
      if (r >= rows) continue;
      const int64_t pr = row0 + r;
      const int n = n_g + 8 * (c >> 1);
      if (SPLIT && p.ksplit > 1) {
        p.partial[(int64_t(blockIdx.z) * p.M + pr) * p.N + n] = acc[j][c];
        if constexpr (SWIGLU) p.partial[(int64_t(p.ksplit + blockIdx.z) * p.M + pr) * p.N + n] = acc3[j][c];
      } else if constexpr (SWIGLU) {
        const float v = swiglu_ref(acc[j][c], acc3[j][c], p.limit, p.row_weight ? p.row_weight + pr : nullptr);
        p.y[pr * p.ldy + n] = __float2bfloat16_rn(v);
      } else {
        p.y[pr * p.ldy + n] = __float2bfloat16_rn(acc[j][c]);
      }
    }
  }
}

// One warp: 16 weight rows x up to 8·NTM activation rows, a K range (split-K over blockIdx.z).
// Weights and scales of 4 K blocks are loaded before use (bytes in flight); the activation operands
// of the first two 8-row tiles too. Each E4M3 mma is issued as the two f16 mma sm_90 runs it as, every operand
// widened once (the same bits: mma_e4m3_zero_f16); a group's loads are per-lane pointers plus constant offsets.
template <WFmt F, bool SWIGLU, int NTM>
__global__ void __launch_bounds__(128) skinny_gemm_kernel(const SkinnyParams p) {
  constexpr int U = NTM <= 2 ? 4 : 2, NTP = NTM < 2 ? NTM : 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // grid: x = row tiles (fastest, so the CTAs that share a weight block run together), y = 64-row
  // weight blocks, z = K splits.
  int group, row0, rows;
  if (!cta_tile(p, 8 * NTM, group, row0, rows)) return;
  const int K = p.K, nkb = K / 32;
  const int n0 = blockIdx.y * 64 + warp * 16;
  if (n0 >= p.N) return;  // N % 16 == 0: whole warps drop out (no block-wide synchronization below)
  const int kb_per = ((nkb + p.ksplit - 1) / p.ksplit + U - 1) / U * U;
  const int kb0 = blockIdx.z * kb_per, kb1 = min(nkb, kb0 + kb_per);
  const bool vec4 = U == 4 && (nkb % 4) == 0;  // kb stays a multiple of 4: aligned 4-byte scale loads
  const int nt = (rows + 7) / 8;

  // Activation rows: B operand column g, scale columns 2t and 2t+1, of each 8-row tile.
  int xb[NTM], xs0[NTM], xs1[NTM];
#pragma unroll
  for (int j = 0; j < NTM; ++j) {
    auto src = [&](int r) {
      r = min(r, rows - 1);
      return p.row_src ? p.row_src[row0 + r] : row0 + r;
    };
    xb[j] = src(8 * j + g);
    xs0[j] = src(8 * j + 2 * t);
    xs1[j] = src(8 * j + 2 * t + 1);
  }
  const int64_t wrow_bytes = F == WFmt::FP8 ? K : K / 2;
  const uint8_t* w1g = p.w1.w + p.w1.group_w * group + int64_t(n0 + g) * wrow_bytes;
  const uint8_t* w1g8 = w1g + 8 * wrow_bytes;
  const uint8_t* s1base = p.w1.s + p.w1.group_s * group;
  const uint8_t* s1a = F == WFmt::FP8 ? s1base + int64_t(n0 / 32) * nkb : s1base + int64_t(n0 + g) * nkb;
  const uint8_t* s1b = F == WFmt::FP8 ? s1a : s1base + int64_t(n0 + g + 8) * nkb;
  const uint8_t *w3g = w1g, *w3g8 = w1g8, *s3a = s1a, *s3b = s1b;
  if constexpr (SWIGLU) {
    w3g = p.w3.w + p.w3.group_w * group + int64_t(n0 + g) * wrow_bytes;
    w3g8 = w3g + 8 * wrow_bytes;
    const uint8_t* s3base = p.w3.s + p.w3.group_s * group;
    s3a = F == WFmt::FP8 ? s3base + int64_t(n0 / 32) * nkb : s3base + int64_t(n0 + g) * nkb;
    s3b = F == WFmt::FP8 ? s3a : s3base + int64_t(n0 + g + 8) * nkb;
  }
  float acc[NTM][4], acc3[NTM][4];
#pragma unroll
  for (int j = 0; j < NTM; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = acc3[j][c] = 0.f;

  // Per-lane row pointers, so that a group's loads are one pointer plus constant offsets (the K block clamped to
  // the range only in the last, partial group).
  const uint8_t* xrow[NTP];
#pragma unroll
  for (int j = 0; j < NTP; ++j) xrow[j] = opaque_ptr(p.xc + int64_t(xb[j]) * K + 8 * t);
  constexpr int WB = F == WFmt::FP8 ? 32 : 16, TB = WB / 4;  // a row's bytes per K block; this lane's part of them
  const uint8_t* const wl[4] = {opaque_ptr(w1g + TB * t), opaque_ptr(w1g8 + TB * t), opaque_ptr(w3g + TB * t),
                                opaque_ptr(w3g8 + TB * t)};
  const uint8_t *xe0[NTM], *xe1[NTM];
#pragma unroll
  for (int j = 0; j < NTM; ++j) {
    xe0[j] = p.xe + int64_t(xs0[j]) * nkb;
    xe1[j] = p.xe + int64_t(xs1[j]) * nkb;
  }
  const E2m1Lut lut = make_e2m1_lut();
  for (int kb = kb0; kb < kb1; kb += U) {
    RawA<F> r1[U], r3[U];
    uint2 bx[NTP][U];
    auto load_group = [&](auto clamp) {
      const int64_t kw = int64_t(kb) * WB, kx = int64_t(kb) * 32;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int du = decltype(clamp)::value ? min(u, kb1 - 1 - kb) : u;
        r1[u] = load_raw<F>(wl[0] + kw, wl[1] + kw, du, 0);
        if constexpr (SWIGLU) r3[u] = load_raw<F>(wl[2] + kw, wl[3] + kw, du, 0);
#pragma unroll
        for (int j = 0; j < NTP; ++j) bx[j][u] = ldg_u2(xrow[j] + kx + du * 32);
      }
    };
    if (kb + U <= kb1) load_group(std::false_type{});
    else load_group(std::true_type{});
    const uint32_t e1a = ld_scale4(s1a, kb, kb1 - 1, vec4), e1b = ld_scale4(s1b, kb, kb1 - 1, vec4);
    uint32_t e3a = 0, e3b = 0;
    if constexpr (SWIGLU) { e3a = ld_scale4(s3a, kb, kb1 - 1, vec4); e3b = ld_scale4(s3b, kb, kb1 - 1, vec4); }
    uint32_t ex0[NTM], ex1[NTM];
#pragma unroll
    for (int j = 0; j < NTM; ++j) {
      if (j < nt) {
        ex0[j] = ld_scale4(xe0[j], kb, kb1 - 1, vec4);
        ex1[j] = ld_scale4(xe1[j], kb, kb1 - 1, vec4);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (kb + u >= kb1) break;
      // The E4M3 mma as the two f16 mma sm_90 runs it as (mma_e4m3_zero_f16: the same bits through promote), with
      // each operand widened once: A for all tiles, B for both matrices of the SwiGLU pair.
      uint32_t al[2][4], ah[2][4];
      {
        uint32_t a[4];
        frag_a<F>(a, r1[u], lut);
#pragma unroll
        for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(a[q], al[0][q], ah[0][q]);
        if constexpr (SWIGLU) {
          frag_a<F>(a, r3[u], lut);
#pragma unroll
          for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(a[q], al[1][q], ah[1][q]);
        }
      }
      const float sw0 = sbyte(e1a, u), sw1 = sbyte(e1b, u);
      float sw30 = 0.f, sw31 = 0.f;
      if constexpr (SWIGLU) {
        sw30 = sbyte(e3a, u);
        sw31 = sbyte(e3b, u);
      }
#pragma unroll
      for (int j = 0; j < NTM; ++j) {
        if (j < nt) {
          const uint2 b = j < NTP ? bx[j < NTP ? j : 0][u] : ldg_u2(p.xc + int64_t(xb[j]) * K + (kb + u) * 32 + 8 * t);
          uint32_t bl[2], bh[2];
          e4m3x4_to_f16x2x2(b.x, bl[0], bh[0]);
          e4m3x4_to_f16x2x2(b.y, bl[1], bh[1]);
          const float sx0 = sbyte(ex0[j], u), sx1 = sbyte(ex1[j], u);
          float part[4];
          mma_e4m3_zero_f16(part, al[0], ah[0], bl, bh);
          promote(acc[j], part, sw0, sw1, sx0, sx1);
          if constexpr (SWIGLU) {
            mma_e4m3_zero_f16(part, al[1], ah[1], bl, bh);
            promote(acc3[j], part, sw30, sw31, sx0, sx1);
          }
        }
      }
    }
  }
  store_tiles<SWIGLU, true>(p, acc, acc3, nt, rows, row0, n0 + g, t);
}

// SwiGLU after split-K: g = bf16(Σ_z partial[z]), u = bf16(Σ_z partial[ks + z]), y = bf16(w·silu(min(g, lim))·clamp(u)).
template <int = 0>
__global__ void swiglu_reduce_kernel(const float* __restrict__ partial, int ksplit, int M, int N, float limit,
                                     const float* __restrict__ row_weight, bf16_t* __restrict__ y, int64_t ldy) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * N) return;
  const int64_t MN = int64_t(M) * N;
  float a = partial[i], b = partial[ksplit * MN + i];
  for (int z = 1; z < ksplit; ++z) { a += partial[z * MN + i]; b += partial[(ksplit + z) * MN + i]; }
  const int64_t m = i / N, n = i % N;
  y[m * ldy + n] = __float2bfloat16_rn(swiglu_ref(a, b, limit, row_weight ? row_weight + m : nullptr));
}

// y = Σ_z partial[z] (in z order), BF16 or FP32 out.
template <int = 0>
__global__ void splitk_reduce_kernel(const float* __restrict__ partial, int ksplit, int M, int N,
                                     bf16_t* __restrict__ y, int64_t ldy, float* __restrict__ yf) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * N) return;
  float s = partial[i];
  for (int z = 1; z < ksplit; ++z) s += partial[int64_t(z) * M * N + i];
  const int64_t m = i / N, n = i % N;
  if (yf) yf[m * ldy + n] = s;
  else y[m * ldy + n] = __float2bfloat16_rn(s);
}

}  // namespace detail

// Skinny / grouped GEMM (the caller fills SkinnyParams; grid.x = max_tiles, or the dense row tiles).
// Grouped: max_rows bounds the rows of any tile (≤ 16 selects the 2-tile variant: fewer registers, more
// warps per SM). Dense: 16-row tiles up to M = 64, 64-row tiles above. With ksplit > 1 the caller reduces p.partial (splitk_reduce / swiglu_reduce);
// the SwiGLU kernel then writes 2·ksplit partial planes.
template <WFmt F, bool SWIGLU>
inline Status gemm_skinny(const SkinnyParams& p, int max_tiles, int max_rows, cudaStream_t stream) {
  if (p.N % 16 || p.K % 32 || p.N <= 0 || p.K <= 0 || p.ksplit < 1) return bad_arg("gemm_skinny: N % 16 or K % 32");
  if (p.ksplit > 1 && !p.partial) return bad_arg("gemm_skinny: split-K needs p.partial");
  const bool small = p.tiles ? max_rows <= 16 : p.M <= 64;  // dense: 16-row tiles up to 64 rows
  const int gx = p.tiles ? max_tiles : ceil_div(p.M, small ? 16 : 64);
  if (gx == 0) return Status::Ok();
  if (ceil_div(p.N, 64) > 65535) return bad_arg("gemm_skinny: N too large");
  dim3 grid(gx, ceil_div(p.N, 64), p.ksplit);
  if (small) detail::skinny_gemm_kernel<F, SWIGLU, 2><<<grid, 128, 0, stream>>>(p);
  else detail::skinny_gemm_kernel<F, SWIGLU, 8><<<grid, 128, 0, stream>>>(p);
  return launch_status("gemm_skinny");
}

}  // namespace dsv41::gpu
