// SPEC §4.4 indexer on the GPU: scores of FP4 queries against packed FP4 index keys (SPEC §6: E2M1 +
// UE8M0 per 32), score[p, j] = Σ_h w[p,h]·relu(q_h·k_j) (−inf for j ≥ visible), and the top-k selection
// (ties toward the lower index, −inf never picked, result ascending, −1 padded).
//
// Scores: mma m16n8k32 E4M3 (E2M1 widened exactly; issued as the two f16 mma sm_90 runs it as, the queries
// widened once for all keys) per 32-wide block with promotion by the two power-of-two scales; a block's 32
// products are multiples of 2^-2 below 2^10.2, so the tensor core's inner sum is exact, and the FP32 sums over
// blocks are exact while the scales of one vector span less than ~2^10. The head sum is done in the reference's
// order (h = 0..nI−1, separate multiply and add), so the scores match cpu::index_select bit for bit under that
// condition.
//
// Top-k: one CTA per row; 4 radix passes of 8 bits over order-preserving keys find the k-th largest
// value T; then one ordered pass takes every score > T and the first (lowest-index) scores == T.
#pragma once
#include <cub/block/block_scan.cuh>

#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

struct IndexScoreParams {
  const uint8_t* q = nullptr;    // packed queries [R, nI, dI/2]
  const uint8_t* qe = nullptr;   // UE8M0 [R, nI, dI/32]
  const float* w = nullptr;      // head weights [R, nI]
  const uint8_t* keys = nullptr; // packed index keys [n, dI/2 + dI/32]
  int n = 0;
  const int* vis = nullptr;      // [R] visible keys of each row (≤ n)
  // Per row (rows of several sequences): row r reads keys_rows[r], which holds n_rows[r] ≤ n keys; n is then
  // the scores' row stride.
  const uint8_t* const* keys_rows = nullptr;
  const int* n_rows = nullptr;
  int R = 0, nI = 0, dI = 0;
  float* scores = nullptr;       // [R, n]
};

namespace detail {

template <int MT, int KB>  // MT = nI/16 head tiles, KB = dI/32 blocks
__global__ void __launch_bounds__(128) index_score_kernel(const IndexScoreParams p) {
  constexpr int NI = 16 * MT, KEYS_PER_WARP = 64;
  __shared__ float red[4][KEYS_PER_WARP][NI + 1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row = blockIdx.y;
  const int key0 = blockIdx.x * 256 + warp * KEYS_PER_WARP;
  if (key0 >= p.n) return;
  const int dh = 16 * KB;         // packed bytes per head
  const int ent = dh + KB;        // bytes per key
  const int vis = p.vis[row];
  const int nr = p.n_rows ? p.n_rows[row] : p.n;
  const uint8_t* keys = p.keys_rows ? p.keys_rows[row] : p.keys;
  if (key0 >= vis || nr <= 0) {  // no visible key in this warp's range: −inf, nothing read
    float* out = p.scores + int64_t(row) * p.n;
    for (int key = key0 + lane; key < key0 + KEYS_PER_WARP && key < p.n; key += 32) out[key] = -INFINITY;
    return;
  }

  // The queries as the f16 halves of their E4M3 fragments (mma_e4m3_zero_f16), widened once for every key.
  uint32_t al[MT][KB][4], ah[MT][KB][4];
  float sq[MT][KB][2];
  const uint8_t* qrow = p.q + int64_t(row) * NI * dh;
  const uint8_t* qerow = p.qe + int64_t(row) * NI * KB;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const int h = 16 * mt + g;
      const uint32_t r0 = *reinterpret_cast<const uint32_t*>(qrow + h * dh + 16 * kb + 4 * t);
      const uint32_t r1 = *reinterpret_cast<const uint32_t*>(qrow + (h + 8) * dh + 16 * kb + 4 * t);
      const uint32_t a[4] = {e2m1x4_to_e4m3x4(r0 & 0xFFFFu), e2m1x4_to_e4m3x4(r1 & 0xFFFFu),
                             e2m1x4_to_e4m3x4(r0 >> 16), e2m1x4_to_e4m3x4(r1 >> 16)};
#pragma unroll
      for (int q = 0; q < 4; ++q) e4m3x4_to_f16x2x2(a[q], al[mt][kb][q], ah[mt][kb][q]);
      sq[mt][kb][0] = ue8m0_f(qerow[h * KB + kb]);
      sq[mt][kb][1] = ue8m0_f(qerow[(h + 8) * KB + kb]);
    }
  float wh[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    wh[mt][0] = p.w[int64_t(row) * NI + 16 * mt + g];
    wh[mt][1] = p.w[int64_t(row) * NI + 16 * mt + g + 8];
  }
  const E2m1Lut lut = make_e2m1_lut();
#pragma unroll 1
  for (int j = 0; j < KEYS_PER_WARP / 8; ++j) {
    const int kb_key = min(key0 + 8 * j + g, nr - 1);
    const int ks0 = min(key0 + 8 * j + 2 * t, nr - 1), ks1 = min(key0 + 8 * j + 2 * t + 1, nr - 1);
    const uint8_t* kp = keys + int64_t(kb_key) * ent;
    const uint32_t se0 = *reinterpret_cast<const uint32_t*>(keys + int64_t(ks0) * ent + dh);  // KB == 4 bytes
    const uint32_t se1 = *reinterpret_cast<const uint32_t*>(keys + int64_t(ks1) * ent + dh);
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][c] = 0.f;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      const uint32_t kw = *reinterpret_cast<const uint32_t*>(kp + 16 * kb + 4 * t);
      uint32_t bl[2], bh[2];  // the key's B fragment, widened once for every head tile
      e4m3x4_to_f16x2x2(e2m1x4_to_e4m3x4(kw & 0xFFFFu, lut), bl[0], bh[0]);
      e4m3x4_to_f16x2x2(e2m1x4_to_e4m3x4(kw >> 16, lut), bl[1], bh[1]);
      const float k0 = __uint_as_float(ue8m0_byte_bits(se0, kb)), k1 = __uint_as_float(ue8m0_byte_bits(se1, kb));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float part[4];  // the E4M3 mma's bits through the fmaf below (an accumulator that starts at +0)
        mma_e4m3_zero_f16(part, al[mt][kb], ah[mt][kb], bl, bh);
        acc[mt][0] = fmaf(part[0], sq[mt][kb][0] * k0, acc[mt][0]);
        acc[mt][1] = fmaf(part[1], sq[mt][kb][0] * k1, acc[mt][1]);
        acc[mt][2] = fmaf(part[2], sq[mt][kb][1] * k0, acc[mt][2]);
        acc[mt][3] = fmaf(part[3], sq[mt][kb][1] * k1, acc[mt][3]);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        red[warp][8 * j + 2 * t + (c & 1)][16 * mt + g + 8 * (c >> 1)] =
            __fmul_rn(wh[mt][c >> 1], fmaxf(acc[mt][c], 0.f));
  }
  __syncwarp();
  float* out = p.scores + int64_t(row) * p.n;
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int kl = lane + 32 * u, key = key0 + kl;
    if (key < p.n) {
      float s = 0.f;
#pragma unroll
      for (int h = 0; h < NI; ++h) s = __fadd_rn(s, red[warp][kl][h]);
      out[key] = key < vis ? s : -INFINITY;
    }
  }
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) topk_kernel(const float* __restrict__ scores, int n,
                                                       const int* __restrict__ vis, int K, int* __restrict__ out) {
  using Scan = cub::BlockScan<int, THREADS>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t sel_bin, sel_above;
  __shared__ int running_take, running_eq;
  const int row = blockIdx.x, tid = threadIdx.x;
  const float* s = scores + int64_t(row) * n;
  int* o = out + int64_t(row) * K;
  const int nv = min(vis[row], n);
  const int k = min(K, nv);
  uint32_t prefix = 0, mask = 0;
  int kk = k;  // how many still to choose at or below the current prefix
  if (k > 0) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += THREADS) hist[i] = 0;
      __syncthreads();
      for (int j = tid; j < nv; j += THREADS) {
        const uint32_t u = ordered_key(s[j]);
        if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid < 32) {  // lane l owns bins 8l..8l+7; find the bin holding the kk-th largest
        int c[8], tot = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) { c[i] = hist[8 * tid + i]; tot += c[i]; }
        int suffix = tot;  // inclusive suffix sum over lanes ≥ tid
        for (int off = 1; off < 32; off <<= 1) {
          const int v = __shfl_down_sync(0xffffffffu, suffix, off);
          if (tid + off < 32) suffix += v;
        }
        const int above_lane = suffix - tot;
        if (above_lane < kk && suffix >= kk) {
          int above = above_lane;
          for (int i = 7; i >= 0; --i) {
            if (above + c[i] >= kk) { sel_bin = 8 * tid + i; sel_above = above; break; }
            above += c[i];
          }
        }
      }
      __syncthreads();
      prefix |= sel_bin << shift;
      mask |= 255u << shift;
      kk -= int(sel_above);
      __syncthreads();
    }
  }
  // prefix = T (the k-th largest key); take keys > T and the first kk keys == T, in index order.
  const uint32_t T = prefix, ninf = ordered_key(-INFINITY);
  if (tid == 0) { running_take = 0; running_eq = 0; }
  __syncthreads();
  if (k > 0) {
    for (int base = 0; base < nv; base += THREADS) {
      const int j = base + tid;
      const uint32_t u = j < nv ? ordered_key(s[j]) : 0u;
      const int eq = (j < nv && u == T) ? 1 : 0;
      int eq_before, eq_total;
      Scan(scan_tmp).ExclusiveSum(eq, eq_before, eq_total);
      __syncthreads();
      const int take = (j < nv && u > ninf && (u > T || (eq && running_eq + eq_before < kk))) ? 1 : 0;
      int pos, take_total;
      Scan(scan_tmp).ExclusiveSum(take, pos, take_total);
      if (take) o[running_take + pos] = j;
      __syncthreads();
      if (tid == 0) { running_take += take_total; running_eq += eq_total; }
      __syncthreads();
    }
  }
  for (int i = running_take + tid; i < K; i += THREADS) o[i] = -1;
}

}  // namespace detail

// The index head counts and dims the tensor-core kernel takes (68-byte keys, 4-byte aligned).
constexpr bool index_scores_fast_shape(int nI, int dI) { return (nI == 16 || nI == 32) && dI == 128; }

// scores [R, n] with nI and dI known at compile time (a preset's; p.nI, p.dI must equal them): only that
// kernel is instantiated. index_scores below picks the same instantiation at run time.
template <int NI, int DI>
inline Status index_scores_fixed(const IndexScoreParams& p, cudaStream_t stream) {
  static_assert(index_scores_fast_shape(NI, DI), "index_scores_fixed: nI in {16, 32}, dI == 128");
  if (p.R < 0 || p.n < 0 || p.nI != NI || p.dI != DI) return bad_arg("index_scores_fixed: shape is not the fixed nI/dI");
  if (p.R == 0 || p.n == 0) return Status::Ok();
  detail::index_score_kernel<NI / 16, DI / 32><<<dim3(ceil_div(p.n, 256), p.R), 128, 0, stream>>>(p);
  return launch_status("index_scores");
}

// scores [R, n]. nI ∈ {16, 32}, dI == 128.
inline Status index_scores(const IndexScoreParams& p, cudaStream_t stream) {
  if (p.R < 0 || p.n < 0 || !index_scores_fast_shape(p.nI, p.dI)) return bad_arg("index_scores: nI/dI");
  return p.nI == 16 ? index_scores_fixed<16, 128>(p, stream) : index_scores_fixed<32, 128>(p, stream);
}

// lists [R, K] = top-min(K, vis[r]) of scores[r, 0..vis[r]) (ascending, −1 padded).
inline Status topk(const float* scores, int R, int n, const int* vis, int K, int* lists, cudaStream_t stream) {
  if (R < 0 || n < 0 || K <= 0) return bad_arg("topk: bad shape");
  if (R == 0) return Status::Ok();
  detail::topk_kernel<1024><<<R, 1024, 0, stream>>>(scores, n, vis, K, lists);
  return launch_status("topk");
}

}  // namespace dsv41::gpu
