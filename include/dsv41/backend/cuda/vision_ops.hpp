// SPEC §4.10 vision tower and aligner on CUDA: device weights, a workspace (cuBLASLt + activation buffers)
// and the ops patch_embed, norm, qkv, rope2d, attention, wo, mlp, final_norm, merge, aligner (namespace
// dsv41::gpu::vision), plus tower() / encode() that chain them. BF16 activations, FP32 inside each op,
// rounding points as DeepSeek's vision.py (see kernels/vision.cuh). Every op takes the caller's stream.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/blaslt.hpp>
#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/kernels/rmsnorm.cuh>
#include <dsv41/backend/cuda/kernels/vision.cuh>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu::vision {

struct Dims {
  int layers = 0, d = 0, heads = 0, inter = 0, patch = 14, ratio = 3;
  int out_dim = 0;  // the text model's hidden size (aligner output)
  float theta = 10000.f, eps = 1e-6f;
  int head_dim() const { return heads ? d / heads : 0; }
  int patch_in() const { return 3 * patch * patch; }            // 588
  int patch_in_pad() const { return (patch_in() + 7) / 8 * 8; }  // 592: 16-byte rows for cuBLASLt
  int merge_in() const { return d * ratio * ratio; }
  Status check() const {
    if (layers < 0 || d <= 0 || heads <= 0 || d % heads || inter <= 0 || patch <= 0 || ratio <= 0 || out_dim <= 0)
      return bad_arg("vision dims: bad shape");
    const int hd = d / heads;
    if (hd % 16 || hd > 128) return Status(Code::unsupported, "vision: head_dim must be a multiple of 16, ≤ 128");
    if (d % 8 || inter % 8 || out_dim % 8) return Status(Code::unsupported, "vision: widths must be multiples of 8");
    return Status::Ok();
  }
};

inline Dims dims_from(const ModelShape& s) {
  Dims v;
  v.layers = s.vision.num_hidden_layers;
  v.d = s.vision.hidden_size;
  v.heads = s.vision.num_attention_heads;
  v.inter = s.vision.intermediate_size;
  v.patch = s.vision.patch_size ? s.vision.patch_size : 14;
  v.ratio = s.vision.downsample_ratio ? s.vision.downsample_ratio : 3;
  v.out_dim = s.hidden_size;
  v.theta = float(s.vision.rope_theta);
  return v;
}

inline VisionRopeFreqs rope_freqs(const Dims& v) {
  VisionRopeFreqs f{};
  const int r = v.head_dim() / 2;
  f.nf = r / 2;
  for (int i = 0; i < f.nf && i < 32; ++i)
    f.f[i] = 1.0f / std::pow(v.theta, float(2 * i) / float(r));
  return f;
}

struct Block {
  float *norm1 = nullptr, *norm2 = nullptr;  // FP32 [d]
  bf16_t *wqkv = nullptr, *bqkv = nullptr;   // [3d, d], [3d]
  bf16_t *wo = nullptr, *bo = nullptr;       // [d, d], [d]
  bf16_t *w1 = nullptr, *w2 = nullptr;       // [2·inter, d], [d, inter]
};

struct Weights {
  Dims dims;
  bf16_t *patch_w = nullptr, *patch_b = nullptr;  // [d, patch_in_pad] (zero columns past 588), [d]
  std::vector<Block> blocks;
  float* norm = nullptr;                          // FP32 [d]
  bf16_t *al_w1 = nullptr, *al_b1 = nullptr;      // [out, d·r·r], [out]
  bf16_t *al_w2 = nullptr, *al_b2 = nullptr;      // [out, out], [out]
  DeviceArena mem;
};

// Device buffers for every weight (contents undefined; the bench fills them).
inline Status alloc_weights(const Dims& v, Weights& W) {
  DSV41_TRY(v.check());
  W.dims = v;
  W.blocks.assign(size_t(v.layers), Block{});
  auto& m = W.mem;
  DSV41_TRY(m.alloc(W.patch_w, size_t(v.d) * v.patch_in_pad()));
  DSV41_TRY(m.alloc(W.patch_b, size_t(v.d)));
  for (Block& b : W.blocks) {
    DSV41_TRY(m.alloc(b.norm1, size_t(v.d)));
    DSV41_TRY(m.alloc(b.norm2, size_t(v.d)));
    DSV41_TRY(m.alloc(b.wqkv, size_t(3) * v.d * v.d));
    DSV41_TRY(m.alloc(b.bqkv, size_t(3) * v.d));
    DSV41_TRY(m.alloc(b.wo, size_t(v.d) * v.d));
    DSV41_TRY(m.alloc(b.bo, size_t(v.d)));
    DSV41_TRY(m.alloc(b.w1, size_t(2) * v.inter * v.d));
    DSV41_TRY(m.alloc(b.w2, size_t(v.d) * v.inter));
  }
  DSV41_TRY(m.alloc(W.norm, size_t(v.d)));
  DSV41_TRY(m.alloc(W.al_w1, size_t(v.out_dim) * v.merge_in()));
  DSV41_TRY(m.alloc(W.al_b1, size_t(v.out_dim)));
  DSV41_TRY(m.alloc(W.al_w2, size_t(v.out_dim) * v.out_dim));
  DSV41_TRY(m.alloc(W.al_b2, size_t(v.out_dim)));
  return Status::Ok();
}

// One host tensor as the checkpoint holds it: BF16 bits, or FP32 (norm weights only).
struct HostTensor {
  const void* data = nullptr;
  int64_t numel = 0;
  bool f32 = false;
};
// name → tensor (released names: vision.patch_embed.proj.weight, vision.blocks.N.attn.wqkv.bias, aligner.w1.weight, ...).
using TensorSource = std::function<Result<HostTensor>(const std::string& name)>;

// Allocates and uploads every vision/aligner weight from `src` (sizes checked against the dims).
inline Status upload_weights(const Dims& v, const TensorSource& src, Uploader& up, Weights& W) {
  DSV41_TRY(alloc_weights(v, W));
  auto fetch = [&](const std::string& name, int64_t numel, HostTensor& t) -> Status {
    auto r = src(name);
    if (!r.ok()) return r.status();
    t = *r;
    if (!t.data || t.numel != numel)
      return Status(Code::mismatch, "vision weight " + name + ": expected " + std::to_string(numel) + " elements");
    return Status::Ok();
  };
  auto lin = [&](const std::string& name, int64_t numel, bf16_t* dst) -> Status {
    HostTensor t;
    DSV41_TRY(fetch(name, numel, t));
    if (t.f32) return Status(Code::mismatch, "vision weight " + name + ": expected BF16");
    return up.copy(dst, t.data, size_t(numel) * 2);
  };
  auto nrm = [&](const std::string& name, float* dst) -> Status {
    HostTensor t;
    DSV41_TRY(fetch(name, v.d, t));
    std::vector<float> f(size_t(v.d));
    if (t.f32) std::memcpy(f.data(), t.data, f.size() * 4);
    else
      for (size_t i = 0; i < f.size(); ++i) f[i] = num::bf16_to_f32(static_cast<const uint16_t*>(t.data)[i]);
    return up.copy(dst, f.data(), f.size() * 4);
  };
  {  // patch embedding, rows padded to patch_in_pad with zeros
    HostTensor t;
    const int K = v.patch_in(), Kp = v.patch_in_pad();
    DSV41_TRY(fetch("vision.patch_embed.proj.weight", int64_t(v.d) * K, t));
    if (t.f32) return Status(Code::mismatch, "vision.patch_embed.proj.weight: expected BF16");
    std::vector<uint16_t> pw(size_t(v.d) * Kp, 0);
    for (int r = 0; r < v.d; ++r)
      std::memcpy(&pw[size_t(r) * Kp], static_cast<const uint16_t*>(t.data) + size_t(r) * K, size_t(K) * 2);
    DSV41_TRY(up.copy(W.patch_w, pw.data(), pw.size() * 2));
  }
  DSV41_TRY(lin("vision.patch_embed.proj.bias", v.d, W.patch_b));
  for (int l = 0; l < v.layers; ++l) {
    const std::string p = "vision.blocks." + std::to_string(l) + ".";
    Block& b = W.blocks[size_t(l)];
    DSV41_TRY(nrm(p + "norm1.weight", b.norm1));
    DSV41_TRY(nrm(p + "norm2.weight", b.norm2));
    DSV41_TRY(lin(p + "attn.wqkv.weight", int64_t(3) * v.d * v.d, b.wqkv));
    DSV41_TRY(lin(p + "attn.wqkv.bias", int64_t(3) * v.d, b.bqkv));
    DSV41_TRY(lin(p + "attn.wo.weight", int64_t(v.d) * v.d, b.wo));
    DSV41_TRY(lin(p + "attn.wo.bias", v.d, b.bo));
    DSV41_TRY(lin(p + "mlp.w1.weight", int64_t(2) * v.inter * v.d, b.w1));
    DSV41_TRY(lin(p + "mlp.w2.weight", int64_t(v.d) * v.inter, b.w2));
  }
  DSV41_TRY(nrm("vision.norm.weight", W.norm));
  DSV41_TRY(lin("aligner.w1.weight", int64_t(v.out_dim) * v.merge_in(), W.al_w1));
  DSV41_TRY(lin("aligner.w1.bias", v.out_dim, W.al_b1));
  DSV41_TRY(lin("aligner.w2.weight", int64_t(v.out_dim) * v.out_dim, W.al_w2));
  DSV41_TRY(lin("aligner.w2.bias", v.out_dim, W.al_b2));
  return up.finish();
}

// Activation buffers for images of up to max_tokens patches, and the cuBLASLt handle. One image at a time
// on one stream.
struct Workspace {
  BlasLt blas;
  int max_tokens = 0;
  bf16_t *patches = nullptr;  // [n, patch_in_pad]
  bf16_t *x = nullptr;        // residual stream [n, d]
  bf16_t *h = nullptr;        // normed [n, d]
  bf16_t *qkv = nullptr;      // [n, 3d]
  bf16_t *att = nullptr;      // [n, d]
  bf16_t *tmp = nullptr;      // [n, d]
  bf16_t *gu = nullptr;       // [n, 2·inter]
  bf16_t *act = nullptr;      // [n, inter]
  bf16_t *cells = nullptr;    // [cells, d·r·r]
  bf16_t *al = nullptr;       // [cells, out]
  DeviceArena mem;

  // The most r×r cells of any grid with n_h·n_w ≤ n_tokens.
  static int max_cells(const Dims& v, int n_tokens) {
    int best = 0;
    for (int nh = 1; nh <= n_tokens; ++nh) {
      const int nw = n_tokens / nh;
      best = std::max(best, ((nh + v.ratio - 1) / v.ratio) * ((nw + v.ratio - 1) / v.ratio));
    }
    return best;
  }
  Status init(const Dims& v, int tokens) {
    DSV41_TRY(v.check());
    if (tokens <= 0) return bad_arg("vision workspace: max_tokens ≤ 0");
    if (!blas.ready()) DSV41_TRY(blas.init());
    max_tokens = tokens;
    const size_t n = size_t(tokens), c = size_t(max_cells(v, tokens));
    DSV41_TRY(mem.alloc(patches, n * v.patch_in_pad()));
    DSV41_TRY(mem.alloc(x, n * v.d));
    DSV41_TRY(mem.alloc(h, n * v.d));
    DSV41_TRY(mem.alloc(qkv, n * 3 * v.d));
    DSV41_TRY(mem.alloc(att, n * v.d));
    DSV41_TRY(mem.alloc(tmp, n * v.d));
    DSV41_TRY(mem.alloc(gu, n * 2 * v.inter));
    DSV41_TRY(mem.alloc(act, n * v.inter));
    DSV41_TRY(mem.alloc(cells, c * v.merge_in()));
    DSV41_TRY(mem.alloc(al, c * v.out_dim));
    return Status::Ok();
  }
};

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// ---- the ops ----

// x [n, d] = patch_embed(patches [n, 3·14·14]) (padded copy in ws.patches, then one GEMM with bias).
inline Status patch_embed(Workspace& ws, const Weights& W, const bf16_t* patches, int n, bf16_t* x, cudaStream_t s) {
  const Dims& v = W.dims;
  const int K = v.patch_in(), Kp = v.patch_in_pad();
  if (n > ws.max_tokens) return bad_arg("vision patch_embed: more patches than the workspace holds");
  if (n <= 0) return Status::Ok();
  vision_detail::pad_cols_kernel<<<blocks_for(int64_t(n) * Kp, 256), 256, 0, s>>>(patches, n, K, Kp, ws.patches);
  DSV41_TRY(launch_status("vision patch pad"));
  return ws.blas.linear(ws.patches, Kp, n, W.patch_w, v.d, Kp, W.patch_b, x, v.d, s);
}

// y [n, d] = RMSNorm(x) with FP32 weight w, eps 1e-6, FP32 inside, one rounding.
inline Status norm(const Dims& v, const float* w, const bf16_t* x, int n, bf16_t* y, cudaStream_t s) {
  return rmsnorm(x, v.d, w, n, v.d, v.eps, y, v.d, s);
}

// qkv [n, 3d] = h · wqkvᵀ + bqkv.
inline Status qkv(Workspace& ws, const Dims& v, const Block& b, const bf16_t* h, int n, bf16_t* out, cudaStream_t s) {
  return ws.blas.linear(h, v.d, n, b.wqkv, 3 * v.d, v.d, b.bqkv, out, 3 * v.d, s);
}

// 2-D rope on the q and k thirds of qkv [n_h·n_w, 3d], in place.
inline Status rope2d(const Dims& v, bf16_t* qkv_buf, int n_h, int n_w, cudaStream_t s) {
  const int n = n_h * n_w;
  if (n <= 0) return Status::Ok();
  const int per = v.heads * v.head_dim();  // 2 · heads · hd/2 pairs
  vision_detail::rope2d_kernel<<<unsigned(n), unsigned(std::min(per, 1024)), 0, s>>>(qkv_buf, n_w, v.heads,
                                                                                     v.head_dim(), rope_freqs(v));
  return launch_status("vision rope2d");
}

// Attention variants: 16 or 32 query rows per warp (32: head_dim ≤ 64), P as a BF16 hi/lo pair (default)
// or rounded to BF16 once.
struct AttnOpts {
  int rows_per_warp = 16;
  bool bf16_p = false;
};

namespace detail {
template <int HD, int MT, bool SPLIT>
inline Status flash(const bf16_t* qkv_buf, int n, int heads, bf16_t* out, cudaStream_t s) {
  using C = vision_detail::FlashCfg<HD, MT>;
  auto k = vision_detail::vit_flash_kernel<HD, MT, SPLIT>;
  if (C::SMEM > 48 * 1024)
    DSV41_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM),
                   "vision attention: smem attribute");
  const float scale_log2 = 1.4426950408889634f / std::sqrt(float(HD));
  dim3 grid(unsigned((n + C::BM - 1) / C::BM), unsigned(heads));
  k<<<grid, 128, C::SMEM, s>>>(qkv_buf, n, heads, scale_log2, out);
  return launch_status("vision attention");
}
template <int HD>
inline Status flash_hd(const bf16_t* qkv_buf, int n, int heads, bf16_t* out, cudaStream_t s, AttnOpts o) {
  constexpr bool two_ok = HD <= 64;
  const bool two = two_ok && o.rows_per_warp == 32;
  if (two) {
    if constexpr (two_ok)
      return o.bf16_p ? flash<HD, 2, false>(qkv_buf, n, heads, out, s) : flash<HD, 2, true>(qkv_buf, n, heads, out, s);
  }
  return o.bf16_p ? flash<HD, 1, false>(qkv_buf, n, heads, out, s) : flash<HD, 1, true>(qkv_buf, n, heads, out, s);
}
}  // namespace detail

// out [n, d] = softmax(q·kᵀ/√hd)·v per head over all n patches (no mask), from qkv [n, 3d].
inline Status attention(const Dims& v, const bf16_t* qkv_buf, int n, bf16_t* out, cudaStream_t s, AttnOpts o = {}) {
  if (n <= 0) return Status::Ok();
  if (o.rows_per_warp != 16 && o.rows_per_warp != 32) return bad_arg("vision attention: rows_per_warp 16 or 32");
  switch (v.head_dim()) {
    case 16: return detail::flash_hd<16>(qkv_buf, n, v.heads, out, s, o);
    case 32: return detail::flash_hd<32>(qkv_buf, n, v.heads, out, s, o);
    case 64: return detail::flash_hd<64>(qkv_buf, n, v.heads, out, s, o);
    case 128: return detail::flash_hd<128>(qkv_buf, n, v.heads, out, s, o);
    default: return Status(Code::unsupported, "vision attention: head_dim " + std::to_string(v.head_dim()));
  }
}

// x = bf16(x + bf16(att · woᵀ + bo)).
inline Status wo(Workspace& ws, const Dims& v, const Block& b, const bf16_t* att, int n, bf16_t* x, cudaStream_t s) {
  DSV41_TRY(ws.blas.linear(att, v.d, n, b.wo, v.d, v.d, b.bo, ws.tmp, v.d, s));
  const int64_t e = int64_t(n) * v.d;
  vision_detail::add_kernel<<<blocks_for(e, 256), 256, 0, s>>>(x, ws.tmp, e);
  return launch_status("vision residual add");
}

// x = bf16(x + w2(bf16(bf16(silu(g)) · u))) with (g, u) = halves of bf16(h · w1ᵀ).
inline Status mlp(Workspace& ws, const Dims& v, const Block& b, const bf16_t* h, int n, bf16_t* x, cudaStream_t s) {
  DSV41_TRY(ws.blas.linear(h, v.d, n, b.w1, 2 * v.inter, v.d, nullptr, ws.gu, 2 * v.inter, s));
  vision_detail::silu_mul_kernel<<<blocks_for(int64_t(n) * v.inter, 256), 256, 0, s>>>(ws.gu, n, v.inter, ws.act);
  DSV41_TRY(launch_status("vision silu·u"));
  DSV41_TRY(ws.blas.linear(ws.act, v.inter, n, b.w2, v.d, v.inter, nullptr, ws.tmp, v.d, s));
  const int64_t e = int64_t(n) * v.d;
  vision_detail::add_kernel<<<blocks_for(e, 256), 256, 0, s>>>(x, ws.tmp, e);
  return launch_status("vision residual add");
}

// y = the tower's final RMSNorm of x.
inline Status final_norm(const Weights& W, const bf16_t* x, int n, bf16_t* y, cudaStream_t s) {
  return norm(W.dims, W.norm, x, n, y, s);
}

// Cells of the r×r merge: ceil(n_h/r) · ceil(n_w/r).
inline int merged_rows(const Dims& v, int n_h, int n_w) {
  return ((n_h + v.ratio - 1) / v.ratio) * ((n_w + v.ratio - 1) / v.ratio);
}

// cells [merged_rows, d·r·r] from the tower output x [n_h·n_w, d] (F.unfold order, zero padding).
inline Status merge(const Dims& v, const bf16_t* x, int n_h, int n_w, bf16_t* cells, cudaStream_t s) {
  const int c = merged_rows(v, n_h, n_w);
  if (c <= 0) return Status::Ok();
  vision_detail::merge_kernel<<<unsigned(c), 256, 0, s>>>(x, n_h, n_w, v.d, v.ratio, cells);
  return launch_status("vision merge");
}

// out [rows, out_dim] = w2(bf16(gelu(bf16(cells · w1ᵀ + b1)))) + b2; ws.al holds the hidden rows.
inline Status aligner(Workspace& ws, const Weights& W, const bf16_t* cells, int rows, bf16_t* out, cudaStream_t s) {
  const Dims& v = W.dims;
  if (rows > Workspace::max_cells(v, ws.max_tokens)) return bad_arg("vision aligner: more rows than the workspace holds");
  DSV41_TRY(ws.blas.linear(cells, v.merge_in(), rows, W.al_w1, v.out_dim, v.merge_in(), W.al_b1, ws.al, v.out_dim, s));
  const int64_t e = int64_t(rows) * v.out_dim;
  vision_detail::gelu_kernel<<<blocks_for(e, 256), 256, 0, s>>>(ws.al, e);
  DSV41_TRY(launch_status("vision gelu"));
  return ws.blas.linear(ws.al, v.out_dim, rows, W.al_w2, v.out_dim, v.out_dim, W.al_b2, out, v.out_dim, s);
}

// ---- the chains ----

// tower_out [n_h·n_w, d] = ViT(patches [n_h·n_w, 3, 14, 14]).
inline Status tower(Workspace& ws, const Weights& W, const bf16_t* patches, int n_h, int n_w, bf16_t* tower_out,
                    cudaStream_t s, AttnOpts ao = {}) {
  const Dims& v = W.dims;
  const int n = n_h * n_w;
  if (n_h <= 0 || n_w <= 0) return bad_arg("vision tower: empty grid");
  if (n > ws.max_tokens) return bad_arg("vision tower: more patches than the workspace holds");
  DSV41_TRY(patch_embed(ws, W, patches, n, ws.x, s));
  for (const Block& b : W.blocks) {
    DSV41_TRY(norm(v, b.norm1, ws.x, n, ws.h, s));
    DSV41_TRY(qkv(ws, v, b, ws.h, n, ws.qkv, s));
    DSV41_TRY(rope2d(v, ws.qkv, n_h, n_w, s));
    DSV41_TRY(attention(v, ws.qkv, n, ws.att, s, ao));
    DSV41_TRY(wo(ws, v, b, ws.att, n, ws.x, s));
    DSV41_TRY(norm(v, b.norm2, ws.x, n, ws.h, s));
    DSV41_TRY(mlp(ws, v, b, ws.h, n, ws.x, s));
  }
  return final_norm(W, ws.x, n, tower_out, s);
}

// embeds [merged_rows, out_dim] = aligner(merge(ViT(patches))); tower_out (optional, else ws.h) keeps the ViT rows.
inline Status encode(Workspace& ws, const Weights& W, const bf16_t* patches, int n_h, int n_w, bf16_t* embeds,
                     cudaStream_t s, bf16_t* tower_out = nullptr, AttnOpts ao = {}) {
  bf16_t* t = tower_out ? tower_out : ws.h;
  DSV41_TRY(tower(ws, W, patches, n_h, n_w, t, s, ao));
  DSV41_TRY(merge(W.dims, t, n_h, n_w, ws.cells, s));
  return aligner(ws, W, ws.cells, merged_rows(W.dims, n_h, n_w), embeds, s);
}

}  // namespace dsv41::gpu::vision
