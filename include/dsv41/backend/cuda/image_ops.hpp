// SPEC §4.10 images in the CUDA model: the vision weights' upload from the bound host weights (the released
// names, gpu::vision::upload_weights), one image's device buffers for the ops blocks/vision.hpp lists
// (gpu::Ops runs them over gpu::vision's ops, in the order blocks::vision_encode writes), and the table that
// puts a forward's image spans into its embeddings (kernels/vision.cuh span_rows_kernel). The CPU's
// cpu/vision_ops.hpp is the statement of the math.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/vision_ops.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

// The model's vision weights on the device; empty (loaded false) without vision weights.
struct VisionModel {
  vision::Weights w;
  const bf16_t* vecs = nullptr;  // [3, d]: image_start, image_newline, image_end
  bool loaded = false;
};

// One image's device buffers: the vision workspace (cuBLASLt handle and activations) and the patches, the
// tower's output and the aligner's rows.
struct VisionWork {
  std::unique_ptr<vision::Workspace> ws;
  DeviceArena mem;
  int n = 0, nh = 0, nw = 0, cells = 0;  // patches, patch grid, token rows (n_llm_h·n_llm_w)
  bf16_t *patches = nullptr, *tower = nullptr, *embeds = nullptr;  // [n, 3·p·p], [n, dv], [cells, d]
};

namespace detail {

inline std::vector<uint16_t> bf16_bits_of(std::span<const float> v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = num::bf16_bits(v[i]);
  return b;
}

}  // namespace detail

// Uploads hv (bound by bind_weights: BF16 matrices in the checkpoint's mapping, norms and biases as FP32 copies
// of their BF16 values) through gpu::vision::upload_weights, and the three image_* vectors as BF16. Without
// vision weights it uploads nothing.
inline Status upload_vision(const ModelShape& s, const VisionWeights& hv, Uploader& up, VisionModel& out) {
  if (!s.has_vision || s.vision.num_hidden_layers <= 0 || !hv) return Status::Ok();
  const vision::Dims dims = vision::dims_from(s);
  std::deque<std::vector<uint16_t>> held;  // BF16 copies of FP32 vectors, alive until uploaded
  auto mat = [](const Linear& l) -> Result<vision::HostTensor> {
    if (l.kind != WKind::BF16 || !l.w) return Status(Code::mismatch, "vision weight: expected a BF16 matrix");
    return vision::HostTensor{l.w, int64_t(l.out) * l.in, false};
  };
  auto f32 = [](const std::vector<float>& v) { return vision::HostTensor{v.data(), int64_t(v.size()), true}; };
  auto bf = [&](const std::vector<float>& v) {
    held.push_back(detail::bf16_bits_of(v));
    return vision::HostTensor{held.back().data(), int64_t(v.size()), false};
  };
  const vision::TensorSource src = [&](const std::string& name) -> Result<vision::HostTensor> {
    if (name == "vision.patch_embed.proj.weight") return mat(hv.patch);
    if (name == "vision.patch_embed.proj.bias") return bf(hv.patch_b);
    if (name == "vision.norm.weight") return f32(hv.norm);
    if (name == "aligner.w1.weight") return mat(hv.al_w1);
    if (name == "aligner.w1.bias") return bf(hv.al_b1);
    if (name == "aligner.w2.weight") return mat(hv.al_w2);
    if (name == "aligner.w2.bias") return bf(hv.al_b2);
    const std::string pre = "vision.blocks.";
    if (name.rfind(pre, 0) == 0) {
      size_t dot = pre.size(), l = 0;
      while (dot < name.size() && name[dot] >= '0' && name[dot] <= '9') l = l * 10 + size_t(name[dot++] - '0');
      if (dot > pre.size() && dot < name.size() && l < hv.blocks.size()) {
        const VisionBlockWeights& B = hv.blocks[l];
        const std::string rest = name.substr(dot + 1);
        if (rest == "norm1.weight") return f32(B.norm1);
        if (rest == "norm2.weight") return f32(B.norm2);
        if (rest == "attn.wqkv.weight") return mat(B.wqkv);
        if (rest == "attn.wqkv.bias") return bf(B.bqkv);
        if (rest == "attn.wo.weight") return mat(B.wo);
        if (rest == "attn.wo.bias") return bf(B.bo);
        if (rest == "mlp.w1.weight") return mat(B.w1);
        if (rest == "mlp.w2.weight") return mat(B.w2);
      }
    }
    return Status(Code::mismatch, "vision weight " + name + ": not bound");
  };
  DSV41_TRY(vision::upload_weights(dims, src, up, out.w));
  const size_t d = size_t(s.hidden_size);
  for (const auto* v : {&hv.image_start, &hv.image_newline, &hv.image_end})
    if (v->size() != d) return Status(Code::mismatch, "image_start/image_newline/image_end: expected [d]");
  std::vector<uint16_t> vecs(3 * d);
  int k = 0;
  for (const auto* v : {&hv.image_start, &hv.image_newline, &hv.image_end}) {
    const auto b = detail::bf16_bits_of(*v);
    std::memcpy(vecs.data() + size_t(k++) * d, b.data(), d * 2);
  }
  bf16_t* dv = nullptr;
  DSV41_TRY(out.w.mem.alloc(dv, vecs.size()));
  DSV41_TRY(up.copy(dv, vecs.data(), vecs.size() * 2));
  out.vecs = dv;
  DSV41_TRY(up.finish());
  out.loaded = true;
  return Status::Ok();
}

// Buffers for one image (checked by check_image_input).
inline Result<VisionWork> vision_work_for(const VisionModel& vm, const ImageInput& in) {
  if (!vm.loaded) return error(Code::unsupported, "encode_image: this model has no vision weights");
  const vision::Dims& v = vm.w.dims;
  VisionWork w;
  w.nh = in.n_vit_h;
  w.nw = in.n_vit_w;
  w.n = w.nh * w.nw;
  w.cells = vision::merged_rows(v, w.nh, w.nw);
  if (w.cells != in.n_llm_h * in.n_llm_w) return error(Code::invalid_argument, "encode_image: token grid");
  w.ws = std::make_unique<vision::Workspace>();
  DSV41_TRY(w.ws->init(v, w.n));
  DSV41_TRY(w.mem.alloc(w.patches, size_t(w.n) * v.patch_in()));
  DSV41_TRY(w.mem.alloc(w.tower, size_t(w.n) * v.d));
  DSV41_TRY(w.mem.alloc(w.embeds, size_t(w.cells) * v.out_dim));
  return Result<VisionWork>(std::move(w));
}

// The tower's rows and the aligner's to the caller (BF16 values in FP32); synchronizes the stream.
inline Status read_vision(const VisionModel& vm, const VisionWork& w, cudaStream_t s, VisionResult& out) {
  const vision::Dims& v = vm.w.dims;
  std::vector<uint16_t> t(size_t(w.n) * v.d), e(size_t(w.cells) * v.out_dim);
  DSV41_CUDA_TRY(cudaMemcpyAsync(t.data(), w.tower, t.size() * 2, cudaMemcpyDeviceToHost, s), "vision read");
  DSV41_CUDA_TRY(cudaMemcpyAsync(e.data(), w.embeds, e.size() * 2, cudaMemcpyDeviceToHost, s), "vision read");
  DSV41_CUDA_TRY(cudaStreamSynchronize(s), "vision read");
  out.tower.resize(t.size());
  out.embeds.resize(e.size());
  for (size_t i = 0; i < t.size(); ++i) out.tower[i] = num::bf16_to_f32(t[i]);
  for (size_t i = 0; i < e.size(); ++i) out.embeds[i] = num::bf16_to_f32(e[i]);
  return Status::Ok();
}

// What span_rows_kernel reads, as one host buffer: rows int32 [R] (the row within the forward), src int32 [R]
// (an IMAGE slot's embedding row, or −1 START, −2 NEWLINE, −3 END), then the spans' IMAGE rows, BF16 [n, d],
// in the order the slots take them. Spans were checked (check_image_spans); p0: the forward's first position.
struct SpanTable {
  std::vector<uint8_t> bytes;
  int R = 0;
  size_t src_off = 0, embeds_off = 0;
};

inline SpanTable span_table(const ModelShape& s, std::span<const ImageSpan> spans, int64_t p0) {
  const size_t d = size_t(s.hidden_size);
  SpanTable t;
  size_t n_img = 0;
  for (const ImageSpan& sp : spans) {
    t.R += int(sp.types.size());
    n_img += sp.embeds.size() / d;
  }
  t.src_off = (size_t(t.R) * 4 + 15) / 16 * 16;
  t.embeds_off = t.src_off + (size_t(t.R) * 4 + 15) / 16 * 16;
  t.bytes.assign(t.embeds_off + n_img * d * 2, 0);
  auto* rows = reinterpret_cast<int32_t*>(t.bytes.data());
  auto* src = reinterpret_cast<int32_t*>(t.bytes.data() + t.src_off);
  auto* emb = reinterpret_cast<uint16_t*>(t.bytes.data() + t.embeds_off);
  int j = 0;
  int32_t img = 0;
  for (const ImageSpan& sp : spans) {
    for (size_t i = 0; i < sp.types.size(); ++i, ++j) {
      rows[j] = int32_t(sp.start - p0 + int64_t(i));
      switch (sp.types[i]) {
        case ImageSpan::kStart: src[j] = -1; break;
        case ImageSpan::kNewline: src[j] = -2; break;
        case ImageSpan::kEnd: src[j] = -3; break;
        default: src[j] = img++; break;
      }
    }
    for (size_t i = 0; i < sp.embeds.size(); ++i) *emb++ = num::bf16_bits(sp.embeds[i]);
  }
  return t;
}

}  // namespace dsv41::gpu
