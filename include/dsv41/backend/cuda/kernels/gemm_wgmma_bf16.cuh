// SPEC §3.4 block-scaled GEMMs on BF16 wgmma (sm_90a): the staged kernel's tiles (64 weight rows x 16/32/64
// activation rows, the same cp.async stages and swizzle) with every operand widened to an exact BF16 value that
// carries its scale: an FP4 or FP8 weight times its UE8M0 scale, an E4M3 activation times its block's. The products
// of two such values are exact in FP32, and one m64nNk16 wgmma chain sums all of K in the FP32 accumulator (no
// per-block promotion: the sum's order is the tensor core's, not the register kernel's; bench/gemm_precision.cu
// measures it against a double sum). E4M3 wgmma is faster but does not sum in FP32 (gemm_staged.cuh).
// Activations come pre-widened (act_bf16_perm): within each 32-wide K block, position s = 16h+8c+2t+e holds k =
// 8t+2h+c+4e, so that a thread's weight word (k 8t..8t+7) feeds its A fragment of both k16 halves with shifts and
// masks alone. Range: weight scales up to 2^7 (FP8) or 2^1 (FP4), activation values not below 2^-133.
#pragma once
#include <type_traits>

#include <dsv41/backend/cuda/kernels/gemm_staged.cuh>
#include <dsv41/backend/cuda/kernels/gemm_stream.cuh>

namespace dsv41::gpu {

namespace detail {

// out [rows, K] BF16 = xc · 2^(xe−127), permuted within each 32-block as above. One thread per (row, block).
template <int = 0>
__global__ void act_bf16_perm_kernel(const uint8_t* __restrict__ xc, const uint8_t* __restrict__ xe, int rows, int K,
                                     bf16_t* __restrict__ out) {
  const int nb = K / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const uint4* src = reinterpret_cast<const uint4*>(xc + id * 32);
  const uint4 a = src[0], b = src[1];
  const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  const float sc = ue8m0_f(xe[id]);
  uint32_t o[16];
#pragma unroll
  for (int s = 0; s < 32; s += 2) {
    const int t = (s >> 1) & 3, c = (s >> 3) & 1, h = s >> 4;
    const int k0 = 8 * t + 2 * h + c, k1 = k0 + 4;  // e = 0, 1
    const float v0 = num::e4m3_to_f32(uint8_t(w[k0 >> 2] >> (8 * (k0 & 3)))) * sc;
    const float v1 = num::e4m3_to_f32(uint8_t(w[k1 >> 2] >> (8 * (k1 & 3)))) * sc;
    o[s / 2] = pack_bf16x2(v0, v1);
  }
  uint4* dst = reinterpret_cast<uint4*>(out + id * 32);
#pragma unroll
  for (int q = 0; q < 4; ++q) dst[q] = make_uint4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
// 2^e in both BF16 halves, e clamped to the normal range.
__device__ __forceinline__ uint32_t bf16x2_pow2(int biased) {
  const uint32_t f = uint32_t(min(max(biased, 1), 254));
  return (f << 7) | (f << 23);
}
// FP4 word q (nibble i: k 8t+i) -> BF16 pair (k 8t+j, 8t+j+4) times 2^-126 (the E2M1 bits in the exponent's low
// two bits and the mantissa's top bit: exact, E2M1 0.5 a BF16 subnormal).
template <int J>
__device__ __forceinline__ uint32_t fp4_pair(uint32_t q) {
  constexpr int S = 6 - 4 * J, T = 12 - 4 * J;
  const uint32_t m = S >= 0 ? q << S : q >> -S;
  const uint32_t s = T >= 0 ? q << T : q >> -T;
  return (m & 0x01C001C0u) | (s & 0x80008000u);
}
// FP8 words q0 (k 8t..8t+3), q1 (8t+4..) -> BF16 pair (k 8t+j, 8t+j+4) times 2^-120.
template <int J>
__device__ __forceinline__ uint32_t fp8_pair(uint32_t q0, uint32_t q1) {
  const uint32_t y = prmt_b32(q0, q1, uint32_t(J | (J << 4) | ((4 + J) << 8) | ((4 + J) << 12)));
  return ((y << 4) & 0x07F007F0u) | (y & 0x80008000u);
}

// D += A·B over one k16 step, BF16 x BF16 -> FP32, A (64 x 16) in registers, B (N x 16, K-major) behind desc_b.
template <int NT>
__device__ __forceinline__ void wgmma_bf16_rs(float (&d)[NT][4], const uint32_t (&a)[4], uint64_t desc_b);
template <>
__device__ __forceinline__ void wgmma_bf16_rs<2>(float (&d)[2][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_bf16_rs<4>(float (&d)[4][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_bf16_rs<8>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]),
        "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]),
        "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]),
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

namespace wgbf16 {
constexpr int THREADS = 128, BN = 64, KBS = 4, STAGES = 4, DIST = 2;  // loads run DIST stages ahead
template <WFmt F, bool SWIGLU, int NTM>
struct Layout {
  static constexpr int R = 8 * NTM, NW = SWIGLU ? 2 : 1;
  static constexpr int W = BN * staged::wrow_bytes<F>();
  static constexpr int WS = F == WFmt::FP8 ? 16 : BN * 4;
  static constexpr int XA = R * 128;  // one 64-wide K half of the stage's BF16 activation tile (a swizzle atom column)
  static constexpr int X_OFF = 0, W_OFF = 2 * XA, WS_OFF = W_OFF + NW * W;
  static constexpr int STAGE = (WS_OFF + NW * WS + 1023) / 1024 * 1024;
  static constexpr int SMEM = STAGES * STAGE + 1024;
};
}  // namespace wgbf16

template <WFmt F, bool SWIGLU, int NTM, bool SPLIT>
__global__ void __launch_bounds__(wgbf16::THREADS) wgbf16_gemm_kernel(const SkinnyParams p) {
  using L = wgbf16::Layout<F, SWIGLU, NTM>;
  using wgbf16::BN;
  using wgbf16::KBS;
  using wgbf16::STAGES;
  using wgbf16::DIST;
  constexpr int WB = staged::wrow_bytes<F>();
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int group, row0, rows;
  if (!cta_tile(p, L::R, group, row0, rows)) return;
  // SPLIT (p.ksplit > 1): blockIdx.z takes stages [st0, st0 + nst) of the nkb / KBS and writes FP32 partials (an
  // empty range writes zeros); the reduce after the launch applies SwiGLU (swiglu_splitk_reduce) or sums.
  const int K = p.K, nkb = K / 32, nst_all = nkb / KBS;
  const int st_per = SPLIT ? (nst_all + p.ksplit - 1) / p.ksplit : nst_all;
  const int st0 = SPLIT ? min(nst_all, int(blockIdx.z) * st_per) : 0;
  const int nst = SPLIT ? min(nst_all, st0 + st_per) - st0 : nst_all;
  const int nb0 = blockIdx.y * BN;
  const int64_t wrow = F == WFmt::FP8 ? K : K / 2;
  const uint8_t* wsrc[2] = {p.w1.w + p.w1.group_w * group + int64_t(nb0) * wrow,
                            SWIGLU ? p.w3.w + p.w3.group_w * group + int64_t(nb0) * wrow : nullptr};
  const uint8_t* ssrc[2] = {p.w1.s + p.w1.group_s * group, SWIGLU ? p.w3.s + p.w3.group_s * group : nullptr};
  auto src_row = [&](int r) {
    r = min(r, rows - 1);
    return p.row_src ? p.row_src[row0 + r] : row0 + r;
  };
  // Activation chunk tasks i = tid + 128q: row i / 16, 16-byte chunk i % 16 of the stage's 256 bytes.
  constexpr int XT = L::R * 16 / wgbf16::THREADS;
  const uint8_t* xrow[XT];
#pragma unroll
  for (int q = 0; q < XT; ++q)
    xrow[q] = reinterpret_cast<const uint8_t*>(p.xb) + int64_t(src_row((tid + wgbf16::THREADS * q) >> 4)) * K * 2;

  auto load_stage = [&](int sti, int buf) {  // sti: the stage's index within this CTA's range
    const int st = st0 + sti;
    uint8_t* base = smem + buf * L::STAGE;
#pragma unroll
    for (int m = 0; m < L::NW; ++m) {
      staged::load_stage_weights<F>(base + L::W_OFF + m * L::W, base + L::WS_OFF + m * L::WS, wsrc[m], ssrc[m], wrow,
                                    nkb, nb0, st, tid);
    }
#pragma unroll
    for (int q = 0; q < XT; ++q) {
      const int i = tid + wgbf16::THREADS * q, r = i >> 4, c = i & 15;
      cp_async16(base + L::X_OFF + (c >> 3) * L::XA + r * 128 + staged::swz8(r, c & 7) * 16,
                 xrow[q] + int64_t(st) * 256 + c * 16);
    }
  };

  float acc[NTM][4], acc3[NTM][4];
#pragma unroll
  for (int j = 0; j < NTM; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = acc3[j][c] = 0.f;
  const int nt = (rows + 7) / 8;
  const int rg = 16 * warp + g;  // weight rows rg and rg + 8 of the CTA's 64
  const int kx = (t >> 1) ^ g;
  int woff[KBS];  // this thread's weight word of K block u (k 8t..8t+7), row rg
#pragma unroll
  for (int u = 0; u < KBS; ++u)
    woff[u] = F == WFmt::FP8 ? L::W_OFF + rg * WB + (((2 * u) ^ kx) << 4) + 8 * (t & 1)
                             : L::W_OFF + rg * WB + ((u ^ ((g >> 1) & 3)) << 4) + 4 * t;
  const int wsoff = L::WS_OFF + (F == WFmt::FP8 ? (warp >> 1) * 4 : rg * 4);

#pragma unroll
  for (int s = 0; s < DIST; ++s) {
    if (s < nst) load_stage(s, s);
    cp_async_commit();
  }
  uint32_t a[2][2][2][4];  // [register buffer][matrix][k16 half][fragment]
  for (int st = 0; st < nst; ++st) {
    cp_async_wait<DIST - 1>();
    fence_proxy_async_smem();
    __syncthreads();  // stage st visible; every wgmma reading buffer (st + DIST) % STAGES (stage st − 2) is done
    if (st + DIST < nst) load_stage(st + DIST, (st + DIST) % STAGES);
    cp_async_commit();
    const uint8_t* base = smem + (st % STAGES) * L::STAGE;
    const uint64_t xd0 = wgmma_desc_sw128(smem_addr(base + L::X_OFF));
    const uint64_t xd1 = wgmma_desc_sw128(smem_addr(base + L::X_OFF + L::XA));
#pragma unroll
    for (int u = 0; u < KBS; ++u) {
      const int b = u & 1;
      wgmma_wait<1>();  // the K block that last used register buffer b is done
#pragma unroll
      for (int m = 0; m < L::NW; ++m) {
        const uint8_t* W = base + woff[u] + m * L::W;
        const uint8_t* WS = base + wsoff + m * L::WS + u;
        if constexpr (F == WFmt::FP8) {
          const uint32_t sc = bf16x2_pow2(int(WS[0]) + 120);  // 2^-120 back, then the weight scale
          const uint2 x0 = staged::lds64(W), x8 = staged::lds64(W + 8 * WB);
          a[b][m][0][0] = mul_bf16x2(fp8_pair<0>(x0.x, x0.y), sc); a[b][m][0][1] = mul_bf16x2(fp8_pair<0>(x8.x, x8.y), sc);
          a[b][m][0][2] = mul_bf16x2(fp8_pair<1>(x0.x, x0.y), sc); a[b][m][0][3] = mul_bf16x2(fp8_pair<1>(x8.x, x8.y), sc);
          a[b][m][1][0] = mul_bf16x2(fp8_pair<2>(x0.x, x0.y), sc); a[b][m][1][1] = mul_bf16x2(fp8_pair<2>(x8.x, x8.y), sc);
          a[b][m][1][2] = mul_bf16x2(fp8_pair<3>(x0.x, x0.y), sc); a[b][m][1][3] = mul_bf16x2(fp8_pair<3>(x8.x, x8.y), sc);
        } else {
          const uint32_t s0 = bf16x2_pow2(int(WS[0]) + 126), s8 = bf16x2_pow2(int(WS[32]) + 126);
          const uint32_t q0 = staged::lds32(W), q8 = staged::lds32(W + 8 * WB);
          a[b][m][0][0] = mul_bf16x2(fp4_pair<0>(q0), s0); a[b][m][0][1] = mul_bf16x2(fp4_pair<0>(q8), s8);
          a[b][m][0][2] = mul_bf16x2(fp4_pair<1>(q0), s0); a[b][m][0][3] = mul_bf16x2(fp4_pair<1>(q8), s8);
          a[b][m][1][0] = mul_bf16x2(fp4_pair<2>(q0), s0); a[b][m][1][1] = mul_bf16x2(fp4_pair<2>(q8), s8);
          a[b][m][1][2] = mul_bf16x2(fp4_pair<3>(q0), s0); a[b][m][1][3] = mul_bf16x2(fp4_pair<3>(q8), s8);
        }
      }
      wgmma_fence();
      const uint64_t xd = (u < 2 ? xd0 : xd1) + 4 * (u & 1);  // 32 bf16 = 64 bytes per K block
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        wgmma_bf16_rs<NTM>(acc, a[b][0][h], xd + 2 * h);
        if constexpr (SWIGLU) wgmma_bf16_rs<NTM>(acc3, a[b][1][h], xd + 2 * h);
      }
      wgmma_commit();
    }
  }
  wgmma_wait<0>();
  wgmma_fence_regs(acc);
  if constexpr (SWIGLU) wgmma_fence_regs(acc3);
  cp_async_wait<0>();
  store_tiles<SWIGLU, SPLIT>(p, acc, acc3, nt, rows, row0, nb0 + rg, t);
}

}  // namespace detail

// Widens E4M3 activations with their block scales into the BF16 operand of gemm_wgbf16 (K % 32, 16-byte rows).
inline Status act_bf16_perm(const uint8_t* xc, const uint8_t* xe, int rows, int K, bf16_t* out, cudaStream_t stream) {
  if (rows < 0 || K % 32) return bad_arg("act_bf16_perm: K % 32");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * (K / 32);
  detail::act_bf16_perm_kernel<<<unsigned((n + 127) / 128), 128, 0, stream>>>(xc, xe, rows, K, out);
  return launch_status("act_bf16_perm");
}

// Split-K (p.ksplit > 1) needs p.partial: FP32 [ksplit][M][N], twice that for SwiGLU.
inline bool gemm_wgbf16_fits(const SkinnyParams& p) {
  SkinnyParams q = p;
  q.ksplit = 1;
  return p.xb && reinterpret_cast<uintptr_t>(p.xb) % 16 == 0 && gemm_staged_fits(q) && p.ksplit >= 1 &&
         p.ksplit <= 64 && (p.ksplit == 1 || p.partial);
}

// The BF16 wgmma kernel over row tiles of at most max_rows (16, 32, 64; dense: 64-row tiles). p.xb: act_bf16_perm
// of the activations (p.xc and p.xe are not read).
template <WFmt F, bool SWIGLU>
inline Status gemm_wgbf16(const SkinnyParams& p, int max_tiles, int max_rows, cudaStream_t stream) {
  if (!gemm_wgbf16_fits(p)) return bad_arg("gemm_wgbf16: N % 64, K % 128, aligned operands, p.xb, split-K partials");
  if (SWIGLU && !p.w3.w) return bad_arg("gemm_wgbf16: SwiGLU needs w3");
  if (p.tiles && max_rows > 64) return bad_arg("gemm_wgbf16: tiles of at most 64 rows");
  const int ntm = p.tiles ? (max_rows <= 16 ? 2 : max_rows <= 32 ? 4 : 8) : 8;
  const int gx = p.tiles ? max_tiles : ceil_div(p.M, 64);
  if (gx == 0 || p.M == 0) return Status::Ok();
  if (p.N / 64 > 65535) return bad_arg("gemm_wgbf16: N too large");
  const dim3 grid(gx, p.N / 64, p.ksplit);
  auto go = [&](auto kernel, int smem) -> Status {
    DSV41_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                   "gemm_wgbf16: smem attribute");
    kernel<<<grid, detail::wgbf16::THREADS, smem, stream>>>(p);
    return launch_status("gemm_wgbf16");
  };
  using detail::wgbf16_gemm_kernel;
  using detail::wgbf16::Layout;
  auto by_rows = [&](auto split) -> Status {  // split: std::bool_constant, the kernel's SPLIT
    constexpr bool S = decltype(split)::value;
    if (ntm == 2) return go(wgbf16_gemm_kernel<F, SWIGLU, 2, S>, Layout<F, SWIGLU, 2>::SMEM);
    if (ntm == 4) return go(wgbf16_gemm_kernel<F, SWIGLU, 4, S>, Layout<F, SWIGLU, 4>::SMEM);
    return go(wgbf16_gemm_kernel<F, SWIGLU, 8, S>, Layout<F, SWIGLU, 8>::SMEM);
  };
  return p.ksplit > 1 ? by_rows(std::true_type{}) : by_rows(std::false_type{});
}

// Which kernel a grouped or dense GEMM takes: the register kernel (gemm_skinny), the streaming one (gemm_stream: the
// register kernel's math, weights and scales streamed through shared memory), the staged one on mma.sync or on E4M3
// wgmma (opt-in, not FP32 sums), the BF16 wgmma one (opt-in, needs p.xb; otherwise staged), or (automatic) the staged
// mma.sync one where it fits and the call has at least min_rows rows, below that the streaming one for FP4 weights.
// Register, streaming and staged give the same bits.
enum class SkinnyKernel : int { automatic = 0, registers = 1, staged = 2, wgmma = 3, wgmma_bf16 = 4, stream = 5 };
template <WFmt F, bool SWIGLU>
inline Status gemm_skinny_or_staged(const SkinnyParams& p, int max_tiles, int max_rows, SkinnyKernel k, int min_rows,
                                    cudaStream_t stream) {
  const bool tiles_ok = !p.tiles || max_rows <= 64;
  if (k == SkinnyKernel::wgmma_bf16 && tiles_ok && gemm_wgbf16_fits(p))
    return gemm_wgbf16<F, SWIGLU>(p, max_tiles, max_rows, stream);
  const bool staged = k != SkinnyKernel::registers && k != SkinnyKernel::stream && gemm_staged_fits(p) && tiles_ok &&
                      (k == SkinnyKernel::staged || k == SkinnyKernel::wgmma || k == SkinnyKernel::wgmma_bf16 ||
                       p.M >= min_rows);
  if (staged) return gemm_staged<F, SWIGLU>(p, max_tiles, max_rows, k == SkinnyKernel::wgmma, stream);
  // Streaming: when asked, and automatically for FP4 weights (the routed experts at decode: 1.06-1.26x the register
  // kernel; on FP8 weights 0.94-1.06x, so those stay on it; bench/gemm_stream.cu).
  if ((k == SkinnyKernel::stream || (k == SkinnyKernel::automatic && F == WFmt::FP4)) && gemm_stream_fits(p, max_rows))
    return gemm_stream<F, SWIGLU, stream_ks<F>()>(p, max_tiles, max_rows, stream);
  return gemm_skinny<F, SWIGLU>(p, max_tiles, max_rows, stream);
}

}  // namespace dsv41::gpu
