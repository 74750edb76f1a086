// SPEC §3.4 block-scaled GEMMs on the GPU, the staged skinny kernel: the register kernel's math (skinny_gemm_kernel:
// weight rows as the mma's M side, activation rows as its N side, one m16n8k32 E4M3 mma per 32-wide K block promoted
// into FP32 times s_x·s_w) with both operands brought through shared memory by a 4-stage cp.async pipeline of
// 128-wide K steps, so loads overlap the mma instead of each warp waiting on its own global loads. A CTA is 4 warps:
// 64 weight rows x one row tile (16, 32 or 64 activation rows, gathered through row_src). Each output's sum runs
// over the K blocks in the same order with the same operations as the register kernel: the same bits.
// WG: the same tiles on wgmma (one m64nNk32 per K block and matrix, the activation tile read by the tensor cores
// from shared memory instead of per-warp mma.sync fragments; the weight fragment canonical, converted in registers).
// Opt-in only: on the H200 an E4M3 wgmma's sum of one 32-wide K block is not the FP32 sum mma.sync gives (measured,
// notes/gpu.md session 14: 5-9% of BF16 outputs one or two ulps off, the MoE layer up to 8x the check's bound).
// For prefill: grouped MoE expert tiles and dense rows above 64. No split-K.
#pragma once
#include <dsv41/backend/cuda/kernels/gemm_skinny.cuh>
#include <dsv41/backend/cuda/kernels/wgmma.cuh>

namespace dsv41::gpu {

namespace detail {
namespace staged {
constexpr int THREADS = 128, BN = 64, KBS = 4, STAGES = 4;  // KBS: 32-wide K blocks per stage
template <WFmt F>
constexpr int wrow_bytes() { return F == WFmt::FP8 ? 128 : 64; }  // one weight row's bytes per stage
template <WFmt F, bool SWIGLU, int NTM>
struct Layout {
  static constexpr int R = 8 * NTM, NW = SWIGLU ? 2 : 1;
  static constexpr int W = BN * wrow_bytes<F>();           // per matrix
  static constexpr int WS = F == WFmt::FP8 ? 16 : BN * 4;  // per matrix: FP8 2 block rows x 4 bytes (padded)
  static constexpr int X = R * 128, XS = R * 4;  // X: a multiple of 1024 bytes
  // The activation tile first, each stage 1024-byte aligned (wgmma's 128-byte swizzle atoms).
  static constexpr int X_OFF = 0, W_OFF = X, WS_OFF = W_OFF + NW * W, XS_OFF = WS_OFF + NW * WS;
  static constexpr int STAGE = (XS_OFF + XS + 1023) / 1024 * 1024;
  static constexpr int SMEM = STAGES * STAGE + 1024;  // + alignment slack of the dynamic base
};
// 16-byte chunk c of smem row r: FP4 weight rows hold 4 chunks (one per K block), FP8 weight and activation rows 8.
__device__ __forceinline__ int swz4(int r, int c) { return c ^ ((r >> 1) & 3); }
__device__ __forceinline__ int swz8(int r, int c) { return c ^ (r & 7); }
__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint2 lds64(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ uint32_t lds16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
// One stage of one weight matrix, shared by the staged and the BF16 wgmma kernels: the CTA's BN rows of w (KBS K
// blocks from block st·KBS: WB bytes a row, in 16-byte chunks, swizzled) into wd, and their UE8M0 scales into sd
// (FP4: a 4-byte word per row; FP8: the words of the two 32-row blocks). Thread tid of THREADS.
template <WFmt F>
__device__ __forceinline__ void load_stage_weights(uint8_t* wd, uint8_t* sd, const uint8_t* w, const uint8_t* s,
                                                   int64_t wrow, int nkb, int nb0, int st, int tid) {
  constexpr int WB = wrow_bytes<F>(), CPR = WB / 16;
#pragma unroll
  for (int q = 0; q < BN * CPR / THREADS; ++q) {
    const int i = tid + THREADS * q, r = i / CPR, c = i % CPR;
    const int pc = CPR == 4 ? swz4(r, c) : swz8(r, c);
    cp_async16(wd + r * WB + pc * 16, w + int64_t(r) * wrow + int64_t(st) * WB + c * 16);
  }
  if constexpr (F == WFmt::FP4) {
    if (tid < BN) cp_async4(sd + tid * 4, s + int64_t(nb0 + tid) * nkb + st * KBS);
  } else {
    if (tid < 2) cp_async4(sd + tid * 4, s + int64_t(nb0 / 32 + tid) * nkb + st * KBS);
  }
}
}  // namespace staged

template <WFmt F, bool SWIGLU, int NTM, bool WG>
__global__ void __launch_bounds__(staged::THREADS) staged_gemm_kernel(const SkinnyParams p) {
  using L = staged::Layout<F, SWIGLU, NTM>;
  using staged::BN;
  using staged::KBS;
  using staged::STAGES;
  constexpr int WB = staged::wrow_bytes<F>();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int group, row0, rows;
  if (!cta_tile(p, L::R, group, row0, rows)) return;
  const int K = p.K, nkb = K / 32, nst = nkb / KBS;
  const int nb0 = blockIdx.y * BN;
  const int64_t wrow = F == WFmt::FP8 ? K : K / 2;
  const uint8_t* wsrc[2] = {p.w1.w + p.w1.group_w * group + int64_t(nb0) * wrow,
                            SWIGLU ? p.w3.w + p.w3.group_w * group + int64_t(nb0) * wrow : nullptr};
  const uint8_t* ssrc[2] = {p.w1.s + p.w1.group_s * group, SWIGLU ? p.w3.s + p.w3.group_s * group : nullptr};
  auto src_row = [&](int r) {
    r = min(r, rows - 1);
    return p.row_src ? p.row_src[row0 + r] : row0 + r;
  };
  // This thread's activation rows to copy: chunk tasks i = tid + 128q (row i / 8), scale task tid (row tid).
  constexpr int XT = L::R * 8 / staged::THREADS;
  const uint8_t* xrow[XT];
#pragma unroll
  for (int q = 0; q < XT; ++q) xrow[q] = p.xc + int64_t(src_row((tid + staged::THREADS * q) >> 3)) * K;
  const uint8_t* xsrow = tid < L::R ? p.xe + int64_t(src_row(tid)) * nkb : nullptr;

  auto load_stage = [&](int st, int buf) {
    uint8_t* base = smem + buf * L::STAGE;
#pragma unroll
    for (int m = 0; m < L::NW; ++m) {
      staged::load_stage_weights<F>(base + L::W_OFF + m * L::W, base + L::WS_OFF + m * L::WS, wsrc[m], ssrc[m], wrow,
                                    nkb, nb0, st, tid);
    }
    uint8_t* xd = base + L::X_OFF;
#pragma unroll
    for (int q = 0; q < XT; ++q) {
      const int i = tid + staged::THREADS * q, r = i >> 3, c = i & 7;
      cp_async16(xd + r * 128 + staged::swz8(r, c) * 16, xrow[q] + int64_t(st) * 128 + c * 16);
    }
    if (tid < L::R) cp_async4(base + L::XS_OFF + tid * 4, xsrow + st * KBS);
  };

  float acc[NTM][4], acc3[NTM][4];
#pragma unroll
  for (int j = 0; j < NTM; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = acc3[j][c] = 0.f;
  const int nt = (rows + 7) / 8;
  const int rg = 16 * warp + g;  // this thread's weight rows in the CTA's 64: rg and rg + 8 (the same swizzle)
  // Byte offsets in a stage of this thread's fragments at K block u; weight row rg + 8, the second matrix and
  // activation tile j are fixed offsets from them (8·WB, L::W, j·1024). 2u + (t >> 1) = 2u ^ (t >> 1).
  const int kx = (t >> 1) ^ g;
  int woff[KBS], xoff[KBS];
#pragma unroll
  for (int u = 0; u < KBS; ++u) {
    woff[u] = F == WFmt::FP8 ? L::W_OFF + rg * WB + (((2 * u) ^ kx) << 4) + 8 * (t & 1)
                             : L::W_OFF + rg * WB + ((u ^ ((g >> 1) & 3)) << 4) + 4 * t;
    xoff[u] = L::X_OFF + g * 128 + (((2 * u) ^ kx) << 4) + 8 * (t & 1);
  }
  float wp[NTM][4], wp3[NTM][4];  // WG: the wgmma results of one K block
#pragma unroll
  for (int j = 0; j < NTM; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) wp[j][c] = wp3[j][c] = 0.f;
  const int wsoff = L::WS_OFF + (F == WFmt::FP8 ? (warp >> 1) * 4 : rg * 4), xsoff = L::XS_OFF + 8 * t;
  // WG: the canonical A fragment (k 4t..4t+3 and 16+4t..): FP4 bytes 2t and 8+2t of chunk u; FP8 bytes 4t of
  // chunks 2u and 2u+1.
  int wa[KBS], wb[KBS];
#pragma unroll
  for (int u = 0; u < KBS; ++u) {
    wa[u] = F == WFmt::FP8 ? L::W_OFF + rg * WB + (((2 * u) ^ g) << 4) + 4 * t
                           : L::W_OFF + rg * WB + ((u ^ ((g >> 1) & 3)) << 4) + 2 * t;
    wb[u] = F == WFmt::FP8 ? L::W_OFF + rg * WB + (((2 * u + 1) ^ g) << 4) + 4 * t : wa[u] + 8;
  }

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nst) load_stage(s, s);
    cp_async_commit();
  }
  for (int st = 0; st < nst; ++st) {
    cp_async_wait<STAGES - 2>();
    if constexpr (WG) fence_proxy_async_smem();
    __syncthreads();
    if (st + STAGES - 1 < nst) load_stage(st + STAGES - 1, (st + STAGES - 1) % STAGES);
    cp_async_commit();
    const uint8_t* base = smem + (st % STAGES) * L::STAGE;
    if constexpr (WG) {
#ifdef DSV41_WG_DIAG_SYNC
      fence_proxy_async_smem();
#endif
      const uint64_t xdesc = wgmma_desc_sw128(smem_addr(base + L::X_OFF));
#pragma unroll
      for (int u = 0; u < KBS; ++u) {
        uint32_t a[2][4];
        float sw[2][2];
#pragma unroll
        for (int m = 0; m < L::NW; ++m) {
          const uint8_t* A = base + wa[u] + m * L::W;
          const uint8_t* B = base + wb[u] + m * L::W;
          const uint8_t* WS = base + wsoff + m * L::WS + u;
          if constexpr (F == WFmt::FP8) {
            a[m][0] = staged::lds32(A); a[m][1] = staged::lds32(A + 8 * WB);
            a[m][2] = staged::lds32(B); a[m][3] = staged::lds32(B + 8 * WB);
            sw[m][0] = sw[m][1] = ue8m0_f(WS[0]);
          } else {
            a[m][0] = e2m1x4_to_e4m3x4(staged::lds16(A)); a[m][1] = e2m1x4_to_e4m3x4(staged::lds16(A + 8 * WB));
            a[m][2] = e2m1x4_to_e4m3x4(staged::lds16(B)); a[m][3] = e2m1x4_to_e4m3x4(staged::lds16(B + 8 * WB));
            sw[m][0] = ue8m0_f(WS[0]);
            sw[m][1] = ue8m0_f(WS[32]);  // row rg + 8
          }
        }
        wgmma_fence();
        wgmma_e4m3_rs<NTM>(wp, a[0], xdesc + 2 * u);
        if constexpr (SWIGLU) wgmma_e4m3_rs<NTM>(wp3, a[1], xdesc + 2 * u);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_regs(wp);
        if constexpr (SWIGLU) wgmma_fence_regs(wp3);
        const uint8_t* XS = base + xsoff + u;
#pragma unroll
        for (int j = 0; j < NTM; ++j) {
          if (j < nt) {
            const float sx0 = ue8m0_f(XS[32 * j]), sx1 = ue8m0_f(XS[32 * j + 4]);
            promote(acc[j], wp[j], sw[0][0], sw[0][1], sx0, sx1);
            if constexpr (SWIGLU) promote(acc3[j], wp3[j], sw[1][0], sw[1][1], sx0, sx1);
          }
        }
      }
    } else {
#pragma unroll
      for (int u = 0; u < KBS; ++u) {
        uint32_t a[2][4];
        float sw[2][2];
#pragma unroll
        for (int m = 0; m < L::NW; ++m) {
          const uint8_t* W = base + woff[u] + m * L::W;
          const uint8_t* WS = base + wsoff + m * L::WS + u;
          if constexpr (F == WFmt::FP8) {
            const uint2 x0 = staged::lds64(W), x8 = staged::lds64(W + 8 * WB);
            a[m][0] = x0.x; a[m][1] = x8.x; a[m][2] = x0.y; a[m][3] = x8.y;
            sw[m][0] = sw[m][1] = ue8m0_f(WS[0]);
          } else {
            const uint32_t r0 = staged::lds32(W), r8 = staged::lds32(W + 8 * WB);
            a[m][0] = e2m1x4_to_e4m3x4(r0); a[m][2] = e2m1x4_to_e4m3x4(r0 >> 16);
            a[m][1] = e2m1x4_to_e4m3x4(r8); a[m][3] = e2m1x4_to_e4m3x4(r8 >> 16);
            sw[m][0] = ue8m0_f(WS[0]);
            sw[m][1] = ue8m0_f(WS[32]);  // row rg + 8
          }
        }
        const uint8_t* X = base + xoff[u];
        const uint8_t* XS = base + xsoff + u;
#pragma unroll
        for (int j = 0; j < NTM; ++j) {
          if (j < nt) {
            const uint2 b = staged::lds64(X + j * 1024);
            const float sx0 = ue8m0_f(XS[32 * j]), sx1 = ue8m0_f(XS[32 * j + 4]);
            float part[4];
            mma_e4m3_zero(part, a[0], b.x, b.y);
            promote(acc[j], part, sw[0][0], sw[0][1], sx0, sx1);
            if constexpr (SWIGLU) {
              mma_e4m3_zero(part, a[1], b.x, b.y);
              promote(acc3[j], part, sw[1][0], sw[1][1], sx0, sx1);
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  store_tiles<SWIGLU, false>(p, acc, acc3, nt, rows, row0, nb0 + rg, t);
}

}  // namespace detail

// Whether the staged kernel takes this call: N % 64, K % 128, no split-K, and the alignments its 16- and 4-byte
// copies need (weights, their group strides, activation rows).
inline bool gemm_staged_fits(const SkinnyParams& p) {
  auto al = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a == 0; };
  return p.N > 0 && p.N % 64 == 0 && p.K % 128 == 0 && p.ksplit == 1 && al(p.w1.w, 16) && al(p.w1.s, 4) &&
         p.w1.group_w % 16 == 0 && p.w1.group_s % 4 == 0 && (!p.w3.w || (al(p.w3.w, 16) && al(p.w3.s, 4) &&
         p.w3.group_w % 16 == 0 && p.w3.group_s % 4 == 0)) && al(p.xc, 16) && al(p.xe, 4);
}

// The staged kernel over row tiles of at most max_rows (16, 32 or 64 rows: NTM 2, 4, 8; dense: 64-row tiles), on
// mma.sync or (wg) on wgmma.
template <WFmt F, bool SWIGLU>
inline Status gemm_staged(const SkinnyParams& p, int max_tiles, int max_rows, bool wg, cudaStream_t stream) {
  if (!gemm_staged_fits(p)) return bad_arg("gemm_staged: N % 64, K % 128, no split-K, aligned operands");
  if (SWIGLU && !p.w3.w) return bad_arg("gemm_staged: SwiGLU needs w3");
  const int ntm = p.tiles ? (max_rows <= 16 ? 2 : max_rows <= 32 ? 4 : 8) : 8;
  if (p.tiles && max_rows > 64) return bad_arg("gemm_staged: tiles of at most 64 rows");
  const int gx = p.tiles ? max_tiles : ceil_div(p.M, 64);
  if (gx == 0 || p.M == 0) return Status::Ok();
  if (p.N / 64 > 65535) return bad_arg("gemm_staged: N too large");
  const dim3 grid(gx, p.N / 64);
  auto go = [&](auto kernel, int smem) -> Status {
    if (smem > 48 * 1024)
      DSV41_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                     "gemm_staged: smem attribute");
    kernel<<<grid, detail::staged::THREADS, smem, stream>>>(p);
    return launch_status("gemm_staged");
  };
  using detail::staged_gemm_kernel;
  using detail::staged::Layout;
  if (wg) {
    if (ntm == 2) return go(staged_gemm_kernel<F, SWIGLU, 2, true>, Layout<F, SWIGLU, 2>::SMEM);
    if (ntm == 4) return go(staged_gemm_kernel<F, SWIGLU, 4, true>, Layout<F, SWIGLU, 4>::SMEM);
    return go(staged_gemm_kernel<F, SWIGLU, 8, true>, Layout<F, SWIGLU, 8>::SMEM);
  }
  if (ntm == 2) return go(staged_gemm_kernel<F, SWIGLU, 2, false>, Layout<F, SWIGLU, 2>::SMEM);
  if (ntm == 4) return go(staged_gemm_kernel<F, SWIGLU, 4, false>, Layout<F, SWIGLU, 4>::SMEM);
  return go(staged_gemm_kernel<F, SWIGLU, 8, false>, Layout<F, SWIGLU, 8>::SMEM);
}

}  // namespace dsv41::gpu
