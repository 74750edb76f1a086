// Glue kernels of CSA2 attention on the GPU (SPEC §4.2–4.5): RoPE at strided positions, packing of the cache
// entries (SPEC §6), ring stores, the window / draft / compressed entry lists, shape-generic sparse attention, the
// indexer's weights, generic scores and candidate blocks, the compressor's pooling; the generic launchers.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/attention.cuh>
#include <dsv41/backend/cuda/kernels/glue_common.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/backend/cuda/kernels/std_select.hpp>

namespace dsv41::gpu {

namespace glue {

// One RoPE pair rotated by angle ang (the reference's rounding: FP32 products, cos/sin in double).
__device__ __forceinline__ void rope_pair(bf16_t* t, float ang) {
  const float c = float(cos(double(ang))), s = float(sin(double(ang)));
  const float a = bf2f(t[0]), b = bf2f(t[1]);
  t[0] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
  t[1] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}

// ---- rope at positions p0 + row·pstride (compressed entries: g·r) ----
template <int = 0>
__global__ void rope_strided_kernel(bf16_t* __restrict__ x, int rows, int heads, int dh, int rd,
                                    const float* __restrict__ freqs, int64_t p0, int64_t pstride) {
  const int pairs = rd / 2;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * heads * pairs) return;
  const int i = int(id % pairs);
  const int64_t rh = id / pairs;
  const int64_t row = rh / heads;
  rope_pair(x + rh * dh + (dh - rd) + 2 * i, __fmul_rn(float(p0 + row * pstride), freqs[i]));
}

// Compressed entries of a decode batch (one row per sequence): row t's entry sits at first[t], position first[t]·r.
// Rows with done[t] == 0 made no entry this step (done null: every row did).
template <int = 0>
__global__ void rope_entries_rows_kernel(bf16_t* __restrict__ x, int rows, int dh, int rd, const float* __restrict__ freqs,
                                         const int64_t* __restrict__ first, int r, const int* __restrict__ done) {
  const int pairs = rd / 2;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * pairs) return;
  const int i = int(id % pairs), t = int(id / pairs);
  if (done && !done[t]) return;
  rope_pair(x + int64_t(t) * dh + (dh - rd) + 2 * i, __fmul_rn(float(first[t] * r), freqs[i]));
}

// ---- packed cache entries (SPEC §6), one thread per scale block, with the numeric/quant.hpp functions ----

// Entry index of row t: wrap ? (p0 + t) mod W : off + t. Rows t < t0 are skipped.
__device__ __forceinline__ int64_t entry_of(int t, int64_t off, int64_t p0, int W, bool wrap) {
  return wrap ? (p0 + t) % W : off + t;
}

template <int = 0>
__global__ void pack_window_kernel(const bf16_t* __restrict__ x, int64_t ldx, int t0, int rows, int D,
                                   uint8_t* __restrict__ pool, int64_t off, int64_t p0, int W, bool wrap) {
  const int nb = D / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows - t0) * nb) return;
  const int t = t0 + int(id / nb), b = int(id % nb);
  uint8_t* e = pool + entry_of(t, off, p0, W, wrap) * num::window_entry_size(D);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * ldx + b * 32 + i]);
  num::fp8_quant_block32(v, 32, e + b * 32, e + D + b);
}

// Decode rows of several sequences: row t's entry goes to slot pos[t] mod W of rings[t].
template <int = 0>
__global__ void pack_window_rows_kernel(const bf16_t* __restrict__ x, int rows, int D, uint8_t* const* __restrict__ rings,
                                        const int64_t* __restrict__ pos, int W) {
  const int nb = D / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = rings[t] + (pos[t] % W) * num::window_entry_size(D);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * D + b * 32 + i]);
  num::fp8_quant_block32(v, 32, e + b * 32, e + D + b);
}

// Main KV entry (E2M1 + E4M3 scale per 16) of rows [0, rows) into entries first + t.
template <int = 0>
__global__ void pack_main_kernel(const bf16_t* __restrict__ x, int rows, int D, uint8_t* __restrict__ pool,
                                 int64_t first) {
  const int nb = D / 16;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = pool + (first + t) * num::main_entry_size(D);
  float v[16];
  for (int i = 0; i < 16; ++i) v[i] = bf2f(x[int64_t(t) * D + b * 16 + i]);
  num::pack_main_block(v, D, b, e);
}

// Main KV entries of a decode batch: row t's into entry first[t] of pools[t], where done[t] (null: every row).
template <int = 0>
__global__ void pack_main_rows_kernel(const bf16_t* __restrict__ x, int rows, int D, uint8_t* const* __restrict__ pools,
                                      const int64_t* __restrict__ first, const int* __restrict__ done) {
  const int nb = D / 16;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  if (done && !done[t]) return;
  uint8_t* e = pools[t] + first[t] * num::main_entry_size(D);
  float v[16];
  for (int i = 0; i < 16; ++i) v[i] = bf2f(x[int64_t(t) * D + b * 16 + i]);
  num::pack_main_block(v, D, b, e);
}

// Index key (E2M1 + UE8M0 per 32) of rows [0, rows) into entries first + t.
template <int = 0>
__global__ void pack_index_kernel(const bf16_t* __restrict__ x, int rows, int dI, uint8_t* __restrict__ pool,
                                  int64_t first) {
  const int nb = dI / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  uint8_t* e = pool + (first + t) * num::index_entry_size(dI);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * dI + b * 32 + i]);
  num::pack_index_block(v, dI, b, e);
}

// Index keys of a decode batch: row t's into entry first[t] of pools[t], where done[t] (null: every row).
template <int = 0>
__global__ void pack_index_rows_kernel(const bf16_t* __restrict__ x, int rows, int dI, uint8_t* const* __restrict__ pools,
                                       const int64_t* __restrict__ first, const int* __restrict__ done) {
  const int nb = dI / 32;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * nb) return;
  const int t = int(id / nb), b = int(id % nb);
  if (done && !done[t]) return;
  uint8_t* e = pools[t] + first[t] * num::index_entry_size(dI);
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = bf2f(x[int64_t(t) * dI + b * 32 + i]);
  num::pack_index_block(v, dI, b, e);
}

// ring[(p0 + t) mod W] = pool[off + t] for t in [t0, rows).
template <int = 0>
__global__ void ring_store_kernel(const uint8_t* __restrict__ pool, int64_t off, int t0, int rows, int we,
                                  uint8_t* __restrict__ ring, int64_t p0, int W) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows - t0) * we) return;
  const int t = t0 + int(id / we), b = int(id % we);
  ring[((p0 + t) % W) * we + b] = pool[(off + t) * we + b];
}

// ---- attention lists ----

// Window entries of row t (position p = pos ? pos[t] : p0 + t): positions max(0, p − W + 1, floor)..p. In the ring (slot
// pos mod W) for positions before the chunk, or when decode (the new entry already stored in the ring);
// else entry W + (pos − p0) of the scratch pool. idx [S, W], −1 padded.
template <int = 0>
__global__ void window_idx_kernel(int S, int64_t p0, const int64_t* __restrict__ pos, int W, int64_t floor_pos,
                                  bool in_ring, int* __restrict__ idx) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * W) return;
  const int t = int(id / W), j = int(id % W);
  const int64_t p = pos ? pos[t] : p0 + t;
  int64_t lo = p - W + 1;
  if (lo < 0) lo = 0;
  if (lo < floor_pos) lo = floor_pos;
  const int64_t wp = lo + j;
  int v = -1;
  if (wp <= p) v = (in_ring || wp < p0) ? int(wp % W) : int(W + (wp - p0));
  idx[id] = v;
}

// DSpark block rows: every row attends ring positions lo..p (slots) then all B block rows (W + i).
template <int = 0>
__global__ void draft_idx_kernel(int B, int64_t p, int W, int* __restrict__ idx) {
  const int n = W + B;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(B) * n) return;
  const int j = int(id % n);
  const int64_t lo = p - W + 1 > 0 ? p - W + 1 : 0;
  const int cnt = int(p - lo + 1);
  int v = -1;
  if (j < cnt) v = int((lo + j) % W);
  else if (j - cnt < B) v = W + (j - cnt);
  idx[id] = v;
}

// comp[t, k] = lists[t, k] when it is a listed, existing and visible entry (j < floor((p+1)/ratio)), else −1.
// Per row when pos / nent are set: p = pos[t], entries nent[t] (rows of several sequences).
template <int = 0>
__global__ void comp_idx_kernel(const int32_t* __restrict__ lists, int S, int K, int64_t p0, const int64_t* __restrict__ pos,
                                int ratio, int64_t n_entries, const int64_t* __restrict__ nent, int* __restrict__ comp) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * K) return;
  const int t = int(id / K);
  const int32_t j = lists[id];
  const int64_t p = pos ? pos[t] : p0 + t, ne = nent ? nent[t] : n_entries;
  const bool ok = j >= 0 && j < ne && j < (p + 1) / ratio;
  comp[id] = ok ? j : -1;
}

// Rows of several sequences: vis[t] = min(floor((pos[t] + 1)/r), n_rows[t])
template <int = 0>
__global__ void fill_vis_rows_kernel(int S, const int64_t* __restrict__ pos, int r, const int* __restrict__ n_rows,
                                     int* __restrict__ vis) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int64_t v = (pos[t] + 1) / r;
  vis[t] = int(v < n_rows[t] ? v : n_rows[t]);
}

// vis[t] = min(floor((p0 + t + 1)/r), n)
template <int = 0>
__global__ void fill_vis_kernel(int S, int64_t p0, int r, int64_t n, int* __restrict__ vis) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int64_t v = (p0 + t + 1) / r;
  vis[t] = int(v < n ? v : n);
}

// ---- sparse attention with sink, shape-generic (one CTA per (head, row)) ----
template <int = 0>
__global__ void __launch_bounds__(128) sparse_attn_generic_kernel(const SparseAttnParams p) {
  extern __shared__ float sm[];
  __shared__ float red[32];
  __shared__ int n_ent;
  const int h = blockIdx.x, row = blockIdx.y, D = p.D;
  const int tot = p.n_win + p.n_comp;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  float* qs = sm;              // [D]
  float* sc = qs + D;          // [tot]
  int* list = reinterpret_cast<int*>(sc + tot);  // [tot]
  const bf16_t* qh = p.q + (int64_t(row) * p.H + h) * D;
  for (int i = threadIdx.x; i < D; i += blockDim.x) qs[i] = bf2f(qh[i]);
  if (threadIdx.x == 0) {
    int n = 0;
    for (int j = 0; j < tot; ++j) {
      int v;
      if (j < p.n_win) v = p.win_idx[int64_t(row) * p.n_win + j];
      else {
        const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
        v = c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
      }
      if (v != -1) list[n++] = v;
    }
    n_ent = n;
  }
  __syncthreads();
  const int n = n_ent;
  bf16_t* oh = p.out + (int64_t(row) * p.H + h) * D;
  if (n == 0) {
    for (int i = threadIdx.x; i < D; i += blockDim.x) oh[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int went = D + D / 32, ment = D / 2 + D / 16;
  auto value = [&](int v, int i) -> float {
    if (v >= 0) {
      const uint8_t* e = win_pool + int64_t(v) * went;
      return num::e4m3_to_f32(e[i]) * num::ue8m0_to_f32(e[D + i / 32]);
    }
    const uint8_t* e = comp_pool + int64_t(v & 0x7fffffff) * ment;
    const uint8_t byte = e[i / 2];
    return num::e2m1_to_f32((i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF)) * num::e4m3_to_f32(e[D / 2 + i / 16]);
  };
  // scores: one warp per entry
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int j = warp; j < n; j += nw) {
    float a = 0.f;
    for (int i = lane; i < D; i += 32) a = fmaf(qs[i], value(list[j], i), a);
    a = warp_sum(a);
    if (lane == 0) sc[j] = a * p.scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sc[j]);
  m = warp_max(m);
  __syncthreads();
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < nw; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  float den = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(sc[j] - m);
    den += e;
    sc[j] = e;  // each thread rewrites only its own entries
  }
  den = block_sum(den, red);
  den += expf(p.sink[h] - m);
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float a = 0.f;
    for (int j = 0; j < n; ++j) a = fmaf(bf16r(sc[j]), value(list[j], i), a);
    oh[i] = __float2bfloat16_rn(__fdiv_rn(a, den));
  }
}

// The same for any number of entries: scores are not kept, but computed twice (pass 1: the max; pass 2, in
// chunks of kStreamChunk list slots: the numerators, summed into per-dimension accumulators in the order of
// the entry list, as sparse_attn_generic_kernel does). Any D: blockIdx.z takes output dimensions
// [z·kStreamDims, (z+1)·kStreamDims), each such CTA computing the scores again.
constexpr int kStreamChunk = 256, kStreamDims = 2048;
template <int = 0>
__global__ void __launch_bounds__(128) sparse_attn_stream_kernel(const SparseAttnParams p) {
  __shared__ float acc[kStreamDims];
  __shared__ float red[32];
  __shared__ float sc[kStreamChunk];
  __shared__ int list[kStreamChunk];
  __shared__ int n_chunk, n_all;
  const int h = blockIdx.x, row = blockIdx.y, D = p.D;
  const int tot = p.n_win + p.n_comp;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  const int i0 = blockIdx.z * kStreamDims, i1 = min(D, i0 + kStreamDims);
  const bf16_t* qh = p.q + (int64_t(row) * p.H + h) * D;
  for (int i = threadIdx.x; i < kStreamDims; i += blockDim.x) acc[i] = 0.f;
  if (threadIdx.x == 0) n_all = 0;
  const int went = D + D / 32, ment = D / 2 + D / 16;
  auto value = [&](int v, int i) -> float {
    if (v >= 0) {
      const uint8_t* e = win_pool + int64_t(v) * went;
      return num::e4m3_to_f32(e[i]) * num::ue8m0_to_f32(e[D + i / 32]);
    }
    const uint8_t* e = comp_pool + int64_t(v & 0x7fffffff) * ment;
    const uint8_t byte = e[i / 2];
    return num::e2m1_to_f32((i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF)) * num::e4m3_to_f32(e[D / 2 + i / 16]);
  };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  // The listed entries of slots [c0, c0 + kStreamChunk), in slot order, and their scores.
  auto chunk = [&](int c0) {
    __syncthreads();
    if (threadIdx.x == 0) {
      int n = 0;
      for (int j = c0; j < tot && j < c0 + kStreamChunk; ++j) {
        int v;
        if (j < p.n_win) v = p.win_idx[int64_t(row) * p.n_win + j];
        else {
          const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
          v = c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
        }
        if (v != -1) list[n++] = v;
      }
      n_chunk = n;
      n_all += n;
    }
    __syncthreads();
    for (int j = warp; j < n_chunk; j += nw) {
      float a = 0.f;
      for (int i = lane; i < D; i += 32) a = fmaf(bf2f(qh[i]), value(list[j], i), a);
      a = warp_sum(a);
      if (lane == 0) sc[j] = a * p.scale;
    }
    __syncthreads();
    return n_chunk;
  };
  float m = -INFINITY;
  for (int c0 = 0; c0 < tot; c0 += kStreamChunk) {
    const int n = chunk(c0);
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, sc[j]);
  }
  m = warp_max(m);
  __syncthreads();
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = -INFINITY;
  for (int w = 0; w < nw; ++w) m = fmaxf(m, red[w]);
  bf16_t* oh = p.out + (int64_t(row) * p.H + h) * D;
  if (n_all == 0) {
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) oh[i] = __float2bfloat16_rn(0.f);
    return;
  }
  float den = 0.f;
  for (int c0 = 0; c0 < tot; c0 += kStreamChunk) {
    const int n = chunk(c0);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const float e = expf(sc[j] - m);
      den += e;
      sc[j] = e;
    }
    __syncthreads();
    for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
      float a = acc[i - i0];
      for (int j = 0; j < n; ++j) a = fmaf(bf16r(sc[j]), value(list[j], i), a);
      acc[i - i0] = a;
    }
  }
  den = block_sum(den, red);
  den += expf(p.sink[h] - m);
  for (int i = i0 + threadIdx.x; i < i1; i += blockDim.x) oh[i] = __float2bfloat16_rn(__fdiv_rn(acc[i - i0], den));
}

// ---- indexer ----

// w[t, h] = bf16(bf16(x·Wproj)[t, h] · wscale), as FP32 for the score kernels.
template <int = 0>
__global__ void index_weights_kernel(const bf16_t* __restrict__ wb, int n, float wscale, float* __restrict__ wf) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) wf[i] = bf16r(__fmul_rn(bf2f(wb[i]), wscale));
}

// Scores for any nI, dI: one warp per (row, key); heads summed in order h = 0..nI−1 (separate mul, add).
template <int = 0>
__global__ void index_scores_generic_kernel(const IndexScoreParams p) {
  const int64_t wid = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (wid >= int64_t(p.R) * p.n) return;
  const int row = int(wid / p.n), key = int(wid % p.n);
  float* out = p.scores + int64_t(row) * p.n;
  if (key >= p.vis[row]) {
    if (lane == 0) out[key] = -INFINITY;
    return;
  }
  const int dI = p.dI, ent = dI / 2 + dI / 32;
  const uint8_t* kp = (p.keys_rows ? p.keys_rows[row] : p.keys) + int64_t(key) * ent;
  float acc = 0.f;
  for (int h = 0; h < p.nI; ++h) {
    const uint8_t* qp = p.q + (int64_t(row) * p.nI + h) * (dI / 2);
    const uint8_t* qe = p.qe + (int64_t(row) * p.nI + h) * (dI / 32);
    float a = 0.f;
    for (int i = lane; i < dI; i += 32) {
      const float qv = num::e2m1_to_f32(num::nibble_at(qp, i)) * ue8m0_f(qe[i / 32]);
      const float kv = num::e2m1_to_f32(num::nibble_at(kp, i)) * ue8m0_f(kp[dI / 2 + i / 32]);
      a = fmaf(qv, kv, a);
    }
    a = warp_sum(a);
    acc = __fadd_rn(acc, __fmul_rn(p.w[int64_t(row) * p.nI + h], fmaxf(a, 0.f)));
  }
  if (lane == 0) out[key] = acc;
}

// §4.5 candidate blocks of each row (cpu::candidate_mask over the row's visible entries), one thread per
// row with libstdc++'s selection (std_select.hpp). sel [S, nbmax]: 1 where the block is a candidate.
template <int = 0>
__global__ void candidate_kernel(const float* __restrict__ scores, int n, const int* __restrict__ vis, int S,
                                 int topk_blocks, int blk, stdsel::Pair* __restrict__ work, int nbmax,
                                 uint8_t* __restrict__ sel) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= S) return;
  const int nv = vis[t];
  const float* s = scores + int64_t(t) * n;
  stdsel::Pair* q = work + int64_t(t) * nbmax;
  uint8_t* o = sel + int64_t(t) * nbmax;
  for (int b = 0; b < nbmax; ++b) o[b] = 0;
  if (nv <= 0) return;
  const int nb = (nv + blk - 1) / blk;
  for (int b = 0; b < nb; ++b) {
    float m = -INFINITY;
    const int e = (b + 1) * blk < nv ? (b + 1) * blk : nv;
    for (int j = b * blk; j < e; ++j) m = (m < s[j]) ? s[j] : m;  // std::max(m, s[j])
    q[b] = {m, b};
  }
  q[(nv - 1) / blk].first = INFINITY;
  const int k = stdsel::select_blocks(q, nb, topk_blocks);
  for (int i = 0; i < k; ++i)
    if (q[i].first > -INFINITY) o[q[i].second] = 1;
}

// Reindex layers above the candidate source: scores outside the mask (or past its row's length) → −inf.
// Float → unsigned key with the same order (−inf lowest, +inf highest; no NaN here).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// candidate_kernel's choice, one CTA per row: the k-th largest block score by a 4-pass radix select; when
// the scores tied with it all fit (or it is −inf, whose blocks are dropped anyway) the chosen set is exact
// without knowing libstdc++'s order, else one thread runs the serial introselect (stdsel) on the row.
template <int THREADS>
__global__ void __launch_bounds__(THREADS) candidate_fast_kernel(const float* __restrict__ scores, int n,
                                                                 const int* __restrict__ vis, int topk_blocks, int blk,
                                                                 stdsel::Pair* __restrict__ work, int nbmax,
                                                                 uint8_t* __restrict__ sel) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sh_prefix;
  __shared__ int sh_k, sh_gt, sh_eq;
  const int t = blockIdx.x, tid = threadIdx.x;
  const int nv = vis[t];
  const float* s = scores + int64_t(t) * n;
  stdsel::Pair* q = work + int64_t(t) * nbmax;
  uint8_t* o = sel + int64_t(t) * nbmax;
  for (int b = tid; b < nbmax; b += THREADS) o[b] = 0;
  if (nv <= 0) return;
  const int nb = (nv + blk - 1) / blk;
  for (int b = tid; b < nb; b += THREADS) {
    float m = -INFINITY;
    const int e = (b + 1) * blk < nv ? (b + 1) * blk : nv;
    for (int j = b * blk; j < e; ++j) m = (m < s[j]) ? s[j] : m;  // std::max(m, s[j])
    q[b] = {b == (nv - 1) / blk ? INFINITY : m, b};
  }
  const int k = topk_blocks < nb ? topk_blocks : nb;
  if (k <= 0) return;
  __syncthreads();
  uint32_t prefix = 0, mask = 0;
  int krem = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += THREADS) hist[i] = 0;
    __syncthreads();
    for (int b = tid; b < nb; b += THREADS) {
      const uint32_t key = order_key(q[b].first);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      int acc = 0, dg = 255;
      for (; dg > 0; --dg) {
        if (acc + int(hist[dg]) >= krem) break;
        acc += int(hist[dg]);
      }
      sh_prefix = prefix | (uint32_t(dg) << shift);
      sh_k = krem - acc;
      sh_gt = 0;
      sh_eq = 0;
    }
    __syncthreads();
    prefix = sh_prefix;
    krem = sh_k;
    mask |= 255u << shift;
    __syncthreads();
  }
  int gt = 0, eq = 0;
  for (int b = tid; b < nb; b += THREADS) {
    const uint32_t key = order_key(q[b].first);
    gt += key > prefix;
    eq += key == prefix;
  }
  atomicAdd(&sh_gt, gt);
  atomicAdd(&sh_eq, eq);
  __syncthreads();
  if (sh_gt + sh_eq == k || prefix == order_key(-INFINITY)) {
    for (int b = tid; b < nb; b += THREADS)
      if (order_key(q[b].first) >= prefix && q[b].first > -INFINITY) o[b] = 1;
  } else if (tid == 0) {  // ties straddle the k-th place: the serial order decides which of them are in
    const int kk = stdsel::select_blocks(q, nb, topk_blocks);
    for (int i = 0; i < kk; ++i)
      if (q[i].first > -INFINITY) o[q[i].second] = 1;
  }
}

template <int = 0>
__global__ void apply_candidates_kernel(float* __restrict__ scores, int S, int n, const int* __restrict__ vis,
                                        const uint8_t* __restrict__ sel, const int* __restrict__ cand_vis, int nbmax,
                                        int blk) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(S) * n) return;
  const int t = int(id / n), j = int(id % n);
  if (j >= vis[t]) return;
  const bool ok = j < cand_vis[t] && sel[int64_t(t) * nbmax + j / blk];
  if (!ok) scores[id] = -INFINITY;
}

// ---- compressor (ratio > 1): softmax pooling over groups of r rows of [pending ; chunk] ----
// Channel i of group g of [pending (n_pend rows) ; chunk].
__device__ __forceinline__ bf16_t pool_group(const float* __restrict__ pkv, const float* __restrict__ pz, int n_pend,
                                             const float* __restrict__ kv, const float* __restrict__ z, int r, int D,
                                             int g, int i) {
  auto at = [&](const float* pend, const float* chunk, int row) {
    return row < n_pend ? pend[int64_t(row) * D + i] : chunk[int64_t(row - n_pend) * D + i];
  };
  float mx = -INFINITY;
  for (int t = 0; t < r; ++t) mx = fmaxf(mx, at(pz, z, g * r + t));
  float den = 0.f, acc = 0.f;
  for (int t = 0; t < r; ++t) den = __fadd_rn(den, expf(__fsub_rn(at(pz, z, g * r + t), mx)));
  for (int t = 0; t < r; ++t)
    acc = __fadd_rn(acc, __fmul_rn(at(pkv, kv, g * r + t), __fdiv_rn(expf(__fsub_rn(at(pz, z, g * r + t), mx)), den)));
  return __float2bfloat16_rn(acc);
}

template <int = 0>
__global__ void compress_pool_kernel(const float* __restrict__ pkv, const float* __restrict__ pz, int n_pend,
                                     const float* __restrict__ kv, const float* __restrict__ z, int r, int D,
                                     int n_groups, bf16_t* __restrict__ pooled) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(n_groups) * D) return;
  pooled[id] = pool_group(pkv, pz, n_pend, kv, z, r, D, int(id / D), int(id % D));
}

// The unfinished group's rows become the pending rows: pend[q] = row n_groups·r + q of [pending ; chunk].
template <int = 0>
__global__ void compress_pending_kernel(float* __restrict__ pkv, float* __restrict__ pz, int n_pend,
                                        const float* __restrict__ kv, const float* __restrict__ z, int start, int rem,
                                        int D) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rem) * D) return;
  const int q = int(id / D), i = int(id % D);
  const int src = start + q;
  if (src < n_pend) return;  // only when no group completed: the row is already in place (src == q)
  pkv[int64_t(q) * D + i] = kv[int64_t(src - n_pend) * D + i];
  pz[int64_t(q) * D + i] = z[int64_t(src - n_pend) * D + i];
}

// The compressor of a decode batch (one row per sequence; n_pend[t] rows pending in row t's sequence): with r − 1
// pending the row completes the group (pooled[t] as compress_pool_kernel, done[t] = 1), else it becomes pending row
// n_pend[t] (as compress_pending_kernel; pooled[t] = 0, done[t] = 0).
template <int = 0>
__global__ void compress_rows_kernel(float* const* __restrict__ pkv, float* const* __restrict__ pz,
                                     const int64_t* __restrict__ n_pend, const float* __restrict__ kv,
                                     const float* __restrict__ z, int r, int D, int rows, bf16_t* __restrict__ pooled,
                                     int* __restrict__ done) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * D) return;
  const int t = int(id / D), i = int(id % D);
  const int np = int(n_pend[t]);
  const float *kv_t = kv + int64_t(t) * D, *z_t = z + int64_t(t) * D;
  if (np + 1 == r) {
    pooled[id] = pool_group(pkv[t], pz[t], np, kv_t, z_t, r, D, 0, i);
  } else {
    pkv[t][int64_t(np) * D + i] = kv_t[i];
    pz[t][int64_t(np) * D + i] = z_t[i];
    pooled[id] = __float2bfloat16_rn(0.f);
  }
  if (i == 0) done[t] = np + 1 == r;
}

}  // namespace glue

// Sparse attention (attention.cuh semantics) for any R, H, D (D % 32 == 0) and any number of entries: the
// tensor-core kernel when H % 16 == 0, D % 128 == 0, D ≤ 1024 and its shared memory fits; else one CTA per
// (head, row), keeping the scores in shared memory when they fit and computing them twice when they do not.
inline Status sparse_attention_any(const SparseAttnParams& p, cudaStream_t stream) {
  if (p.R < 0 || p.H <= 0 || p.D <= 0 || p.D % 32 || p.n_win < 0 || p.n_comp < 0) return bad_arg("sparse_attention_any: bad shape");
  if (p.R == 0) return Status::Ok();
  if (sparse_attention_fast_shape(p.H, p.D) && detail::attn::smem_bytes(p, 16) <= 227 * 1024)
    return sparse_attention(p, stream);
  const int tot = p.n_win + p.n_comp;
  const size_t smem = size_t(p.D) * 4 + size_t(tot) * 8;
  if (smem <= 200 * 1024) {
    if (smem > 48 * 1024)
      DSV41_CUDA_TRY(cudaFuncSetAttribute(glue::sparse_attn_generic_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(smem)),
                     "sparse attention generic: smem attribute");
    glue::sparse_attn_generic_kernel<<<dim3(p.H, p.R), 128, smem, stream>>>(p);
    return launch_status("sparse attention generic");
  }
  glue::sparse_attn_stream_kernel<<<dim3(p.H, p.R, ceil_div(p.D, glue::kStreamDims)), 128, 0, stream>>>(p);
  return launch_status("sparse attention stream");
}

// sparse_attention_any with H and D known at compile time (a preset's; p.H, p.D must equal them): the
// tensor-core kernel instantiated for them, the same operations as sparse_attention_any's tensor-core path;
// entry counts whose shared memory does not fit go to sparse_attention_any's generic kernels.
template <int H, int D>
inline Status sparse_attention_fixed(const SparseAttnParams& p, cudaStream_t stream) {
  static_assert(sparse_attention_fast_shape(H, D), "sparse_attention_fixed: H % 16, D % 128, D <= 1024");
  if (p.H != H || p.D != D) return bad_arg("sparse_attention_fixed: shape is not the fixed H/D");
  if (p.R < 0 || p.n_win < 0 || p.n_comp < 0) return bad_arg("sparse_attention_fixed: bad shape");
  if (p.R == 0) return Status::Ok();
  if (detail::attn::smem_bytes(p, 16) > 227 * 1024) return sparse_attention_any(p, stream);
  return detail::attn::run<D, H>(p, stream);
}

inline Status index_scores_any(const IndexScoreParams& p, cudaStream_t stream) {
  if (p.R == 0 || p.n == 0) return Status::Ok();
  if (index_scores_fast_shape(p.nI, p.dI)) return index_scores(p, stream);
  if (p.dI % 32) return bad_arg("index_scores_any: dI % 32");
  const int64_t warps = int64_t(p.R) * p.n;
  glue::index_scores_generic_kernel<<<glue::blocks_for(warps * 32), glue::kThreads, 0, stream>>>(p);
  return launch_status("index scores generic");
}

}  // namespace dsv41::gpu
