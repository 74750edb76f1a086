// The skinny block-scaled GEMM (gemm_skinny.cuh's SkinnyParams: dense or grouped over a row-tile list, FP8 or FP4
// weights, optionally the SwiGLU pair, optionally split-K) with the weights streamed through shared memory: a
// cp.async pipeline of 128-wide K stages keeps several stages of every CTA's 64 weight rows in flight, where the
// register kernel (skinny_gemm_kernel) holds one stage per warp in registers and waits for it (ncu, MoE at T = 1:
// 38% of DRAM bandwidth, L1TEX scoreboard stalls most of the time).
// The arithmetic is the register kernel's, in the same order (per 32-wide K block, ascending within the same
// split-K ranges: mma with C = 0, then acc = fma(part, s_w·s_x, acc)), so the outputs are the same bits.
// Takes tiles of up to 16 activation rows (grouped: the MoE's kMoeTile; dense: M ≤ 64) and K % 128 == 0.
#pragma once
#include <dsv41/backend/cuda/kernels/gemm_skinny.cuh>

namespace dsv41::gpu {
namespace detail::stream {

constexpr int kRows = 64;   // weight rows per CTA (4 warps x 16)
constexpr int kXRows = 16;  // activation rows per tile (2 mma N tiles of 8)
constexpr int kX = kXRows * 128;  // FP8 activation bytes of one stage
constexpr int kXE = kXRows * 4;   // activation exponents of one stage (4 K blocks per row)
template <WFmt F>
constexpr int w_bytes() { return kRows * (F == WFmt::FP8 ? 128 : 64); }  // weights of one stage
template <WFmt F>
constexpr int s_bytes() { return F == WFmt::FP8 ? 16 : kRows * 4; }  // their UE8M0 scales (FP8: 2 block rows x 4)
template <WFmt F, bool SWIGLU>
constexpr int stage_bytes() { return (SWIGLU ? 2 : 1) * (w_bytes<F>() + s_bytes<F>()) + kX + kXE; }
// 26-55 KB of stages per CTA (4-6 CTAs per SM).
template <WFmt F, bool SWIGLU>
constexpr int stages() { return F == WFmt::FP8 ? (SWIGLU ? 3 : 4) : 4; }
template <WFmt F, bool SWIGLU>
constexpr int smem_bytes() { return stages<F, SWIGLU>() * stage_bytes<F, SWIGLU>(); }

// 16-byte chunk swizzles, so that the fragment loads below hit distinct banks: rows of 128 bytes (FP8 weights,
// activations; 8 chunks) by bits 0-1 of the row, shifted; FP4 weight rows (64 bytes, 4 chunks) by bits 1-2.
__device__ __forceinline__ int chunk128(int row, int ch) { return ch ^ ((row & 3) << 1); }
__device__ __forceinline__ int chunk64(int row, int ch) { return ch ^ ((row >> 1) & 3); }

}  // namespace detail::stream

namespace detail {

template <WFmt F, bool SWIGLU>
__global__ void __launch_bounds__(128) stream_gemm_kernel(const SkinnyParams p) {
  using namespace stream;
  constexpr bool FP8 = F == WFmt::FP8;
  constexpr int STAGES = stages<F, SWIGLU>(), SB = stage_bytes<F, SWIGLU>(), KW = w_bytes<F>(), KS = s_bytes<F>();
  constexpr int ROWB = FP8 ? 128 : 64;  // bytes of one weight row in a stage
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  int group = 0, row0, rows;
  if (p.tiles) {
    if (int(blockIdx.x) >= *p.n_tiles) return;
    const RowTile rt = p.tiles[blockIdx.x];
    group = rt.group; row0 = rt.row0; rows = rt.rows;
  } else {
    row0 = blockIdx.x * kXRows;
    rows = min(kXRows, p.M - row0);
  }
  const int K = p.K, nkb = K / 32;
  // The register kernel's split-K ranges (U = 4 K blocks): the same sums.
  const int kb_per = ((nkb + p.ksplit - 1) / p.ksplit + 3) / 4 * 4;
  const int kb0 = blockIdx.z * kb_per, kb1 = min(nkb, kb0 + kb_per);
  const int nsteps = kb1 > kb0 ? (kb1 - kb0) / 4 : 0;
  const int nb0 = blockIdx.y * kRows;
  const int64_t wrow_bytes = FP8 ? K : K / 2;
  const uint8_t* w1 = p.w1.w + p.w1.group_w * group;
  const uint8_t* s1 = p.w1.s + p.w1.group_s * group;
  const uint8_t* w3 = SWIGLU ? p.w3.w + p.w3.group_w * group : w1;
  const uint8_t* s3 = SWIGLU ? p.w3.s + p.w3.group_s * group : s1;

  // What this thread copies each stage: weight chunks c = tid + 128 i (row c / (ROWB / 16)), one activation chunk
  // (row tid / 8, chunk tid % 8), one scale word (FP4: weight row tid % 64 of w1 for tid < 64, of w3 below 128;
  // FP8: block row tid % 2 of w1 for tid < 2, of w3 below 4) and the exponents of activation row tid (< 16).
  // Weight rows past N and activation rows past the tile repeat the last one (their outputs are not written).
  auto src_row = [&](int r) {
    r = min(r, rows - 1);
    return p.row_src ? p.row_src[row0 + r] : row0 + r;
  };
  const int xr = tid >> 3, xch = tid & 7;
  const uint8_t* xsrc = p.xc + int64_t(src_row(xr)) * K + int64_t(kb0) * 32 + xch * 16;
  const uint8_t* xesrc = p.xe + int64_t(src_row(tid & 15)) * nkb + kb0;
  constexpr int SROWS = FP8 ? 2 : kRows;  // scale rows of one matrix in a stage
  const int srow = tid % SROWS;
  const bool s_first = tid < SROWS, s_second = SWIGLU && !s_first && tid < 2 * SROWS;
  const int64_t s_off = FP8 ? int64_t(min(nb0 / 32 + srow, (p.N - 1) / 32)) * nkb + kb0
                            : int64_t(min(nb0 + srow, p.N - 1)) * nkb + kb0;
  const uint8_t* ssrc = (s_first ? s1 : s3) + s_off;
  auto load_stage = [&](int buf, int step) {
    uint8_t* W1 = smem + buf * SB;
    uint8_t* W3 = W1 + KW;
    uint8_t* X = W1 + (SWIGLU ? 2 : 1) * KW;
    uint8_t* XE = X + kX;
    uint8_t* S1 = XE + kXE;
    uint8_t* S3 = S1 + KS;
    constexpr int CPR = ROWB / 16, NCH = kRows * CPR / 128;  // chunks per row, per thread
#pragma unroll
    for (int i = 0; i < NCH; ++i) {
      const int c = tid + 128 * i, r = c / CPR, ch = c % CPR;
      const int64_t off = int64_t(min(nb0 + r, p.N - 1)) * wrow_bytes + int64_t(kb0) * (ROWB / 4) +
                          int64_t(step) * ROWB + ch * 16;
      const int dst = r * ROWB + ((FP8 ? chunk128(r, ch) : chunk64(r, ch)) << 4);
      cp_async16(W1 + dst, w1 + off);
      if constexpr (SWIGLU) cp_async16(W3 + dst, w3 + off);
    }
    cp_async16(X + xr * 128 + (chunk128(xr, xch) << 4), xsrc + step * 128);
    if (s_first || s_second) cp_async4((s_first ? S1 : S3) + srow * 4, ssrc + step * 4);
    if (tid < kXRows) cp_async4(XE + tid * 4, xesrc + step * 4);
  };

  const int nt = (rows + 7) / 8;
  const int rr = warp * 16 + g;  // this thread's weight rows within the CTA: rr and rr + 8 (same swizzle)
  float acc[2][4], acc3[2][4];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[j][c] = acc3[j][c] = 0.f;

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
    const uint8_t* W1 = smem + (step % STAGES) * SB;
    const uint8_t* W3 = W1 + KW;
    const uint8_t* X = W1 + (SWIGLU ? 2 : 1) * KW;
    const uint8_t* XE = X + kX;
    const uint8_t* S1 = XE + kXE;
    const uint8_t* S3 = S1 + KS;
    auto frag = [&](uint32_t(&a)[4], const uint8_t* W, int u) {
      if constexpr (FP8) {
        const int o = (chunk128(rr, 2 * u + (t >> 1)) << 4) + (t & 1) * 8;
        frag_a<F>(a, RawA<F>{*reinterpret_cast<const uint2*>(W + rr * ROWB + o),
                             *reinterpret_cast<const uint2*>(W + (rr + 8) * ROWB + o)});
      } else {
        const int o = (chunk64(rr, u) << 4) + 4 * t;
        frag_a<F>(a, RawA<F>{*reinterpret_cast<const uint32_t*>(W + rr * ROWB + o),
                             *reinterpret_cast<const uint32_t*>(W + (rr + 8) * ROWB + o)});
      }
    };
    // scale of rows rr (lo) and rr + 8 (hi) at K block u; FP8: one 32-row block holds both
    auto scale = [&](const uint8_t* S, int u, bool hi) {
      if constexpr (FP8) return ue8m0_f(S[(warp >> 1) * 4 + u]);
      return ue8m0_f(S[(rr + (hi ? 8 : 0)) * 4 + u]);
    };
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      uint32_t a[4], a3[4];
      frag(a, W1, u);
      const float sw0 = scale(S1, u, false), sw1 = scale(S1, u, true);
      float sw30 = 0.f, sw31 = 0.f;
      if constexpr (SWIGLU) {
        frag(a3, W3, u);
        sw30 = scale(S3, u, false);
        sw31 = scale(S3, u, true);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        if (j < nt) {
          const int xrow = 8 * j + g;
          const uint2 b = *reinterpret_cast<const uint2*>(X + xrow * 128 + (chunk128(xrow, 2 * u + (t >> 1)) << 4) +
                                                          (t & 1) * 8);
          const float sx0 = ue8m0_f(XE[(8 * j + 2 * t) * 4 + u]), sx1 = ue8m0_f(XE[(8 * j + 2 * t + 1) * 4 + u]);
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
  cp_async_wait<0>();
  // Epilogue as skinny_gemm_kernel's: c0 (row g, act 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1).
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (j >= nt) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = 8 * j + 2 * t + (c & 1);
      const int n = nb0 + rr + 8 * (c >> 1);
      if (r >= rows || n >= p.N) continue;
      const int64_t pr = row0 + r;
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

}  // namespace detail

// Whether the streamed kernel takes this skinny GEMM (gemm_skinny in gemm.cuh picks it then).
inline bool stream_gemm_fits(const SkinnyParams& p, int max_rows, bool swiglu) {
  auto al = [](const void* q, int a) { return reinterpret_cast<uintptr_t>(q) % a == 0; };
  const bool rows_ok = p.tiles ? (p.n_tiles && max_rows <= detail::stream::kXRows) : p.M <= 64;
  return rows_ok && p.K % 128 == 0 && al(p.w1.w, 16) && p.w1.group_w % 16 == 0 && al(p.w1.s, 4) &&
         p.w1.group_s % 4 == 0 &&
         (!swiglu || (al(p.w3.w, 16) && p.w3.group_w % 16 == 0 && al(p.w3.s, 4) && p.w3.group_s % 4 == 0)) &&
         al(p.xc, 16) && al(p.xe, 4);
}

// The streamed kernel's launcher (stream_gemm_fits must hold; SkinnyParams as for gemm_skinny_regs).
template <WFmt F, bool SWIGLU>
inline Status gemm_skinny_stream(const SkinnyParams& p, int max_tiles, int max_rows, cudaStream_t stream) {
  if (p.N % 16 || p.N <= 0 || p.ksplit < 1) return bad_arg("gemm_skinny_stream: N % 16");
  if (!stream_gemm_fits(p, max_rows, SWIGLU)) return bad_arg("gemm_skinny_stream: shape or alignment does not fit");
  if (p.ksplit > 1 && !p.partial) return bad_arg("gemm_skinny_stream: split-K needs p.partial");
  const int gx = p.tiles ? max_tiles : ceil_div(p.M, detail::stream::kXRows);
  if (gx == 0) return Status::Ok();
  if (ceil_div(p.N, detail::stream::kRows) > 65535) return bad_arg("gemm_skinny_stream: N too large");
  constexpr int smem = detail::stream::smem_bytes<F, SWIGLU>();
  static_assert(smem <= 227 * 1024);
  DSV41_CUDA_TRY(cudaFuncSetAttribute(detail::stream_gemm_kernel<F, SWIGLU>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "gemm_skinny_stream: smem attribute");
  dim3 grid(gx, ceil_div(p.N, detail::stream::kRows), p.ksplit);
  detail::stream_gemm_kernel<F, SWIGLU><<<grid, 128, smem, stream>>>(p);
  return launch_status("gemm_skinny_stream");
}

}  // namespace dsv41::gpu
