// SPEC §4.10 the vision encoder, written once over a backend's vision ops: ViT (patch-14 linear, blocks of
// RMSNorm + bidirectional attention with 2-D rope + SwiGLU MLP, final RMSNorm), the r×r merge and the 2-layer
// GELU aligner; and what a forward takes to put an image's rows into the token embeddings (ImageSpan).
//
// The vision ops a backend supplies (each a Status on its own memory; BF16 values, FP32 inside each op):
//   vision_work(in)              buffers for one image (VisionWork: rows = n_vit_h·n_vit_w)
//   patch_embed(w, in)           x = bf16(patches · Wᵀ + b)
//   vision_norm(l, k, w)         h = bf16(norm{k}(x)), block l, k = 1 or 2 (RMSNorm eps 1e-6, FP32 weights)
//   vision_qkv(l, w)             qkv = bf16(h · Wqkvᵀ + b)
//   vision_rope2d(w)             q, k of every head: halves (x1, x2) → bf16(x1·cos − x2·sin, x2·cos + x1·sin)
//   vision_attention(w)          o = bf16(Σ exp(s − m)·v / Σ exp(s − m)), s = q·k/√hd, all patches, FP32 inside
//   vision_wo(l, w)              x = bf16(x + bf16(o · Woᵀ + b))
//   vision_mlp(l, w)             x = bf16(x + bf16(bf16(bf16(silu(g))·u) · W2ᵀ)), (g, u) = halves of bf16(h · W1ᵀ)
//   vision_final_norm(w)         tower = bf16(norm(x))
//   vision_merge(w)              cells = unfold(zero-pad(tower as [n_h, n_w, dv]), r): [n_llm_h·n_llm_w, dv·r·r]
//   vision_aligner(w)            embeds = bf16(bf16(gelu(bf16(cells · W1ᵀ + b1))) · W2ᵀ + b2)
//   vision_read(w, out)          the tower and the embeds, to the caller
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41 {

// One image as the ViT consumes it (vision::ProcessedImage's fields): BF16 bits of the patches
// [n_vit_h·n_vit_w][3][p][p] in row-major grid order, the patch grid and the aligner's token grid.
struct ImageInput {
  std::span<const uint16_t> patches;
  int n_vit_h = 0, n_vit_w = 0;
  int n_llm_h = 0, n_llm_w = 0;
};

// What the encoder gives: tower [n_vit_h·n_vit_w, dv] and embeds [n_llm_h·n_llm_w, d], BF16 values in FP32.
struct VisionResult {
  std::vector<float> tower, embeds;
};

// An image span in a forward's ids: at sequence position `start`, `types` (one per span position: 0 START,
// 1 IMAGE, 2 NEWLINE, 3 END; vision::ProcessedImage::span_types()) and the rows of its IMAGE slots in reading
// order, `embeds` [n_image, d] (VisionResult::embeds). Every span position's id must be image_token_id.
struct ImageSpan {
  static constexpr int8_t kStart = 0, kImage = 1, kNewline = 2, kEnd = 3;
  int64_t start = 0;
  std::span<const int8_t> types;
  std::span<const float> embeds;
};

// The checks of an image input against the shape.
inline Status check_image_input(const ModelShape& s, const ImageInput& in) {
  if (!s.has_vision || s.vision.num_hidden_layers <= 0)
    return error(Code::unsupported, "encode_image: this model has no vision tower");
  const auto& v = s.vision;
  const int r = v.downsample_ratio;
  if (in.n_vit_h <= 0 || in.n_vit_w <= 0) return error(Code::invalid_argument, "encode_image: empty patch grid");
  if (in.patches.size() != size_t(in.n_vit_h) * in.n_vit_w * 3 * v.patch_size * v.patch_size)
    return error(Code::invalid_argument, "encode_image: " + std::to_string(in.patches.size()) +
                                             " patch values for a " + std::to_string(in.n_vit_h) + "x" +
                                             std::to_string(in.n_vit_w) + " grid");
  if (in.n_llm_h != (in.n_vit_h + r - 1) / r || in.n_llm_w != (in.n_vit_w + r - 1) / r)
    return error(Code::invalid_argument, "encode_image: the token grid is not the patch grid merged by " +
                                             std::to_string(r) + "x" + std::to_string(r));
  return Status::Ok();
}

// The checks of a forward's image spans: each inside the rows [p0, p0 + ids.size()), well formed, its positions
// carrying image_token_id, as many embedding rows as IMAGE slots; spans do not overlap.
inline Status check_image_spans(const ModelShape& s, std::span<const int32_t> ids, int64_t p0,
                                std::span<const ImageSpan> spans) {
  if (spans.empty()) return Status::Ok();
  if (!s.has_vision) return error(Code::unsupported, "forward: this model takes no images");
  const int64_t end = p0 + int64_t(ids.size());
  int64_t last_end = -1;
  for (size_t k = 0; k < spans.size(); ++k) {
    const ImageSpan& sp = spans[k];
    const std::string w = "forward: image " + std::to_string(k) + ": ";
    const int64_t n = int64_t(sp.types.size());
    if (n < 2 || sp.types.front() != ImageSpan::kStart || sp.types.back() != ImageSpan::kEnd)
      return error(Code::invalid_argument, w + "a span runs from START to END");
    if (sp.start < p0 || sp.start + n > end)
      return error(Code::invalid_argument, w + "span at " + std::to_string(sp.start) + ".." +
                                               std::to_string(sp.start + n - 1) + " outside the rows " +
                                               std::to_string(p0) + ".." + std::to_string(end - 1));
    if (sp.start < last_end) return error(Code::invalid_argument, w + "spans overlap or are out of order");
    last_end = sp.start + n;
    int64_t images = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int8_t t = sp.types[size_t(i)];
      if (t < ImageSpan::kStart || t > ImageSpan::kEnd || ((i == 0 || i == n - 1) != (t == 0 || t == 3)))
        return error(Code::invalid_argument, w + "bad token type at span offset " + std::to_string(i));
      if (ids[size_t(sp.start - p0 + i)] != s.image_token_id)
        return error(Code::invalid_argument, w + "position " + std::to_string(sp.start + i) +
                                                 " does not carry image_token_id");
      images += t == ImageSpan::kImage;
    }
    if (int64_t(sp.embeds.size()) != images * s.hidden_size)
      return error(Code::invalid_argument, w + std::to_string(images) + " IMAGE slots but " +
                                               std::to_string(sp.embeds.size() / size_t(s.hidden_size)) +
                                               " embedding rows");
  }
  return Status::Ok();
}

namespace blocks {

// The ViT, the merge and the aligner on one image.
template <class Ops>
Status vision_encode(const Ops& ops, const ImageInput& in, VisionResult& out) {
  DSV41_TRY(check_image_input(ops.shape(), in));
  auto w = ops.vision_work(in);
  if (!w.ok()) return w.status();
  DSV41_TRY(ops.patch_embed(*w, in));
  for (int l = 0; l < ops.shape().vision.num_hidden_layers; ++l) {
    DSV41_TRY(ops.vision_norm(l, 1, *w));
    DSV41_TRY(ops.vision_qkv(l, *w));
    DSV41_TRY(ops.vision_rope2d(*w));
    DSV41_TRY(ops.vision_attention(*w));
    DSV41_TRY(ops.vision_wo(l, *w));
    DSV41_TRY(ops.vision_norm(l, 2, *w));
    DSV41_TRY(ops.vision_mlp(l, *w));
  }
  DSV41_TRY(ops.vision_final_norm(*w));
  DSV41_TRY(ops.vision_merge(*w));
  DSV41_TRY(ops.vision_aligner(*w));
  return ops.vision_read(*w, out);
}

}  // namespace blocks
}  // namespace dsv41
