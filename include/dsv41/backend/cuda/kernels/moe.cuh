// SPEC §4.6 MoE on the GPU: gate (BF16 weights, FP32 out), sqrt-softplus routing with bias, top-k (ties to
// the lower expert id), routing weights; token assignments sorted per expert (below 512 routed rows in one kernel,
// moe_route_small_kernel; else CUB's stable radix sort, histogram and exclusive scan); a row-tile list per expert;
// grouped FP4 expert GEMMs (w1/w3 fused with the SwiGLU clamp and the routing weight, then w2); the shared expert
// (FP8; optionally on a second stream, MoeOverlap); the combine sums each token's expert outputs in ascending
// expert id and adds the shared expert, as cpu::moe does.
// Expert parallel (issue 16): the weights hold experts [e_begin, e_end) only; the rank computes the rows routed to
// those, the others stay zero, and the communicator sums the rows over ranks before the combine (every rank routes
// the same inputs, so the rows are in the same order on every rank; one writer per row: exact).
#pragma once
#include <algorithm>
#include <string>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/block/block_scan.cuh>

#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_wgmma_bf16.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/parallel/communicator.hpp>

namespace dsv41::gpu {

struct MoeShape {
  int T = 0;      // tokens
  int d = 0;      // hidden
  int E = 0;      // routed experts (the register-resident routing: ≤ 1024; more: route_any_kernel)
  int k = 0;      // experts per token (≤ 8 in registers; more: route_any_kernel)
  int I = 0;      // expert inner width
  float route_scale = 1.f;
  float limit = 0.f;
  bool norm_topk = true;
  int e_begin = 0, e_end = -1;  // routed experts held (the weights' group 0 is e_begin); e_end −1: all E
  int tile_rows = 0;            // rows per expert tile, 16..64 (0: automatic, see moe_tile_rows)
  SkinnyKernel kernel = SkinnyKernel::automatic;  // expert and shared-expert GEMMs (see moe_bf16_routed)
  // Below 512 routed rows, step 2 (sort, counts, tiles, rows) as one kernel (moe_route_small_kernel) instead of the
  // radix sort, histogram, scan, tile and row launches; the same outputs (check_moe, bit 14). false: always CUB.
  bool fused_routing = true;
  // The routed w2 on the BF16 wgmma kernel at every size (opt-in; automatic takes it from 512 routed rows). At decode
  // it timed 1.32x / 1.56x / 1.57x the register kernel at T = 1 / 8 / 64 (streaming: 1.07-1.10x; bench/gemm_stream.cu
  // wg, notes/gpu.md session 18 run 1); its sums are its own (within check_moe's bound), not the register bits.
  bool w2_bf16 = false;
  // The routed w1/w3 on the BF16 wgmma kernel below 512 routed rows too (opt-in; 0: off), over this many K ranges
  // (1: whole K; 2-8: split-K with the SwiGLU in the reduce): more CTAs at T=1, where 6 experts give 216. Its own
  // sums, within check_moe's bound.
  int w13_split = 0;
};

struct MoeWeights {
  const bf16_t* gate = nullptr;  // [E, d]
  const float* bias = nullptr;   // [E]
  WeightRef w1, w3, w2;          // routed experts, FP4, group stride = one expert
  WeightRef s1, s3, s2;          // shared expert, FP8
  // Image tokens route with bias_vl (SPEC §4.6) when bias_vl, tokens and image_token_id ≥ 0 are given.
  const float* bias_vl = nullptr;   // [E]
  const int32_t* tokens = nullptr;  // [T] token ids (device)
  int image_token_id = -1;
};

// Views into one caller-owned workspace.
struct MoeWork {
  uint8_t* xc; uint8_t* xe;          // act quant of x [T, d]
  float* logits;                     // [T, E]
  float* route_b;                    // [T, E] biased scores of route_any_kernel (nullptr when not needed)
  int* sel; float* wts;              // [T, k]
  uint32_t* keys; uint32_t* keys_sorted; int* vals; int* vals_sorted;  // [P]
  int* counts; int* offsets;         // [E], [E]
  RowTile* tiles; int* n_tiles;      // [max_tiles], [1]
  int* row_src; float* row_w; int* pos_of;  // [P]
  bf16_t* h; uint8_t* hc; uint8_t* he;       // [P, I]
  bf16_t* ys;                        // [P, d]
  bf16_t* hs; uint8_t* hsc; uint8_t* hse;    // shared: [T, I]
  bf16_t* sh;                        // [T, d]
  bf16_t* xb; bf16_t* hb;            // BF16 wgmma kernel only: act_bf16_perm of xc [T, d], hc [P, I]
  float* gemm_ws; size_t gemm_ws_bytes;
  float* part13;                     // MoeShape::w13_split > 1: w1/w3 split-K partials [2][split][P][I]
  void* cub_tmp; size_t cub_sort_bytes, cub_hist_bytes, cub_scan_bytes;
  int max_tiles;
};

namespace detail {

constexpr int kMoeTile = 16;  // the smallest expert tile (moe_max_tiles counts with it)
// From this many routed rows (T·k) on, the routed expert GEMMs take the BF16 wgmma kernel (gemm_wgmma_bf16.cuh;
// before session 16 the staged one), and the shared expert the staged kernel (gemm_staged.cuh) from 65 tokens on.
constexpr int kMoeStagedRows = 512;
inline bool moe_staged(const MoeShape& s) {
  return s.kernel == SkinnyKernel::staged || s.kernel == SkinnyKernel::wgmma ||
         s.kernel == SkinnyKernel::wgmma_bf16 || (s.kernel == SkinnyKernel::automatic && s.T * s.k >= kMoeStagedRows);
}
// The routed experts' FP4 GEMMs take the BF16 wgmma kernel when asked and, automatically, from kMoeStagedRows
// routed rows on: on FP4 weights it is as exact as the register kernel against a double sum (bench/gemm_precision.cu,
// notes/gpu.md session 16) but not the same bits. The shared expert (FP8) keeps the staged kernel unless asked.
inline bool moe_bf16_routed(const MoeShape& s) {
  return s.kernel == SkinnyKernel::wgmma_bf16 || (s.kernel == SkinnyKernel::automatic && s.T * s.k >= kMoeStagedRows);
}
inline const char* moe_kernel_name(const MoeShape& s) {
  return !moe_staged(s) ? (s.kernel == SkinnyKernel::registers ? "register" : s.kernel == SkinnyKernel::stream ? "stream"
                           : "stream routed, register shared") :
         s.kernel == SkinnyKernel::wgmma ? "wgmma" :
         s.kernel == SkinnyKernel::wgmma_bf16 ? "wgmma-bf16" : moe_bf16_routed(s) ? "wgmma-bf16 routed, staged shared" : "staged";
}
// ... with the routed GEMMs that MoeShape::w13_split and w2_bf16 move to the BF16 wgmma kernel.
inline std::string moe_kernels_name(const MoeShape& s) {
  std::string n = moe_kernel_name(s);
  if (s.w13_split > 0 && !moe_bf16_routed(s)) n += ", w1/w3 wgmma-bf16 over " + std::to_string(s.w13_split) + " K ranges";
  if (s.w2_bf16 && !moe_bf16_routed(s)) n += ", w2 wgmma-bf16";
  return n;
}
// Rows per expert tile. The outputs are the same bits for any tile (each element's sum runs over K in the same
// order). Below kMoeStagedRows the streaming kernel (gemm_stream.cuh, at most 16 rows per tile) or the register
// kernel takes 16: 64-row tiles read each expert's weights once per 64 rows instead of 16 but
// were slower on the H200 at every prefill size (it keeps fewer warps per SM at 64 rows): MoE layer T=2048 29.0 ms
// against 18.5 ms on 16-row tiles (bench/README.md, session 12). The staged kernel takes the tile nearest the
// mean rows per expert (16, 32 or 64).
inline int moe_tile_rows(const MoeShape& s) {
  if (s.tile_rows > 0) return std::clamp(s.tile_rows, kMoeTile, 64);
  if (!moe_staged(s)) return kMoeTile;
  const int mean = s.T * s.k / std::max(1, s.E);
  return mean >= 48 ? 64 : mean >= 24 ? 32 : kMoeTile;
}
inline int moe_max_tiles(const MoeShape& s) { return ceil_div(s.T * s.k, kMoeTile) + std::min(s.E, s.T * s.k); }
inline int bits_for(int E) { int b = 1; while ((1 << b) < E) ++b; return b; }
inline bool moe_route_fast(const MoeShape& s) { return s.E <= 1024 && s.k <= 8; }
// Walks the workspace layout; with base == nullptr only counts bytes.
inline size_t moe_layout(const MoeShape& s, uint8_t* base, MoeWork* w) {
  const int64_t T = s.T, P = int64_t(s.T) * s.k, d = s.d, I = s.I, E = s.E;
  const int max_tiles = moe_max_tiles(s);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    off = (off + 255) & ~size_t(255);
    uint8_t* p = base ? base + off : nullptr;
    off += bytes;
    return p;
  };
  MoeWork v{};
  v.xc = take(T * d); v.xe = take(T * d / 32);
  v.logits = reinterpret_cast<float*>(take(T * E * 4));
  v.route_b = moe_route_fast(s) ? nullptr : reinterpret_cast<float*>(take(T * E * 4));
  v.sel = reinterpret_cast<int*>(take(P * 4)); v.wts = reinterpret_cast<float*>(take(P * 4));
  v.keys = reinterpret_cast<uint32_t*>(take(P * 4)); v.keys_sorted = reinterpret_cast<uint32_t*>(take(P * 4));
  v.vals = reinterpret_cast<int*>(take(P * 4)); v.vals_sorted = reinterpret_cast<int*>(take(P * 4));
  v.counts = reinterpret_cast<int*>(take(E * 4)); v.offsets = reinterpret_cast<int*>(take(E * 4));
  v.tiles = reinterpret_cast<RowTile*>(take(size_t(max_tiles) * sizeof(RowTile)));
  v.n_tiles = reinterpret_cast<int*>(take(4));
  v.row_src = reinterpret_cast<int*>(take(P * 4)); v.row_w = reinterpret_cast<float*>(take(P * 4));
  v.pos_of = reinterpret_cast<int*>(take(P * 4));
  v.h = reinterpret_cast<bf16_t*>(take(P * I * 2)); v.hc = take(P * I); v.he = take(P * I / 32);
  v.ys = reinterpret_cast<bf16_t*>(take(P * d * 2));
  v.hs = reinterpret_cast<bf16_t*>(take(T * I * 2)); v.hsc = take(T * I); v.hse = take(T * I / 32);
  v.sh = reinterpret_cast<bf16_t*>(take(T * d * 2));
  const bool wb = moe_bf16_routed(s);
  v.xb = wb || s.w13_split > 0 ? reinterpret_cast<bf16_t*>(take(T * d * 2)) : nullptr;
  v.hb = wb || s.w2_bf16 ? reinterpret_cast<bf16_t*>(take(P * I * 2)) : nullptr;
  v.gemm_ws_bytes = std::max({gemm_workspace_bytes(s.T, s.E, s.d), 2 * gemm_workspace_bytes(s.T, s.I, s.d),
                              gemm_workspace_bytes(s.T, s.d, s.I)});
  v.gemm_ws = reinterpret_cast<float*>(take(v.gemm_ws_bytes));
  v.part13 = !wb && s.w13_split > 1 ? reinterpret_cast<float*>(take(2 * size_t(s.w13_split) * P * I * 4)) : nullptr;
  // CUB temporary storage sizes (host-only queries, no device work).
  v.cub_sort_bytes = v.cub_hist_bytes = v.cub_scan_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, v.cub_sort_bytes, v.keys, v.keys_sorted, v.vals, v.vals_sorted, int(P), 0,
                                  bits_for(s.E));
  cub::DeviceHistogram::HistogramEven(nullptr, v.cub_hist_bytes, v.keys_sorted, v.counts, s.E + 1, 0u,
                                      uint32_t(s.E), int(P));
  cub::DeviceScan::ExclusiveSum(nullptr, v.cub_scan_bytes, v.counts, v.offsets, s.E);
  v.cub_tmp = take(std::max({v.cub_sort_bytes, v.cub_hist_bytes, v.cub_scan_bytes}));
  v.max_tiles = max_tiles;
  if (w) *w = v;
  return off + 256;
}

// Gate logits, FP32: one warp per (token, expert), FMA over bf16 values (exact products).
template <int = 0>
__global__ void gate_simple_kernel(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int T, int E, int d,
                                   float* __restrict__ logits) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(T) * E) return;
  const int t = int(wid / E), e = int(wid % E);
  float acc = 0.f;
  for (int i = lane; i < d; i += 32) acc = fmaf(bf2f(x[int64_t(t) * d + i]), bf2f(w[int64_t(e) * d + i]), acc);
  acc = warp_sum(acc);
  if (lane == 0) logits[wid] = acc;
}

// gate_simple_kernel with 16-byte loads (x and w rows 16-byte aligned, d % 8 == 0): lane l takes elements
// 8l..8l+7 of each 256-wide stretch, in order, then the lanes are summed in the same tree.
template <int = 0>
__global__ void gate_vec_kernel(const bf16_t* __restrict__ x, const bf16_t* __restrict__ w, int T, int E, int d,
                                float* __restrict__ logits) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(T) * E) return;
  const int t = int(wid / E), e = int(wid % E);
  const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(t) * d);
  const uint4* wr = reinterpret_cast<const uint4*>(w + int64_t(e) * d);
  float acc = 0.f;
  for (int i = lane; i < d / 8; i += 32) {
    const uint4 xv = __ldg(xr + i), wv = __ldg(wr + i);
    const uint32_t xs[4] = {xv.x, xv.y, xv.z, xv.w}, ws[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      acc = fmaf(__uint_as_float(xs[q] << 16), __uint_as_float(ws[q] << 16), acc);
      acc = fmaf(__uint_as_float(xs[q] & 0xFFFF0000u), __uint_as_float(ws[q] & 0xFFFF0000u), acc);
    }
  }
  acc = warp_sum(acc);
  if (lane == 0) logits[wid] = acc;
}

__device__ __forceinline__ float softplus_ref(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// One warp per token: scores, top-k of score + bias (ties to the lower id), weights; sort keys/values.
template <int = 0>
__global__ void route_kernel(const float* __restrict__ logits, const float* __restrict__ bias_text, int T, int E, int k,
                             bool norm, float scale, int* __restrict__ sel, float* __restrict__ wts,
                             uint32_t* __restrict__ keys, int* __restrict__ vals, const float* __restrict__ bias_vl,
                             const int32_t* __restrict__ tokens, int image_id) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= T) return;
  const bool image = bias_vl && tokens && image_id >= 0 && tokens[warp] == image_id;
  const float* bias = image ? bias_vl : bias_text;
  constexpr int MAXE = 32;  // E ≤ 1024
  float s[MAXE], b[MAXE];
  const float* l = logits + int64_t(warp) * E;
#pragma unroll
  for (int i = 0; i < MAXE; ++i) {
    const int e = lane + 32 * i;
    if (e < E) {
      s[i] = __fsqrt_rn(softplus_ref(l[e]));
      b[i] = __fadd_rn(s[i], bias[e]);
    } else {
      s[i] = 0.f;
      b[i] = -INFINITY;
    }
  }
  uint32_t taken = 0;
  float w_sel[8];
  int e_sel[8];
  for (int r = 0; r < k; ++r) {
    float best = -INFINITY, bs = 0.f;
    int be = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < MAXE; ++i) {
      const int e = lane + 32 * i;
      if (e < E && !(taken >> i & 1u) && (b[i] > best || (b[i] == best && e < be))) { best = b[i]; be = e; bs = s[i]; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      const float os = __shfl_xor_sync(0xffffffffu, bs, o);
      if (ob > best || (ob == best && oe < be)) { best = ob; be = oe; bs = os; }
    }
    if ((be & 31) == lane) taken |= 1u << (be >> 5);
    e_sel[r < 8 ? r : 7] = be;
    w_sel[r < 8 ? r : 7] = bs;
  }
  if (lane == 0) {
    float sum = 0.f;
    for (int r = 0; r < k; ++r) sum = __fadd_rn(sum, w_sel[r]);
    for (int r = 0; r < k; ++r) {
      float w = w_sel[r];
      if (norm && k > 1) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
      w = __fmul_rn(w, scale);
      const int a = warp * k + r;
      sel[a] = e_sel[r];
      wts[a] = w;
      keys[a] = uint32_t(e_sel[r]);
      vals[a] = a;
    }
  }
}

// route_kernel for any E and k: one warp per token; scores s overwrite the logits, the biased scores go to
// b [T, E]; each of the k rounds takes the largest b not yet taken (ties to the lower id; −inf can be
// taken, as in route_kernel) and marks it taken with a NaN. Weights as route_kernel.
template <int = 0>
__global__ void route_any_kernel(float* __restrict__ logits, const float* __restrict__ bias_text, int T, int E, int k,
                                 bool norm, float scale, int* __restrict__ sel, float* __restrict__ wts,
                                 uint32_t* __restrict__ keys, int* __restrict__ vals, const float* __restrict__ bias_vl,
                                 const int32_t* __restrict__ tokens, int image_id, float* __restrict__ bb) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (warp >= T) return;
  const bool image = bias_vl && tokens && image_id >= 0 && tokens[warp] == image_id;
  const float* bias = image ? bias_vl : bias_text;
  float* sr = logits + int64_t(warp) * E;
  float* br = bb + int64_t(warp) * E;
  for (int e = lane; e < E; e += 32) {
    const float sv = __fsqrt_rn(softplus_ref(sr[e]));
    sr[e] = sv;
    br[e] = __fadd_rn(sv, bias[e]);
  }
  __syncwarp();
  for (int r = 0; r < k; ++r) {
    float best = -INFINITY, bs = 0.f;
    int be = 0x7fffffff;
    for (int e = lane; e < E; e += 32) {
      const float b = br[e];
      if (b > best || (b == best && e < be)) { best = b; be = e; bs = sr[e]; }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, be, o);
      const float os = __shfl_xor_sync(0xffffffffu, bs, o);
      if (ob > best || (ob == best && oe < be)) { best = ob; be = oe; bs = os; }
    }
    if (lane == 0) {
      if (be >= 0 && be < E) br[be] = NAN;
      sel[warp * k + r] = be;
      wts[warp * k + r] = bs;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float sum = 0.f;
    for (int r = 0; r < k; ++r) sum = __fadd_rn(sum, wts[warp * k + r]);
    for (int r = 0; r < k; ++r) {
      const int a = warp * k + r;
      float w = wts[a];
      if (norm && k > 1) w = __fdiv_rn(w, __fadd_rn(sum, 1e-20f));
      wts[a] = __fmul_rn(w, scale);
      keys[a] = uint32_t(sel[a]);
      vals[a] = a;
    }
  }
}

// One block: tiles of ≤ tile rows per expert, in expert order. Thread i takes experts
// [i·per, (i+1)·per), per = ceil(E / THREADS): any E. counts and offsets in global or shared memory.
template <int THREADS>
__device__ __forceinline__ void moe_tiles_block(const int* __restrict__ counts, const int* __restrict__ offsets, int E,
                                                RowTile* __restrict__ tiles,
                                                int* __restrict__ n_tiles, int tile, int held0, int held1) {
  using Scan = cub::BlockScan<int, THREADS>;
  __shared__ typename Scan::TempStorage tmp;
  // thread i: experts [i·per, (i+1)·per) of the held range [held0, held1)
  const int h0 = max(held0, 0), h1 = min(held1, E), nh = max(h1 - h0, 0);
  const int per = (nh + THREADS - 1) / THREADS, e0 = h0 + int(threadIdx.x) * per, e1 = min(h1, e0 + per);
  int local = 0;
  for (int e = e0; e < e1; ++e) local += (counts[e] + tile - 1) / tile;
  int start, total;
  Scan(tmp).ExclusiveSum(local, start, total);
  for (int e = e0; e < e1; ++e) {
    const int cnt = counts[e], nt = (cnt + tile - 1) / tile;
    for (int c = 0; c < nt; ++c) {
      RowTile rt;
      rt.group = e - h0;  // the weights' group: experts are packed from held0
      rt.row0 = offsets[e] + tile * c;
      rt.rows = min(tile, cnt - tile * c);
      rt.pad = 0;
      tiles[start++] = rt;
    }
  }
  if (threadIdx.x == 0) *n_tiles = total;
}
template <int THREADS>
__global__ void __launch_bounds__(THREADS) moe_tiles_kernel(const int* __restrict__ counts,
                                                            const int* __restrict__ offsets, int E,
                                                            RowTile* __restrict__ tiles, int* __restrict__ n_tiles,
                                                            int tile, int held0 = 0, int held1 = 0x7fffffff) {
  moe_tiles_block<THREADS>(counts, offsets, E, tiles, n_tiles, tile, held0, held1);
}

// Step 2 of moe() in one launch for fewer than THREADS assignments (MoeShape::fused_routing), instead of the radix
// sort, histogram, scan, tile and row kernels: counts by shared-memory atomics, offsets by a block scan, each
// assignment's row = its expert's offset + the number of earlier assignments to that expert (the stable sort's
// order), then the rows as moe_rows_kernel and the tiles as moe_tiles_kernel write them. Dynamic shared memory:
// (P + 2E) ints. An expert id outside [0, E) (NaN routing) is clamped: no access outside the arrays.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) moe_route_small_kernel(const int* __restrict__ sel,
                                                                  const float* __restrict__ wts, int P, int k, int E,
                                                                  int* __restrict__ counts, int* __restrict__ offsets,
                                                                  RowTile* __restrict__ tiles, int* __restrict__ n_tiles,
                                                                  int tile, int held0, int held1,
                                                                  int* __restrict__ row_src, float* __restrict__ row_w,
                                                                  int* __restrict__ pos_of) {
  extern __shared__ int moe_small_smem[];
  int *ssel = moe_small_smem, *scnt = ssel + P, *soff = scnt + E;
  for (int e = threadIdx.x; e < E; e += THREADS) scnt[e] = 0;
  for (int a = threadIdx.x; a < P; a += THREADS) ssel[a] = min(max(sel[a], 0), E - 1);
  __syncthreads();
  for (int a = threadIdx.x; a < P; a += THREADS) atomicAdd(&scnt[ssel[a]], 1);
  __syncthreads();
  {
    using Scan = cub::BlockScan<int, THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    const int per = (E + THREADS - 1) / THREADS, e0 = int(threadIdx.x) * per, e1 = min(E, e0 + per);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += scnt[e];
    int start;
    Scan(tmp).ExclusiveSum(local, start);
    for (int e = e0; e < e1; ++e) {
      soff[e] = start;
      start += scnt[e];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += THREADS) {
    counts[e] = scnt[e];
    offsets[e] = soff[e];
  }
  for (int a = threadIdx.x; a < P; a += THREADS) {
    const int e = ssel[a];
    int rank = 0;
    for (int b = 0; b < a; ++b) rank += ssel[b] == e;
    const int p = soff[e] + rank;
    row_src[p] = a / k;
    row_w[p] = wts[a];
    pos_of[a] = p;
  }
  moe_tiles_block<THREADS>(scnt, soff, E, tiles, n_tiles, tile, held0, held1);
}
constexpr int kMoeSmallThreads = 512;
inline size_t moe_route_small_smem(const MoeShape& s) { return (size_t(s.T) * s.k + 2 * size_t(s.E)) * sizeof(int); }
inline bool moe_route_small_fits(const MoeShape& s) {
  return s.fused_routing && int64_t(s.T) * s.k < kMoeSmallThreads && moe_route_small_smem(s) <= 48 * 1024;
}

template <int = 0>
__global__ void moe_rows_kernel(const int* __restrict__ vals_sorted, const float* __restrict__ wts, int P, int k,
                                int* __restrict__ row_src, float* __restrict__ row_w, int* __restrict__ pos_of) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= P) return;
  const int a = vals_sorted[p];
  row_src[p] = a / k;
  row_w[p] = wts[a];
  pos_of[a] = p;
}

// out[t] = bf16((Σ over t's experts in ascending id of ys) + sh[t]). k ≤ 8: sorted in registers; more: each
// step takes the smallest expert id above the last (a token's experts are distinct).
template <int = 0>
__global__ void moe_combine_kernel(const int* __restrict__ sel, const int* __restrict__ pos_of,
                                   const bf16_t* __restrict__ ys, const bf16_t* __restrict__ sh, int k, int d,
                                   bf16_t* __restrict__ out) {
  const int tok = blockIdx.y;
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 2;
  if (i >= d) return;
  float a0 = 0.f, a1 = 0.f;
  auto add = [&](int pos) {
    const __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(ys + int64_t(pos) * d + i);
    a0 = __fadd_rn(a0, __low2float(v));
    a1 = __fadd_rn(a1, __high2float(v));
  };
  if (k <= 8) {
    int e[8], pos[8];
    for (int r = 0; r < k; ++r) { e[r] = sel[tok * k + r]; pos[r] = pos_of[tok * k + r]; }
    for (int r = 1; r < k; ++r)  // insertion sort by expert id
      for (int q = r; q > 0 && e[q - 1] > e[q]; --q) {
        const int te = e[q]; e[q] = e[q - 1]; e[q - 1] = te;
        const int tp = pos[q]; pos[q] = pos[q - 1]; pos[q - 1] = tp;
      }
    for (int r = 0; r < k; ++r) add(pos[r]);
  } else {
    int last = -1;
    for (int r = 0; r < k; ++r) {
      int best = 0x7fffffff, bp = 0;
      for (int q = 0; q < k; ++q) {
        const int e = sel[tok * k + q];
        if (e > last && e < best) { best = e; bp = pos_of[tok * k + q]; }
      }
      add(bp);
      last = best;
    }
  }
  const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(sh + int64_t(tok) * d + i);
  *reinterpret_cast<uint32_t*>(out + int64_t(tok) * d + i) =
      pack_bf16x2(__fadd_rn(a0, __low2float(s)), __fadd_rn(a1, __high2float(s)));
}

}  // namespace detail

// Bytes of the workspace moe() needs for this shape.
inline size_t moe_workspace_bytes(const MoeShape& s) { return detail::moe_layout(s, nullptr, nullptr); }

// out [T, d] = MoE(x [T, d]); x rows contiguous. Writes sel/weights into the workspace (MoeWork views
// available through moe_work()).
inline MoeWork moe_work(const MoeShape& s, void* workspace) {
  MoeWork w{};
  detail::moe_layout(s, static_cast<uint8_t*>(workspace), &w);
  return w;
}

// The shared expert on a second stream beside the routing and the routed experts (the same kernels, the same bits):
// side waits for `fork` (recorded after x's quantization) and records `join`, which the combine waits for. Capturable
// in a CUDA graph (a fork and a join per layer). Not with a communicator.
struct MoeOverlap {
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};

// A second stream and its fork / join events (MoeOverlap), for moe(): created on the host, never during a capture.
class SideStream {
 public:
  SideStream() = default;
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  ~SideStream() {
    if (ov_.fork) cudaEventDestroy(ov_.fork);
    if (ov_.join) cudaEventDestroy(ov_.join);
    if (ov_.side) cudaStreamDestroy(ov_.side);  // released once its work is done
  }
  Status create() {
    DSV41_CUDA_TRY(cudaStreamCreateWithFlags(&ov_.side, cudaStreamNonBlocking), "side stream");
    DSV41_CUDA_TRY(cudaEventCreateWithFlags(&ov_.fork, cudaEventDisableTiming), "side stream event");
    DSV41_CUDA_TRY(cudaEventCreateWithFlags(&ov_.join, cudaEventDisableTiming), "side stream event");
    return Status::Ok();
  }
  const MoeOverlap* overlap() const { return &ov_; }

 private:
  MoeOverlap ov_;
};

// comm: expert parallel (s.e_begin, s.e_end the rank's experts); null: one rank holding every expert.
// overlap: the shared expert on its second stream (MoeOverlap), or null.
inline Status moe(const MoeShape& s, const MoeWeights& W, const bf16_t* x, bf16_t* out, void* workspace,
                  size_t workspace_bytes, cudaStream_t stream, parallel::Communicator* comm = nullptr,
                  const MoeOverlap* overlap = nullptr) {
  if (s.T < 0 || s.E <= 0 || s.k <= 0 || s.k > s.E || s.d <= 0 || s.I <= 0 || s.d % 32 || s.I % 32)
    return bad_arg("moe: bad shape (d, I multiples of 32; 1 <= k <= E)");
  if (s.w13_split < 0 || s.w13_split > 8) return bad_arg("moe: w13_split outside 0..8");
  const int held0 = s.e_begin, held1 = s.e_end < 0 ? s.E : s.e_end;
  if (held0 < 0 || held1 > s.E || held0 > held1 || (!comm && (held0 != 0 || held1 != s.E)))
    return bad_arg("moe: a share of the experts needs a communicator");
  if (s.T == 0) return Status::Ok();
  if (workspace_bytes < moe_workspace_bytes(s)) return bad_arg("moe: workspace too small");
  MoeWork w = moe_work(s, workspace);
  const int T = s.T, P = s.T * s.k;
  // 1. quantize x, gate logits in FP32, routing.
  DSV41_TRY(act_quant_fp8(x, s.d, T, s.d, w.xc, w.xe, nullptr, stream));
  if (w.xb) DSV41_TRY(act_bf16_perm(w.xc, w.xe, T, s.d, w.xb, stream));
  // Gate logits in FP32 on the CUDA cores (exact products, FP32 sums): the BF16 tensor-core GEMM's
  // truncated accumulation moved logits by up to 3.4e-4 relative, enough to flip near-tied routing.
  const bool vec = s.d % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W.gate) % 16 == 0;
  if (vec)  // 128-thread blocks: more SMs at decode
    detail::gate_vec_kernel<<<unsigned(ceil_div64(int64_t(T) * s.E * 32, 128)), 128, 0, stream>>>(x, W.gate, T, s.E,
                                                                                                 s.d, w.logits);
  else
    detail::gate_simple_kernel<<<unsigned(ceil_div64(int64_t(T) * s.E * 32, 256)), 256, 0, stream>>>(x, W.gate, T,
                                                                                                    s.E, s.d, w.logits);
  DSV41_TRY(launch_status("moe gate"));
  // 4. shared expert (no routing weight): here on the side stream when overlapped, else after the routed experts.
  auto shared_expert = [&](cudaStream_t st) -> Status {
    SkinnyParams q1;
    q1.w1 = W.s1; q1.w3 = W.s3; q1.N = s.I; q1.K = s.d; q1.xc = w.xc; q1.xe = w.xe; q1.M = T;
    if (s.kernel == SkinnyKernel::wgmma_bf16) q1.xb = w.xb;
    q1.y = w.hs;
    q1.ldy = s.I; q1.limit = s.limit;
    const int ks = detail::skinny_ksplit(T, s.I, s.d);  // split-K at decode, SwiGLU applied after the reduce
    if (ks > 1 && w.gemm_ws_bytes >= 2 * size_t(ks) * T * s.I * sizeof(float)) {
      q1.ksplit = ks;
      q1.partial = w.gemm_ws;
    }
    DSV41_TRY((gemm_skinny_or_staged<WFmt::FP8, true>(q1, 0, T, s.kernel, 65, st)));
    if (q1.ksplit > 1) DSV41_TRY(swiglu_splitk_reduce(q1, st));
    DSV41_TRY(act_quant_fp8(w.hs, s.I, T, s.I, w.hsc, w.hse, nullptr, st));
    return gemm_fp8(w.hsc, w.hse, T, W.s2.w, W.s2.s, s.d, s.I, w.sh, s.d, w.gemm_ws, w.gemm_ws_bytes, st);
  };
  const bool side = overlap && overlap->side && overlap->fork && overlap->join && !comm;
  if (side) {  // the routed path below does not touch the shared expert's buffers (hs, hsc, hse, sh, gemm_ws)
    DSV41_CUDA_TRY(cudaEventRecord(overlap->fork, stream), "moe fork");
    DSV41_CUDA_TRY(cudaStreamWaitEvent(overlap->side, overlap->fork, 0), "moe fork");
    const Status ss = shared_expert(overlap->side);
    DSV41_CUDA_TRY(cudaEventRecord(overlap->join, overlap->side), "moe join");
    if (!ss.ok()) {
      DSV41_CUDA_TRY(cudaStreamWaitEvent(stream, overlap->join, 0), "moe join");
      return ss;
    }
  }
  // 2.-3. on the main stream; with the side stream the join below is enqueued even when they fail, so the workspace
  // is not released under the shared expert.
  const Status routed_status = [&]() -> Status {
    if (detail::moe_route_fast(s))
      detail::route_kernel<<<ceil_div(T, 4), 128, 0, stream>>>(w.logits, W.bias, T, s.E, s.k, s.norm_topk,
                                                                s.route_scale, w.sel, w.wts, w.keys, w.vals, W.bias_vl,
                                                                W.tokens, W.image_token_id);
    else
      detail::route_any_kernel<<<ceil_div(T, 4), 128, 0, stream>>>(w.logits, W.bias, T, s.E, s.k, s.norm_topk,
                                                                    s.route_scale, w.sel, w.wts, w.keys, w.vals,
                                                                    W.bias_vl, W.tokens, W.image_token_id, w.route_b);
    DSV41_TRY(launch_status("moe route"));
    // 2. sort assignments by expert (stable), counts and offsets, tiles.
    const int tile = detail::moe_tile_rows(s);
    if (detail::moe_route_small_fits(s)) {
      detail::moe_route_small_kernel<detail::kMoeSmallThreads>
          <<<1, detail::kMoeSmallThreads, detail::moe_route_small_smem(s), stream>>>(
              w.sel, w.wts, P, s.k, s.E, w.counts, w.offsets, w.tiles, w.n_tiles, tile, held0, held1, w.row_src, w.row_w,
              w.pos_of);
      DSV41_TRY(launch_status("moe route small"));
    } else {
      size_t bytes = w.cub_sort_bytes;
      DSV41_CUDA_TRY(cub::DeviceRadixSort::SortPairs(w.cub_tmp, bytes, w.keys, w.keys_sorted, w.vals, w.vals_sorted, P, 0,
                                                     detail::bits_for(s.E), stream),
                     "moe sort");
      bytes = w.cub_hist_bytes;
      DSV41_CUDA_TRY(cub::DeviceHistogram::HistogramEven(w.cub_tmp, bytes, w.keys_sorted, w.counts, s.E + 1, 0u,
                                                         uint32_t(s.E), P, stream),
                     "moe histogram");
      bytes = w.cub_scan_bytes;
      DSV41_CUDA_TRY(cub::DeviceScan::ExclusiveSum(w.cub_tmp, bytes, w.counts, w.offsets, s.E, stream), "moe scan");
      detail::moe_tiles_kernel<256><<<1, 256, 0, stream>>>(w.counts, w.offsets, s.E, w.tiles, w.n_tiles, tile, held0,
                                                           held1);
      DSV41_TRY(launch_status("moe tiles"));
      detail::moe_rows_kernel<<<ceil_div(P, 256), 256, 0, stream>>>(w.vals_sorted, w.wts, P, s.k, w.row_src, w.row_w,
                                                                     w.pos_of);
      DSV41_TRY(launch_status("moe rows"));
    }
    // 3. routed experts: h = SwiGLU(w1, w3) with routing weight, then ys = w2(act_quant(h)).
    SkinnyParams p1;
    p1.w1 = W.w1; p1.w3 = W.w3; p1.N = s.I; p1.K = s.d; p1.xc = w.xc; p1.xe = w.xe; p1.xb = w.xb;
    p1.row_src = w.row_src; p1.row_weight = w.row_w; p1.tiles = w.tiles; p1.n_tiles = w.n_tiles;
    p1.M = P; p1.y = w.h; p1.ldy = s.I; p1.limit = s.limit;
    const int max_rows = tile;
    SkinnyParams p2;
    p2.w1 = W.w2; p2.N = s.d; p2.K = s.I; p2.xc = w.hc; p2.xe = w.he; p2.xb = w.hb; p2.tiles = w.tiles; p2.n_tiles = w.n_tiles;
    p2.M = P; p2.y = w.ys; p2.ldy = s.d;
    const int min_rows = s.kernel == SkinnyKernel::automatic ? detail::kMoeStagedRows : 0;
    const SkinnyKernel routed = detail::moe_bf16_routed(s) ? SkinnyKernel::wgmma_bf16 : s.kernel;
    SkinnyKernel routed1 = routed;
    if (s.w13_split > 0 && !detail::moe_bf16_routed(s)) {  // MoeShape::w13_split
      SkinnyParams q = p1;
      q.ksplit = std::max(1, s.w13_split);
      q.partial = w.part13;
      if (gemm_wgbf16_fits(q)) {
        p1 = q;
        routed1 = SkinnyKernel::wgmma_bf16;
      }
    }
    DSV41_TRY((gemm_skinny_or_staged<WFmt::FP4, true>(p1, w.max_tiles, max_rows, routed1, min_rows, stream)));
    if (p1.ksplit > 1) DSV41_TRY(swiglu_splitk_reduce(p1, stream));
    DSV41_TRY(act_quant_fp8(w.h, s.I, P, s.I, w.hc, w.he, nullptr, stream));
    if (w.hb) DSV41_TRY(act_bf16_perm(w.hc, w.he, P, s.I, w.hb, stream));
    if (comm) DSV41_CUDA_TRY(cudaMemsetAsync(w.ys, 0, size_t(P) * s.d * sizeof(bf16_t), stream), "moe rows");
    const SkinnyKernel routed2 = s.w2_bf16 ? SkinnyKernel::wgmma_bf16 : routed;
    DSV41_TRY((gemm_skinny_or_staged<WFmt::FP4, false>(p2, w.max_tiles, max_rows, routed2, min_rows, stream)));
    if (comm) DSV41_TRY(comm->all_reduce_sum(w.ys, size_t(P) * s.d, parallel::Elem::bf16, stream));
    return Status::Ok();
  }();
  if (side) DSV41_CUDA_TRY(cudaStreamWaitEvent(stream, overlap->join, 0), "moe join");
  DSV41_TRY(routed_status);
  if (!side) DSV41_TRY(shared_expert(stream));
  // 5. combine.
  dim3 grid(ceil_div(s.d / 2, 256), T);
  detail::moe_combine_kernel<<<grid, 256, 0, stream>>>(w.sel, w.pos_of, w.ys, w.sh, s.k, s.d, out);
  return launch_status("moe combine");
}

}  // namespace dsv41::gpu
