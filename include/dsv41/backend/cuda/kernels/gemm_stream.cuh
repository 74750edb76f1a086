// SPEC §3.4 block-scaled GEMMs on the GPU, the streaming skinny kernel for decode: the register kernel's math
// (skinny_gemm_kernel: 16 weight rows per warp as the mma's M side, up to 16 activation rows as its N side, one
// m16n8k32 E4M3 mma per 32-wide K block promoted into FP32 in K order; the same split-K ranges) with the weights and
// their scales brought through warp-private shared memory by a 3-stage cp.async pipeline of row pieces (KS K blocks
// per row per stage: 16·KS bytes of an FP4 row, 32·KS of an FP8 row), instead of each warp's 4-byte loads waiting
// before its mma. Same operands, same operations, same order: the same bits as the register kernel. The E4M3 mma is
// issued as the two f16 mma sm_90 turns it into (mma_e4m3_zero_f16), with the activation fragment widened once for
// both matrices of the SwiGLU pair, and the E2M1 tables held in registers. What bounds it is instructions, not the
// access pattern: longer row pieces (KS 16, 32) were slower (notes/gpu.md session 17); tools/gpu/sass_loops.py
// counts them per K block.
// Warps run independently (no block-wide barrier); activations and their scales come from global memory (L1).
#pragma once
#include <dsv41/backend/cuda/kernels/gemm_skinny.cuh>

namespace dsv41::gpu {

namespace detail {
namespace stream {
constexpr int THREADS = 128, STAGES = 3;
// One warp's stage for one matrix: 16 weight rows of RB bytes at a padded stride RS (FP4 +16, FP8 +32: the
// fragment reads of a warp, or of a half-warp for FP8's 8-byte reads, hit distinct banks), then the scale bytes.
template <WFmt F, int KS>
struct Layout {
  static constexpr int RB = F == WFmt::FP8 ? 32 * KS : 16 * KS, RS = RB + (F == WFmt::FP8 ? 32 : 16);
  static constexpr int W = 16 * RS;
  static constexpr int S = F == WFmt::FP8 ? KS : 16 * KS;  // FP8: one scale row (the warp's 16 rows share it)
  static constexpr int MAT = W + (S + 15) / 16 * 16;
  template <bool SWIGLU>
  static constexpr int smem() { return THREADS / 32 * STAGES * (SWIGLU ? 2 : 1) * MAT; }
};
}  // namespace stream

template <WFmt F, bool SWIGLU, int KS>
__global__ void __launch_bounds__(stream::THREADS) stream_gemm_kernel(const SkinnyParams p) {
  using L = stream::Layout<F, KS>;
  constexpr int NTM = 2, U = 4, NW = SWIGLU ? 2 : 1, STAGES = stream::STAGES;
  static_assert(KS % U == 0, "KS: a multiple of 4 K blocks");
  extern __shared__ __align__(16) uint8_t smem_stream[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  int group, row0, rows;
  if (!cta_tile(p, 8 * NTM, group, row0, rows)) return;
  const int K = p.K, nkb = K / 32;
  const int n0 = blockIdx.y * 64 + warp * 16;
  if (n0 >= p.N) return;  // whole warps drop out; nothing below synchronizes the block
  // The register kernel's split-K ranges (U = 4 for its 16-row variant): the same sums.
  const int kb_per = ((nkb + p.ksplit - 1) / p.ksplit + U - 1) / U * U;
  const int kb0 = blockIdx.z * kb_per, kb1 = min(nkb, kb0 + kb_per);
  if (kb0 >= kb1) {  // an empty split still writes its (zero) partials
    float z[NTM][4] = {};
    store_tiles<SWIGLU, true>(p, z, z, (rows + 7) / 8, rows, row0, n0 + g, t);
    return;
  }
  const int nt = (rows + 7) / 8, nst = (kb1 - kb0 + KS - 1) / KS;
  uint8_t* const wsm = smem_stream + warp * STAGES * NW * L::MAT;

  // This thread's activation rows: B operand column g, scale columns 2t and 2t+1 of each 8-row tile.
  const uint8_t *xrow[NTM], *xs0[NTM], *xs1[NTM];
#pragma unroll
  for (int j = 0; j < NTM; ++j) {
    auto src = [&](int r) {
      r = min(r, rows - 1);
      return int64_t(p.row_src ? p.row_src[row0 + r] : row0 + r);
    };
    xrow[j] = p.xc + src(8 * j + g) * K + 8 * t;
    xs0[j] = p.xe + src(8 * j + 2 * t) * nkb;
    xs1[j] = p.xe + src(8 * j + 2 * t + 1) * nkb;
  }
  const int64_t wrow = F == WFmt::FP8 ? K : K / 2;
  const uint8_t* wsrc[2];
  const uint8_t* ssrc[2];
#pragma unroll
  for (int m = 0; m < NW; ++m) {
    const WeightRef& R = m == 0 ? p.w1 : p.w3;
    wsrc[m] = R.w + R.group_w * group + int64_t(n0) * wrow;
    ssrc[m] = R.s + R.group_s * group + (F == WFmt::FP8 ? int64_t(n0 / 32) * nkb : int64_t(n0) * nkb);
  }
  // Stage st (K blocks kb0 + st·KS ...) into buffer b: 16-byte chunks of the 16 rows, 4-byte words of the scales.
  auto load_stage = [&](int st, int b) {
    const int k0 = kb0 + st * KS, kn = min(KS, kb1 - k0);  // kn: a multiple of 4
    constexpr int CPR = L::RB / 16;                          // chunks per row
    const int cpr = F == WFmt::FP8 ? 2 * kn : kn;
#pragma unroll
    for (int m = 0; m < NW; ++m) {
      uint8_t* d = wsm + (b * NW + m) * L::MAT;
      const uint8_t* s = wsrc[m] + int64_t(k0) * (F == WFmt::FP8 ? 32 : 16);
#pragma unroll
      for (int i = lane; i < 16 * CPR; i += 32) {
        const int r = i / CPR, c = i % CPR;
        if (c < cpr) cp_async16(d + r * L::RS + c * 16, s + int64_t(r) * wrow + c * 16);
      }
      if constexpr (F == WFmt::FP8) {
        if (lane < kn / 4) cp_async4(d + L::W + 4 * lane, ssrc[m] + k0 + 4 * lane);
      } else {
#pragma unroll
        for (int i = lane; i < 16 * (KS / 4); i += 32) {
          const int r = i / (KS / 4), c = i % (KS / 4);
          if (4 * c < kn) cp_async4(d + L::W + r * KS + 4 * c, ssrc[m] + int64_t(r) * nkb + k0 + 4 * c);
        }
      }
    }
  };

  float acc[NTM][4] = {}, acc3[NTM][4] = {};
  const E2m1Lut lut = make_e2m1_lut();

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nst) load_stage(s, s);
    cp_async_commit();
  }
  for (int st = 0; st < nst; ++st) {
    cp_async_wait<STAGES - 2>();
    __syncwarp();  // every lane's copies of stage st landed; every lane is done with the buffer refilled next
    if (st + STAGES - 1 < nst) load_stage(st + STAGES - 1, (st + STAGES - 1) % STAGES);
    cp_async_commit();
    const int k0 = kb0 + st * KS, kn = min(KS, kb1 - k0);
    const uint8_t* base = wsm + (st % STAGES) * NW * L::MAT;
    for (int u0 = 0; u0 < kn; u0 += U) {
      const int kb = k0 + u0;
      uint2 bx[NTM][U];
      uint32_t ex0[NTM], ex1[NTM];
#pragma unroll
      for (int j = 0; j < NTM; ++j) {
        if (j < nt) {
          const uint8_t* xp = xrow[j] + kb * 32;
#pragma unroll
          for (int u = 0; u < U; ++u) bx[j][u] = ldg_u2(xp + 32 * u);
          ex0[j] = ldg_u1(xs0[j] + kb);
          ex1[j] = ldg_u1(xs1[j] + kb);
        }
      }
      uint32_t ew[2][2];  // scale words of K blocks kb..kb+3: rows g and g+8 of each matrix
#pragma unroll
      for (int m = 0; m < NW; ++m) {
        const uint8_t* S = base + m * L::MAT + L::W;
        if constexpr (F == WFmt::FP8) {
          ew[m][0] = ew[m][1] = *reinterpret_cast<const uint32_t*>(S + u0);
        } else {
          ew[m][0] = *reinterpret_cast<const uint32_t*>(S + g * KS + u0);
          ew[m][1] = *reinterpret_cast<const uint32_t*>(S + (g + 8) * KS + u0);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        // A as f16 pairs: the low / high halves of the register kernel's E4M3 fragment registers (frag_a).
        uint32_t al[2][4], ah[2][4];
#pragma unroll
        for (int m = 0; m < NW; ++m) {
          const uint8_t* W = base + m * L::MAT + g * L::RS;
          uint32_t a[4];
          if constexpr (F == WFmt::FP8) {
            const uint2 r0 = *reinterpret_cast<const uint2*>(W + (u0 + u) * 32 + 8 * t);
            const uint2 r8 = *reinterpret_cast<const uint2*>(W + 8 * L::RS + (u0 + u) * 32 + 8 * t);
            a[0] = r0.x; a[1] = r8.x; a[2] = r0.y; a[3] = r8.y;
          } else {  // e2m1x4_to_e4m3x4 reads the low 16 bits only
            const uint32_t r0 = *reinterpret_cast<const uint32_t*>(W + (u0 + u) * 16 + 4 * t);
            const uint32_t r8 = *reinterpret_cast<const uint32_t*>(W + 8 * L::RS + (u0 + u) * 16 + 4 * t);
            a[0] = e2m1x4_to_e4m3x4(r0, lut); a[2] = e2m1x4_to_e4m3x4(r0 >> 16, lut);
            a[1] = e2m1x4_to_e4m3x4(r8, lut); a[3] = e2m1x4_to_e4m3x4(r8 >> 16, lut);
          }
#pragma unroll
          for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(a[q], al[m][q], ah[m][q]);
        }
        const float sw0 = sbyte(ew[0][0], u), sw1 = sbyte(ew[0][1], u);
        const float sw30 = SWIGLU ? sbyte(ew[NW - 1][0], u) : 0.f, sw31 = SWIGLU ? sbyte(ew[NW - 1][1], u) : 0.f;
#pragma unroll
        for (int j = 0; j < NTM; ++j) {
          if (j < nt) {
            uint32_t bl[2], bh[2];  // B widened once for both matrices
            e4m3x4_to_f16x2x2(bx[j][u].x, bl[0], bh[0]);
            e4m3x4_to_f16x2x2(bx[j][u].y, bl[1], bh[1]);
            const float sx0 = sbyte(ex0[j], u), sx1 = sbyte(ex1[j], u);
            float part[4];
            mma_e4m3_zero_f16(part, al[0], ah[0], bl, bh);
            promote(acc[j], part, sw0, sw1, sx0, sx1);
            if constexpr (SWIGLU) {
              mma_e4m3_zero_f16(part, al[NW - 1], ah[NW - 1], bl, bh);
              promote(acc3[j], part, sw30, sw31, sx0, sx1);
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  store_tiles<SWIGLU, true>(p, acc, acc3, nt, rows, row0, n0 + g, t);
}

}  // namespace detail

// Whether the streaming kernel takes this call: K % 128 (whole 4-block scale words), N % 16, rows of at most 16
// per tile, and the alignments of its 16- and 4-byte copies (weight rows and group strides, scale rows) and of the
// activations' 8- and 4-byte loads.
inline bool gemm_stream_fits(const SkinnyParams& p, int max_rows) {
  auto al = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a == 0; };
  auto wok = [&](const WeightRef& w) {
    return al(w.w, 16) && al(w.s, 4) && w.group_w % 16 == 0 && w.group_s % 4 == 0;
  };
  return p.N > 0 && p.N % 16 == 0 && p.K % 128 == 0 && p.ksplit >= 1 && (p.tiles ? max_rows <= 16 : p.M <= 64) &&
         wok(p.w1) && (!p.w3.w || wok(p.w3)) && al(p.xc, 8) && al(p.xe, 4);
}

// K blocks per row per stage: 8 (FP4 SwiGLU: 58 KB of shared memory per CTA, 3 CTAs per SM); 16 and 32 were slower.
template <WFmt F>
constexpr int stream_ks() { return 8; }

// KS: K blocks per row per stage (a multiple of 4). Grid as gemm_skinny's 16-row variant.
template <WFmt F, bool SWIGLU, int KS = stream_ks<F>()>
inline Status gemm_stream(const SkinnyParams& p, int max_tiles, int max_rows, cudaStream_t stream) {
  if (!gemm_stream_fits(p, max_rows)) return bad_arg("gemm_stream: N % 16, K % 128, tiles of <= 16 rows, aligned operands");
  if (SWIGLU && !p.w3.w) return bad_arg("gemm_stream: SwiGLU needs w3");
  if (p.ksplit > 1 && !p.partial) return bad_arg("gemm_stream: split-K needs p.partial");
  const int gx = p.tiles ? max_tiles : ceil_div(p.M, 16);
  if (gx == 0 || p.M == 0) return Status::Ok();
  if (ceil_div(p.N, 64) > 65535) return bad_arg("gemm_stream: N too large");
  const dim3 grid(gx, ceil_div(p.N, 64), p.ksplit);
  auto kernel = detail::stream_gemm_kernel<F, SWIGLU, KS>;
  constexpr int smem = detail::stream::Layout<F, KS>::template smem<SWIGLU>();
  if constexpr (smem > 48 * 1024)
    DSV41_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "gemm_stream: smem attribute");
  kernel<<<grid, detail::stream::THREADS, smem, stream>>>(p);
  return launch_status("gemm_stream");
}

}  // namespace dsv41::gpu
