// SPEC §3.6 sparse attention with sink on the GPU, over packed cache entries (SPEC §6):
// window entries (E4M3 + UE8M0 per 32) and selected compressed entries (E2M1 + E4M3 scale per 16).
// Per query row and head: s_j = q·e_j·scale, m = max s_j, o = Σ bf16(exp(s_j − m))·e_j / (Σ exp(s_j − m) +
// exp(sink − m)), BF16 out. The numerator rounding uses the final max, so scores are computed first for
// all entries (pass 1), then the weighted sum (pass 2): no online rescaling.
//
// One CTA = one query row × 16 or 32 heads (8 warps); at decode (few rows) a cluster of up to 8 CTAs shares a
// row's entries (sparse_attn_split_kernel). Entries are dequantized to BF16 into shared memory in chunks of 64
// (exact: both packed formats have ≤ 6 significant bits); both products run on BF16 tensor cores (mma
// m16n8k16) with FP32 accumulation.
#pragma once
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <algorithm>

#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

struct SparseAttnParams {
  const bf16_t* q = nullptr;          // [R, H, D]
  const uint8_t* win_pool = nullptr;  // window entries, D + D/32 bytes each
  const int* win_idx = nullptr;       // [R, n_win] entry ids in win_pool, −1 = none
  int n_win = 0;
  const uint8_t* comp_pool = nullptr; // compressed main entries, D/2 + D/16 bytes each
  // Per row (several sequences in one launch): row r reads win_pools[r] / comp_pools[r] when these are set.
  const uint8_t* const* win_pools = nullptr;
  const uint8_t* const* comp_pools = nullptr;
  const int* comp_idx = nullptr;      // [R, n_comp], −1 = none
  int n_comp = 0;
  const float* sink = nullptr;        // [H]
  float scale = 1.f;
  int R = 0, H = 0, D = 0;
  bf16_t* out = nullptr;              // [R, H, D]
};

namespace detail {
namespace attn {
constexpr int CH = 64, THREADS = 256;
__host__ __device__ inline int npad(const SparseAttnParams& p) { return ((p.n_win + p.n_comp + CH - 1) / CH) * CH; }
inline size_t smem_bytes(const SparseAttnParams& p, int HG) {
  const size_t np = size_t(npad(p) > 0 ? npad(p) : CH);
  return size_t(HG) * p.D * 2 + size_t(CH) * p.D * 2 + HG * np * 4 + HG * np * 2 + np * 4 + 64 * 4 + np / 8;
}
}  // namespace attn

// Byte offset of 16-byte chunk c of row r in a swizzled [rows][chunks] array.
__device__ __forceinline__ int swz(int r, int c, int chunks) { return (r * chunks + (c ^ (r & 7))) << 4; }

__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_scaled(uint16_t two, float s) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x * s, f.y * s);
}

namespace attn {
// Entry list of a row: window entries (ids ≥ 0, tagged 0) then compressed ones (tagged 1 in bit 31), in order,
// the −1s dropped. All threads: each warp counts its 32-entry blocks, then places them after the blocks before
// (cnt: ceil((n_win + n_comp) / 32) ints of shared memory). Writes list[0, n) and *n_ent; ends synchronized.
__device__ __forceinline__ void build_list(const SparseAttnParams& p, int row, int tid, int* list, int* cnt,
                                           int* n_ent) {
  const int tot = p.n_win + p.n_comp, nb = (tot + 31) / 32, warp = tid >> 5, lane = tid & 31;
  auto entry = [&](int j) {
    if (j < p.n_win) return p.win_idx[int64_t(row) * p.n_win + j];
    if (j < tot) {
      const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
      return c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
    }
    return -1;
  };
  for (int b = warp; b < nb; b += THREADS / 32) {
    const uint32_t m = __ballot_sync(0xffffffffu, entry(32 * b + lane) != -1);
    if (lane == 0) cnt[b] = __popc(m);
  }
  __syncthreads();
  for (int b = warp; b < nb; b += THREADS / 32) {
    int base = 0;
    for (int i = lane; i < b; i += 32) base += cnt[i];
    for (int o = 16; o > 0; o >>= 1) base += __shfl_xor_sync(0xffffffffu, base, o);
    const int v = entry(32 * b + lane);
    const uint32_t m = __ballot_sync(0xffffffffu, v != -1);
    if (v != -1) list[base + __popc(m & ((1u << lane) - 1u))] = v;
  }
  if (tid < 32) {
    int n = 0;
    for (int i = tid; i < nb; i += 32) n += cnt[i];
    for (int o = 16; o > 0; o >>= 1) n += __shfl_xor_sync(0xffffffffu, n, o);
    if (tid == 0) *n_ent = n;
  }
  __syncthreads();
}

// Q rows h0..h0+HG of one query row into Qs, swizzled. All threads.
template <int HG>
__device__ __forceinline__ void load_q(const SparseAttnParams& p, int row, int h0, int H, int D, uint8_t* Qs, int tid) {
  const int n_chunks_d = D / 8;
  for (int c = tid; c < HG * n_chunks_d; c += THREADS) {
    const int h = c / n_chunks_d, ch = c % n_chunks_d;
    *reinterpret_cast<uint4*>(Qs + swz(h, ch, n_chunks_d)) =
        *reinterpret_cast<const uint4*>(p.q + (int64_t(row) * H + h0 + h) * D + ch * 8);
  }
}

// Dequantizes entries [c0, c0 + CH) of the list into Es (rows past n are zero). All threads.
__device__ __forceinline__ void load_chunk(const uint8_t* win_pool, const uint8_t* comp_pool, const int* list, int n,
                                           int c0, int D, uint8_t* Es, int tid) {
  const int groups = D / 16, n_chunks_d = D / 8;
  const int went = D + D / 32, ment = D / 2 + D / 16;
  for (int it = tid; it < CH * groups; it += THREADS) {
    const int r = it / groups, grp = it % groups;
    const int j = c0 + r;
    uint32_t o[8];
    if (j < n) {
      const int v = list[j];
      if (v >= 0) {
        const uint8_t* e = win_pool + int64_t(v) * went;
        const uint32_t* c4p = reinterpret_cast<const uint32_t*>(e + grp * 16);  // entries are 4-byte aligned
        const uint32_t codes[4] = {c4p[0], c4p[1], c4p[2], c4p[3]};
        const float s = ue8m0_f(e[D + grp / 2]);
        const uint16_t* c2 = reinterpret_cast<const uint16_t*>(codes);
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = e4m3x2_to_bf16x2_scaled(c2[i], s);
      } else {
        const uint8_t* e = comp_pool + int64_t(v & 0x7fffffff) * ment;
        const uint2 nib = *reinterpret_cast<const uint2*>(e + grp * 8);
        const float s = num::e4m3_to_f32(e[D / 2 + grp]);
        const uint32_t c4[4] = {e2m1x4_to_e4m3x4(nib.x & 0xFFFFu), e2m1x4_to_e4m3x4(nib.x >> 16),
                                e2m1x4_to_e4m3x4(nib.y & 0xFFFFu), e2m1x4_to_e4m3x4(nib.y >> 16)};
        const uint16_t* c2 = reinterpret_cast<const uint16_t*>(c4);
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = e4m3x2_to_bf16x2_scaled(c2[i], s);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = 0u;
    }
    *reinterpret_cast<uint4*>(Es + swz(r, 2 * grp, n_chunks_d)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(Es + swz(r, 2 * grp + 1, n_chunks_d)) = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

// Scores of one dequantized chunk: warp w's entries 8w..8w+7 against the HG heads (m16 tiles), acc[mt] = q·e.
template <int MT>
__device__ __forceinline__ void score_chunk(const uint8_t* Qs, const uint8_t* Es, int D, int warp, int lane,
                                            float (&acc)[MT][4]) {
  const int n_chunks_d = D / 8;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[mt][c] = 0.f;
  for (int ks = 0; ks < D / 16; ks += 2) {
    uint32_t b[4];
    ldmatrix_x4(b, Es + swz(8 * warp + (lane & 7), 2 * ks + (lane >> 3), n_chunks_d));
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4];
        ldmatrix_x4(a, Qs + swz(16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * (ks + u) + (lane >> 4), n_chunks_d));
        mma_bf16(acc[mt], a, b[2 * u], b[2 * u + 1]);
      }
  }
}

// acc += P[:, pc0 .. pc0 + CH) · E (one dequantized chunk); the warp owns dims [dim0, dim0 + 8·ntile).
template <int MT, int NT>
__device__ __forceinline__ void pv_chunk(const uint8_t* Ps, int pc0, int n_chunks_p, const uint8_t* Es, int D, int dim0,
                                         int ntile, int lane, float (&acc)[MT][NT][4]) {
  const int n_chunks_d = D / 8;
#pragma unroll
  for (int ks = 0; ks < CH / 16; ++ks) {
    uint32_t a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4(a[mt], Ps + swz(16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), (pc0 + 16 * ks) / 8 + (lane >> 4),
                                  n_chunks_p));
    const int er = 16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1);
#pragma unroll
    for (int j = 0; j < NT; j += 2) {
      if (j < ntile) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Es + swz(er, (dim0 + 8 * (j + (lane >> 4))) / 8, n_chunks_d));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][j], a[mt], b[0], b[1]);
          mma_bf16(acc[mt][j + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
}

// The warp's score fragments of entries c0 + 8·warp + 2t (+1), scaled, into S (row stride ns).
template <int MT>
__device__ __forceinline__ void store_scores(const float (&acc)[MT][4], float* S, int ns, int j, int g, float scale) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int h = 16 * mt + g;
    S[h * ns + j] = acc[mt][0] * scale;
    S[h * ns + j + 1] = acc[mt][1] * scale;
    S[(h + 8) * ns + j] = acc[mt][2] * scale;
    S[(h + 8) * ns + j + 1] = acc[mt][3] * scale;
  }
}
}  // namespace attn

// HG = 16 or 32 heads per CTA (MT = HG/16 m16 tiles): each dequantized entry chunk serves HG heads.
// DC, HC > 0: the head dim and head count fixed at compile time (a preset's; p.D, p.H must equal them),
// 0: read from p. One source for both, with the same operations in the same order.
template <int HG, int DC = 0, int HC = 0>
__global__ void __launch_bounds__(256) sparse_attn_kernel(const SparseAttnParams p) {
  using namespace attn;
  static_assert(DC == 0 || (DC % 128 == 0 && DC <= 1024), "sparse_attn_kernel: D % 128 == 0, D <= 1024");
  static_assert(HC == 0 || HC % HG == 0, "sparse_attn_kernel: H a multiple of the heads per CTA");
  constexpr int MT = HG / 16;
  constexpr int NT = DC > 0 ? DC / 64 : 8;  // n8 tiles per warp in pass 2 (D / 64 ≤ 8)
  extern __shared__ __align__(128) uint8_t smem[];
  const int D = DC > 0 ? DC : p.D, H = HC > 0 ? HC : p.H;
  const int NP = npad(p), n_chunks_p = NP / 8;
  const int row = blockIdx.y, h0 = blockIdx.x * HG;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  uint8_t* Qs = smem;
  uint8_t* Es = Qs + HG * D * 2;
  float* S = reinterpret_cast<float*>(Es + CH * D * 2);
  uint8_t* Ps = reinterpret_cast<uint8_t*>(S + HG * NP);
  int* list = reinterpret_cast<int*>(Ps + HG * NP * 2);
  float* den = reinterpret_cast<float*>(list + NP);
  int* n_ent = reinterpret_cast<int*>(den + HG);
  int* cnt = n_ent + 1;

  load_q<HG>(p, row, h0, H, D, Qs, tid);
  build_list(p, row, tid, list, cnt, n_ent);
  const int n = *n_ent;
  bf16_t* orow = p.out + (int64_t(row) * H + h0) * D;
  if (n == 0) {
    for (int i = tid; i < HG * D; i += THREADS) orow[i] = __float2bfloat16_rn(0.f);
    return;
  }
  // Pass 1: S[h][j] = (q_h · e_j) · scale.
  for (int c0 = 0; c0 < n; c0 += CH) {
    __syncthreads();
    load_chunk(win_pool, comp_pool, list, n, c0, D, Es, tid);
    __syncthreads();
    float acc[MT][4];
    score_chunk<MT>(Qs, Es, D, warp, lane, acc);
    store_scores<MT>(acc, S, NP, c0 + 8 * warp + 2 * t, g, p.scale);
  }
  __syncthreads();
  // Softmax numerators (BF16) and denominators, HG/8 heads per warp.
  for (int hh = 0; hh < HG / 8; ++hh) {
    const int h = (HG / 8) * warp + hh;
    float m = -INFINITY;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, S[h * NP + j]);
    m = warp_max(m);
    float sum = 0.f;
    for (int j = lane; j < NP; j += 32) {
      float e = 0.f;
      if (j < n) {
        e = expf(S[h * NP + j] - m);
        sum += e;
      }
      reinterpret_cast<bf16_t*>(Ps + swz(h, j / 8, n_chunks_p))[j % 8] = __float2bfloat16_rn(e);
    }
    sum = warp_sum(sum);
    if (lane == 0) den[h] = sum + expf(p.sink[h0 + h] - m);
  }
  // Pass 2: O = P · E, warp w owns dims [w·D/8, (w+1)·D/8).
  const int ntile = D / 64;  // n8 tiles per warp (≤ 8)
  const int dim0 = warp * (D / 8);
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mt][j][c] = 0.f;
  for (int c0 = 0; c0 < n; c0 += CH) {
    __syncthreads();
    load_chunk(win_pool, comp_pool, list, n, c0, D, Es, tid);
    __syncthreads();
    pv_chunk<MT, NT>(Ps, c0, n_chunks_p, Es, D, dim0, ntile, lane, acc);
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int h = 16 * mt + g;
    const float d0 = den[h], d1 = den[h + 8];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      if (j < ntile) {
        const int dim = dim0 + 8 * j + 2 * t;
        *reinterpret_cast<uint32_t*>(orow + int64_t(h) * D + dim) =
            pack_bf16x2(__fdiv_rn(acc[mt][j][0], d0), __fdiv_rn(acc[mt][j][1], d0));
        *reinterpret_cast<uint32_t*>(orow + int64_t(h + 8) * D + dim) =
            pack_bf16x2(__fdiv_rn(acc[mt][j][2], d1), __fdiv_rn(acc[mt][j][3], d1));
      }
    }
  }
}

// Decode (few rows): the row's entry chunks split over a cluster of SPLIT CTAs (sm_90 thread block cluster,
// cluster rank c takes chunks c, c + SPLIT, ...), 16 heads per CTA. The same products and roundings as
// sparse_attn_kernel: the max over all of the row's scores is exchanged through distributed shared memory
// before any numerator is rounded, so each bf16(exp(s_j − m)) is the one-CTA kernel's; only the order of
// the FP32 sums (P·E and the denominator, summed over ranks in rank order) differs. resident: the rank's lcap
// chunks stay dequantized in shared memory from pass 1 to pass 2 (loaded at once); 0: one chunk, reloaded.
template <int DC = 0, int HC = 0>
__global__ void __launch_bounds__(256, 1) sparse_attn_split_kernel(const SparseAttnParams p, int lcap, int resident) {
  using namespace attn;
  namespace cg = cooperative_groups;
  static_assert(DC == 0 || (DC % 128 == 0 && DC <= 1024), "sparse_attn_split_kernel: D % 128 == 0, D <= 1024");
  static_assert(HC == 0 || HC % 16 == 0, "sparse_attn_split_kernel: H a multiple of 16");
  constexpr int HG = 16, MT = 1;
  constexpr int NT = DC > 0 ? DC / 64 : 8;
  extern __shared__ __align__(128) uint8_t smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const int D = DC > 0 ? DC : p.D, H = HC > 0 ? HC : p.H;
  const int split = int(gridDim.x), rank = int(blockIdx.x);  // cluster = (split, 1, 1): rank = blockIdx.x
  const int NP = npad(p), NL = lcap * CH, n_chunks_p = NL / 8;
  const int row = blockIdx.z, h0 = blockIdx.y * HG;
  const uint8_t* win_pool = p.win_pools ? p.win_pools[row] : p.win_pool;
  const uint8_t* comp_pool = p.comp_pools ? p.comp_pools[row] : p.comp_pool;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  uint8_t* Qs = smem;
  uint8_t* Es = Qs + HG * D * 2;  // entries ([lcap or 1][CH][D]); after pass 2 the FP32 partial O [HG, D]
  const int echunk = CH * D * 2;
  float* S = reinterpret_cast<float*>(Es + (resident ? lcap : 1) * echunk);  // [HG, NL] this rank's scores
  uint8_t* Ps = reinterpret_cast<uint8_t*>(S + HG * NL);
  int* list = reinterpret_cast<int*>(Ps + HG * NL * 2);  // [NP]
  float* lmax = reinterpret_cast<float*>(list + NP);     // [HG] this rank's max, then [HG] the row's
  float* gmax = lmax + HG;
  float* lden = gmax + HG;                               // [HG] this rank's Σ exp, then [HG] the full denominator
  float* dtot = lden + HG;
  int* n_ent = reinterpret_cast<int*>(dtot + HG);
  int* cnt = n_ent + 1;

  load_q<HG>(p, row, h0, H, D, Qs, tid);
  build_list(p, row, tid, list, cnt, n_ent);
  const int n = *n_ent;  // the same in every rank of the cluster (one row)
  bf16_t* orow = p.out + (int64_t(row) * H + h0) * D;
  const int per = ceil_div(HG * D / 8, split) * 8;  // output elements each rank reduces and writes
  const int e0 = rank * per, e1 = min(HG * D, e0 + per);
  if (n == 0) {
    for (int i = e0 + tid; i < e1; i += THREADS) orow[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int nch = ceil_div(n, CH);
  const int L = rank < nch ? ceil_div(nch - rank, split) : 0;  // this rank's chunks (≤ lcap)
  // Pass 1 over this rank's chunks: S[h][CH·li + jj] = (q_h · e_j) · scale, j = CH·(rank + split·li) + jj.
  if (resident) {
    for (int li = 0; li < L; ++li) load_chunk(win_pool, comp_pool, list, n, CH * (rank + split * li), D, Es + li * echunk, tid);
    __syncthreads();
  }
  for (int li = 0; li < L; ++li) {
    if (!resident) {
      __syncthreads();
      load_chunk(win_pool, comp_pool, list, n, CH * (rank + split * li), D, Es, tid);
      __syncthreads();
    }
    float acc[MT][4];
    score_chunk<MT>(Qs, Es + (resident ? li * echunk : 0), D, warp, lane, acc);
    store_scores<MT>(acc, S, NL, CH * li + 8 * warp + 2 * t, g, p.scale);
  }
  __syncthreads();
  auto global_j = [&](int jl) { return CH * (rank + split * (jl / CH)) + jl % CH; };
  for (int hh = 0; hh < 2; ++hh) {  // 2 heads per warp
    const int h = 2 * warp + hh;
    float m = -INFINITY;
    for (int jl = lane; jl < L * CH; jl += 32)
      if (global_j(jl) < n) m = fmaxf(m, S[h * NL + jl]);
    m = warp_max(m);
    if (lane == 0) lmax[h] = m;
  }
  cluster.sync();
  if (tid < HG) {
    float m = -INFINITY;
    for (int r = 0; r < split; ++r) m = fmaxf(m, cluster.map_shared_rank(lmax, unsigned(r))[tid]);
    gmax[tid] = m;
  }
  __syncthreads();
  for (int hh = 0; hh < 2; ++hh) {
    const int h = 2 * warp + hh;
    const float m = gmax[h];
    float sum = 0.f;
    for (int jl = lane; jl < NL; jl += 32) {
      float e = 0.f;
      if (jl < L * CH && global_j(jl) < n) {
        e = expf(S[h * NL + jl] - m);
        sum += e;
      }
      reinterpret_cast<bf16_t*>(Ps + swz(h, jl / 8, n_chunks_p))[jl % 8] = __float2bfloat16_rn(e);
    }
    sum = warp_sum(sum);
    if (lane == 0) lden[h] = sum;
  }
  // Pass 2 over this rank's chunks: partial O = P · E.
  const int ntile = D / 64;
  const int dim0 = warp * (D / 8);
  float acc[MT][NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[0][j][c] = 0.f;
  if (resident) __syncthreads();  // Ps complete
  for (int li = 0; li < L; ++li) {
    if (!resident) {
      __syncthreads();
      load_chunk(win_pool, comp_pool, list, n, CH * (rank + split * li), D, Es, tid);
      __syncthreads();
    }
    pv_chunk<MT, NT>(Ps, CH * li, n_chunks_p, Es + (resident ? li * echunk : 0), D, dim0, ntile, lane, acc);
  }
  __syncthreads();
  float* Os = reinterpret_cast<float*>(Es);  // [HG, D] FP32 (HG·D·4 ≤ CH·D·2)
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (j < ntile) {
      const int dim = dim0 + 8 * j + 2 * t;
      *reinterpret_cast<float2*>(Os + g * D + dim) = make_float2(acc[0][j][0], acc[0][j][1]);
      *reinterpret_cast<float2*>(Os + (g + 8) * D + dim) = make_float2(acc[0][j][2], acc[0][j][3]);
    }
  }
  cluster.sync();
  // Each rank reduces its slice of [HG, D] over the ranks (in rank order) and writes it.
  if (tid < HG) {
    float s = 0.f;
    for (int r = 0; r < split; ++r) s += cluster.map_shared_rank(lden, unsigned(r))[tid];
    dtot[tid] = s + expf(p.sink[h0 + tid] - gmax[tid]);
  }
  __syncthreads();
  for (int i = e0 + 4 * tid; i < e1; i += 4 * THREADS) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < split; ++r) {
      const float4 v = *reinterpret_cast<const float4*>(cluster.map_shared_rank(Os, unsigned(r)) + i);
      s.x += v.x; s.y += v.y; s.z += v.z; s.w += v.w;
    }
    const float d = dtot[i / D];
    *reinterpret_cast<uint2*>(orow + i) =
        make_uint2(pack_bf16x2(__fdiv_rn(s.x, d), __fdiv_rn(s.y, d)), pack_bf16x2(__fdiv_rn(s.z, d), __fdiv_rn(s.w, d)));
  }
  cluster.sync();  // no rank leaves while another still reads its shared memory
}
namespace attn {
template <int HG, int DC, int HC>
inline Status launch(const SparseAttnParams& p, size_t smem, cudaStream_t stream) {
  DSV41_CUDA_TRY(cudaFuncSetAttribute(sparse_attn_kernel<HG, DC, HC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)),
                 "sparse_attention: smem attribute");
  sparse_attn_kernel<HG, DC, HC><<<dim3(p.H / HG, p.R), THREADS, smem, stream>>>(p);
  return launch_status("sparse_attention");
}

// Cluster split of a decode launch: entry chunks spread over up to 8 CTAs (the portable cluster size) while the
// unsplit grid would fill less than two CTAs per SM of an H200 (132). 1: no split. Depends on the rows and the
// entry count only, so one batch shape always sums in one order.
inline int split_for(const SparseAttnParams& p) {
  const int64_t ctas = int64_t(p.R) * (p.H / 16), nch = npad(p) / CH;
  if (ctas >= 2 * 132 || nch < 2) return 1;
  return int(std::min<int64_t>({8, nch, (2 * 132) / ctas}));
}
inline size_t smem_split_bytes(const SparseAttnParams& p, int lcap, bool resident) {
  const size_t NL = size_t(lcap) * CH, HG = 16, np = size_t(npad(p));
  return HG * p.D * 2 + size_t(resident ? lcap : 1) * CH * p.D * 2 + HG * NL * 4 + HG * NL * 2 + np * 4 + 4 * HG * 4 +
         16 + np / 8;
}
template <int DC, int HC>
inline Status launch_split(const SparseAttnParams& p, int split, cudaStream_t stream) {
  const int lcap = ceil_div(npad(p) / CH, split);
  const bool resident = smem_split_bytes(p, lcap, true) <= 227 * 1024;
  const size_t smem = smem_split_bytes(p, lcap, resident);
  DSV41_CUDA_TRY(cudaFuncSetAttribute(sparse_attn_split_kernel<DC, HC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)),
                 "sparse_attention split: smem attribute");
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(split), unsigned(p.H / 16), unsigned(p.R));
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(split);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  DSV41_CUDA_TRY(cudaLaunchKernelEx(&cfg, sparse_attn_split_kernel<DC, HC>, p, lcap, int(resident)), "sparse_attention split");
  return launch_status("sparse_attention split");
}

// Few rows (decode): the cluster split. Otherwise one CTA per row and 16 or 32 heads: 32 heads per CTA halve
// the dequantization per head; used when it fits in shared memory and the grid still has a few waves
// (prefill); 16 otherwise. Shapes checked by the caller, R > 0.
template <int DC, int HC>
inline Status run(const SparseAttnParams& p, cudaStream_t stream) {
  const size_t smem32 = smem_bytes(p, 32), smem16 = smem_bytes(p, 16);
  if (smem16 > 227 * 1024) return bad_arg("sparse_attention: too many entries for shared memory");
  if (const int split = split_for(p); split > 1) return launch_split<DC, HC>(p, split, stream);
  const bool use32 = p.H % 32 == 0 && smem32 <= 227 * 1024 && int64_t(p.R) * (p.H / 32) >= 4 * 132;
  const size_t smem = use32 ? smem32 : smem16;
  if constexpr (HC == 0 || HC % 32 == 0)
    if (use32) return launch<32, DC, HC>(p, smem, stream);
  return launch<16, DC, HC>(p, smem, stream);
}
}  // namespace attn
}  // namespace detail

// The head counts and dims the tensor-core kernel takes (each warp owns whole 16-dim pairs of n8 tiles).
constexpr bool sparse_attention_fast_shape(int H, int D) { return H > 0 && H % 16 == 0 && D > 0 && D % 128 == 0 && D <= 1024; }

// o [R, H, D] = attn(q, entries, sink). H % 16 == 0; D % 128 == 0, D ≤ 1024. sparse_attention_fixed
// (glue_attention.cuh) runs the same kernel with H and D as template arguments.
inline Status sparse_attention(const SparseAttnParams& p, cudaStream_t stream) {
  if (p.R < 0 || !sparse_attention_fast_shape(p.H, p.D) || p.n_win < 0 || p.n_comp < 0)
    return bad_arg("sparse_attention: H % 16, D % 128");
  if (p.R == 0) return Status::Ok();
  return detail::attn::run<0, 0>(p, stream);
}

}  // namespace dsv41::gpu
