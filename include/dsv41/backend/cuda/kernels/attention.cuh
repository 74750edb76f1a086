// SPEC §3.6 sparse attention with sink on the GPU, over packed cache entries (SPEC §6):
// window entries (E4M3 + UE8M0 per 32) and selected compressed entries (E2M1 + E4M3 scale per 16).
// Per query row and head: s_j = q·e_j·scale, m = max s_j, o = Σ bf16(exp(s_j − m))·e_j / (Σ exp(s_j − m) +
// exp(sink − m)), BF16 out. The numerator rounding uses the final max, so scores are computed first for
// all entries (pass 1), then the weighted sum (pass 2): no online rescaling.
//
// One CTA = one query row × 16 or 32 heads (8 warps). Entries are dequantized to BF16 into shared memory in
// chunks of 64 (exact: both packed formats have ≤ 6 significant bits); both products run on BF16
// tensor cores (mma m16n8k16) with FP32 accumulation.
#pragma once
#include <cuda_fp8.h>

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
  return size_t(HG) * p.D * 2 + size_t(CH) * p.D * 2 + HG * np * 4 + HG * np * 2 + np * 4 + 64 * 4;
}
}  // namespace attn

// Byte offset of 16-byte chunk c of row r in a swizzled [rows][chunks] array.
__device__ __forceinline__ int swz(int r, int c, int chunks) { return (r * chunks + (c ^ (r & 7))) << 4; }

__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_scaled(uint16_t two, float s) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x * s, f.y * s);
}

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
  const int NP = npad(p), n_chunks_d = D / 8, n_chunks_p = NP / 8;
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

  // Entry list: window entries (ids ≥ 0, tagged 0) then compressed ones (tagged 1 in bit 31), in order.
  if (warp == 0) {
    int n = 0;
    const int tot = p.n_win + p.n_comp;
    for (int base = 0; base < tot; base += 32) {
      const int j = base + lane;
      int v = -1;
      if (j < p.n_win) v = p.win_idx[int64_t(row) * p.n_win + j];
      else if (j < tot) {
        const int c = p.comp_idx[int64_t(row) * p.n_comp + (j - p.n_win)];
        v = c >= 0 ? int(uint32_t(c) | 0x80000000u) : -1;
      }
      const bool ok = v != -1;
      const uint32_t m = __ballot_sync(0xffffffffu, ok);
      if (ok) list[n + __popc(m & ((1u << lane) - 1u))] = v;
      n += __popc(m);
    }
    if (lane == 0) *n_ent = n;
  }
  // Q rows h0..h0+15, swizzled.
  for (int c = tid; c < HG * n_chunks_d; c += THREADS) {
    const int h = c / n_chunks_d, ch = c % n_chunks_d;
    *reinterpret_cast<uint4*>(Qs + swz(h, ch, n_chunks_d)) =
        *reinterpret_cast<const uint4*>(p.q + (int64_t(row) * H + h0 + h) * D + ch * 8);
  }
  __syncthreads();
  const int n = *n_ent;
  bf16_t* orow = p.out + (int64_t(row) * H + h0) * D;
  if (n == 0) {
    for (int i = tid; i < HG * D; i += THREADS) orow[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int went = D + D / 32, ment = D / 2 + D / 16;

  // Dequantize entries [c0, c0 + 64) of the list into Es (rows past n are zero).
  auto load_chunk = [&](int c0) {
    const int groups = D / 16;
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
  };

  // Pass 1: S[h][j] = (q_h · e_j) · scale.
  for (int c0 = 0; c0 < n; c0 += CH) {
    __syncthreads();
    load_chunk(c0);
    __syncthreads();
    float acc[MT][4] = {};
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
    const int j = c0 + 8 * warp + 2 * t;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int h = 16 * mt + g;
      S[h * NP + j] = acc[mt][0] * p.scale;
      S[h * NP + j + 1] = acc[mt][1] * p.scale;
      S[(h + 8) * NP + j] = acc[mt][2] * p.scale;
      S[(h + 8) * NP + j + 1] = acc[mt][3] * p.scale;
    }
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
    load_chunk(c0);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < CH / 16; ++ks) {
      uint32_t a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldmatrix_x4(a[mt], Ps + swz(16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), (c0 + 16 * ks) / 8 + (lane >> 4),
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
namespace attn {
template <int HG, int DC, int HC>
inline Status launch(const SparseAttnParams& p, size_t smem, cudaStream_t stream) {
  DSV41_CUDA_TRY(cudaFuncSetAttribute(sparse_attn_kernel<HG, DC, HC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      int(smem)),
                 "sparse_attention: smem attribute");
  sparse_attn_kernel<HG, DC, HC><<<dim3(p.H / HG, p.R), THREADS, smem, stream>>>(p);
  return launch_status("sparse_attention");
}

// 32 heads per CTA halve the dequantization per head; used when it fits in shared memory and the grid still
// has a few waves (prefill); 16 otherwise (decode: more CTAs). Shapes checked by the caller, R > 0.
template <int DC, int HC>
inline Status run(const SparseAttnParams& p, cudaStream_t stream) {
  const size_t smem32 = smem_bytes(p, 32), smem16 = smem_bytes(p, 16);
  const bool use32 = p.H % 32 == 0 && smem32 <= 227 * 1024 && int64_t(p.R) * (p.H / 32) >= 4 * 132;
  const size_t smem = use32 ? smem32 : smem16;
  if (smem > 227 * 1024) return bad_arg("sparse_attention: too many entries for shared memory");
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
