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
// Two kernels:
//  - skinny (N % 16 == 0; M ≤ 64 rows per tile, "swapped": the weight rows are the mma's M side, the activation
//    rows its N side; operands straight from global/L1; grouped over a row-tile list for MoE; split-K):
//    decode shapes and the MoE expert GEMMs;
//  - wide (128x128 CTA tile, 3-stage cp.async pipeline, ldmatrix, swizzled shared memory): prefill.
#pragma once
#include <algorithm>

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
__device__ __forceinline__ void frag_a(uint32_t (&a)[4], const RawA<F>& r) {
  if constexpr (F == WFmt::FP8) {
    a[0] = r.g.x; a[1] = r.g8.x; a[2] = r.g.y; a[3] = r.g8.y;
  } else {
    a[0] = e2m1x4_to_e4m3x4(r.g & 0xFFFFu); a[2] = e2m1x4_to_e4m3x4(r.g >> 16);
    a[1] = e2m1x4_to_e4m3x4(r.g8 & 0xFFFFu); a[3] = e2m1x4_to_e4m3x4(r.g8 >> 16);
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
__device__ __forceinline__ float sbyte(uint32_t w, int i) { return ue8m0_f((w >> (8 * i)) & 0xFFu); }

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

// One warp: 16 weight rows x up to 8·NTM activation rows, a K range (split-K over blockIdx.z).
// Weights and scales of 4 K blocks are loaded before use (bytes in flight); the activation operands
// of the first two 8-row tiles too.
template <WFmt F, bool SWIGLU, int NTM>
__global__ void __launch_bounds__(128) skinny_gemm_kernel(const SkinnyParams p) {
  constexpr int U = NTM <= 2 ? 4 : 2, NTP = NTM < 2 ? NTM : 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int group = 0, row0, rows;
  // grid: x = row tiles (fastest, so the CTAs that share a weight block run together), y = 64-row
  // weight blocks, z = K splits.
  if (p.tiles) {
    if (int(blockIdx.x) >= *p.n_tiles) return;
    const RowTile rt = p.tiles[blockIdx.x];
    group = rt.group; row0 = rt.row0; rows = rt.rows;
  } else {
    row0 = blockIdx.x * 8 * NTM;
    rows = min(8 * NTM, p.M - row0);
  }
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

  for (int kb = kb0; kb < kb1; kb += U) {
    RawA<F> r1[U], r3[U];
    uint2 bx[NTP][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k = min(kb + u, kb1 - 1);
      r1[u] = load_raw<F>(w1g, w1g8, k, t);
      if constexpr (SWIGLU) r3[u] = load_raw<F>(w3g, w3g8, k, t);
#pragma unroll
      for (int j = 0; j < NTP; ++j) bx[j][u] = ldg_u2(p.xc + int64_t(xb[j]) * K + k * 32 + 8 * t);
    }
    const uint32_t e1a = ld_scale4(s1a, kb, kb1 - 1, vec4), e1b = ld_scale4(s1b, kb, kb1 - 1, vec4);
    uint32_t e3a = 0, e3b = 0;
    if constexpr (SWIGLU) { e3a = ld_scale4(s3a, kb, kb1 - 1, vec4); e3b = ld_scale4(s3b, kb, kb1 - 1, vec4); }
    uint32_t ex0[NTM], ex1[NTM];
#pragma unroll
    for (int j = 0; j < NTM; ++j) {
      if (j < nt) {
        ex0[j] = ld_scale4(p.xe + int64_t(xs0[j]) * nkb, kb, kb1 - 1, vec4);
        ex1[j] = ld_scale4(p.xe + int64_t(xs1[j]) * nkb, kb, kb1 - 1, vec4);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (kb + u >= kb1) break;
      uint32_t a[4], a3[4];
      frag_a<F>(a, r1[u]);
      const float sw0 = sbyte(e1a, u), sw1 = sbyte(e1b, u);
      float sw30 = 0.f, sw31 = 0.f;
      if constexpr (SWIGLU) {
        frag_a<F>(a3, r3[u]);
        sw30 = sbyte(e3a, u);
        sw31 = sbyte(e3b, u);
      }
#pragma unroll
      for (int j = 0; j < NTM; ++j) {
        if (j < nt) {
          const uint2 b = j < NTP ? bx[j < NTP ? j : 0][u] : ldg_u2(p.xc + int64_t(xb[j]) * K + (kb + u) * 32 + 8 * t);
          const float sx0 = sbyte(ex0[j], u), sx1 = sbyte(ex1[j], u);
          float part[4];
          mma_e4m3_zero(part, a, b.x, b.y);
          acc[j][0] = fmaf(part[0], sw0 * sx0, acc[j][0]);
          acc[j][1] = fmaf(part[1], sw0 * sx1, acc[j][1]);
          acc[j][2] = fmaf(part[2], sw1 * sx0, acc[j][2]);
          acc[j][3] = fmaf(part[3], sw1 * sx1, acc[j][3]);
          if constexpr (SWIGLU) {
            mma_e4m3_zero(part, a3, b.x, b.y);
            acc3[j][0] = fmaf(part[0], sw30 * sx0, acc3[j][0]);
            acc3[j][1] = fmaf(part[1], sw30 * sx1, acc3[j][1]);
            acc3[j][2] = fmaf(part[2], sw31 * sx0, acc3[j][2]);
            acc3[j][3] = fmaf(part[3], sw31 * sx1, acc3[j][3]);
          }
        }
      }
    }
  }
  // Epilogue: c0 (row g, act 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
#pragma unroll
  for (int j = 0; j < NTM; ++j) {
    if (j >= nt) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = 8 * j + 2 * t + (c & 1);
      if (r >= rows) continue;
      const int64_t pr = row0 + r;
      const int n = n0 + g + 8 * (c >> 1);
      if (p.ksplit > 1) {  // SwiGLU: the w3 partials follow the w1 partials
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
      uint32_t bfr[4][2];
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        const int mat = lane >> 3;
        const int nrow = wn * 32 + (2 * jj + (mat >> 1)) * 8 + (lane & 7);
        const int ch = 2 * s4 + (mat & 1);
        uint32_t r[4];
        ldmatrix_x4(r, Bs + nrow * 128 + ((ch ^ (nrow & 7)) << 4));
        bfr[2 * jj][0] = r[0]; bfr[2 * jj][1] = r[1];
        bfr[2 * jj + 1][0] = r[2]; bfr[2 * jj + 1][1] = r[3];
      }
      const float sw = ue8m0_f(SWs[wn * 4 + s4]);
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        const int rbase = wm * 64 + mi * 16;
        const int mrow = rbase + (lane & 7) + 8 * ((lane >> 3) & 1);
        const int ch = 2 * s4 + (lane >> 4);
        uint32_t a[4];
        ldmatrix_x4(a, As + mrow * 128 + ((ch ^ (mrow & 7)) << 4));
        const float slo = ue8m0_f(SXs[(rbase + g) * 4 + s4]) * sw;
        const float shi = ue8m0_f(SXs[(rbase + g + 8) * 4 + s4]) * sw;
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
          float part[4];
          mma_e4m3_zero(part, a, bfr[nj][0], bfr[nj][1]);
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

// Skinny / grouped launcher (the caller fills SkinnyParams; grid.x = max_tiles, or the dense row tiles).
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
