// The checkpoint's expected tensors (SPEC §2) for a shape: names, storage dtypes, stored shapes, and the
// logical parameter count of each, from which parameter accounting is derived.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>

namespace dsv41 {

enum class TensorGroup { Global, Backbone, Engram, DSpark, Vision };

struct TensorSpec {
  std::string name;
  std::string dtype;           // safetensors dtype name
  std::vector<int64_t> shape;  // as stored
  int layer = -1;              // backbone layer or DSpark layer id (L + stage); -1 for globals
  TensorGroup group = TensorGroup::Backbone;
  int64_t params = 0;          // logical parameters (FP4 counts two per byte; scales count 0)
  // Fraction of params a single token touches: experts top_k/n, Engram tables cols/rows, embeddings 1/vocab.
  double active_fraction = 1.0;
};

namespace detail {
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct SpecBuilder {
  std::vector<TensorSpec>& out;
  int layer;
  TensorGroup group;
  void add(const std::string& name, const char* dtype, std::vector<int64_t> shape, int64_t params,
           double frac = 1.0) {
    out.push_back({name, dtype, std::move(shape), layer, group, params, frac});
  }
  void fp8(const std::string& n, int64_t o, int64_t i, double frac = 1.0) {
    add(n + ".weight", "F8_E4M3", {o, i}, o * i, frac);
    add(n + ".scale", "F8_E8M0", {cdiv(o, 32), cdiv(i, 32)}, 0, frac);
  }
  void fp4(const std::string& n, int64_t o, int64_t i, double frac) {
    add(n + ".weight", "I8", {o, i / 2}, o * i, frac);
    add(n + ".scale", "F8_E8M0", {o, i / 32}, 0, frac);
  }
  void bf16(const std::string& n, std::vector<int64_t> shape, double frac = 1.0) {
    int64_t p = 1;
    for (auto d : shape) p *= d;
    add(n, "BF16", std::move(shape), p, frac);
  }
  void f32(const std::string& n, std::vector<int64_t> shape) {
    int64_t p = 1;
    for (auto d : shape) p *= d;
    add(n, "F32", std::move(shape), p);
  }
};
}  // namespace detail

inline std::vector<TensorSpec> expected_tensors(const ModelShape& s) {
  std::vector<TensorSpec> out;
  const int64_t d = s.hidden_size, H = s.num_attention_heads, D = s.head_dim, hc = s.hc_mult;
  const int64_t mix = (2 + hc) * hc, I = s.moe_intermediate_size;
  const auto sched = make_schedule(s);
  detail::SpecBuilder g{out, -1, TensorGroup::Global};
  g.bf16("embed.weight", {s.vocab_size, d}, 1.0 / s.vocab_size);
  g.bf16("head.weight", {s.vocab_size, d});
  g.bf16("norm.weight", {d});
  for (const auto& r : sched) {
    const std::string p = weight_prefix(s, r.id) + ".";
    detail::SpecBuilder b{out, r.id, r.dspark ? TensorGroup::DSpark : TensorGroup::Backbone};
    b.fp8(p + "attn.wq_a", s.q_lora_rank, d);
    b.bf16(p + "attn.q_norm.weight", {s.q_lora_rank});
    b.fp8(p + "attn.wq_b", H * D, s.q_lora_rank);
    b.fp8(p + "attn.wkv", D, d);
    b.bf16(p + "attn.kv_norm.weight", {D});
    b.fp8(p + "attn.wo_a", s.o_groups * s.o_lora_rank, H * D / s.o_groups);
    b.fp8(p + "attn.wo_b", d, s.o_groups * s.o_lora_rank);
    b.f32(p + "attn.attn_sink", {H});
    b.bf16(p + "attn_norm.weight", {d});
    b.bf16(p + "ffn_norm.weight", {d});
    for (const char* which : {"attn", "ffn"}) {
      b.f32(p + "hc_" + which + "_fn", {mix, hc * d});
      b.f32(p + "hc_" + which + "_base", {mix});
      b.f32(p + "hc_" + which + "_scale", {3});
    }
    if (r.mode == AttnMode::Full) {
      b.bf16(p + "attn.compressor.wkv.weight", {D, d});
      if (r.ratio > 1) b.bf16(p + "attn.compressor.wgate.weight", {D, d});
      b.bf16(p + "attn.compressor.norm.weight", {D});
      b.bf16(p + "attn.indexer.wk.weight", {s.index_head_dim, D});
      b.bf16(p + "attn.indexer.k_norm.weight", {s.index_head_dim});
    }
    if (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex) {
      b.fp8(p + "attn.indexer.wq_b", (int64_t)s.index_n_heads * s.index_head_dim, s.q_lora_rank);
      b.bf16(p + "attn.indexer.weights_proj.weight", {s.index_n_heads, d});
    }
    const int64_t E = r.n_experts;
    b.bf16(p + "ffn.gate.weight", {E, d});
    b.f32(p + "ffn.gate.bias", {E});
    if (s.has_vision && !r.dspark) b.f32(p + "ffn.gate.bias_vl", {E});
    const double frac = double(r.top_k) / double(E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      b.fp4(q + "w1", I, d, frac);
      b.fp4(q + "w2", d, I, frac);
      b.fp4(q + "w3", I, d, frac);
    }
    b.fp8(p + "ffn.shared_experts.w1", I, d);
    b.fp8(p + "ffn.shared_experts.w2", d, I);
    b.fp8(p + "ffn.shared_experts.w3", I, d);
    if (r.engram_slot >= 0) {
      detail::SpecBuilder e{out, r.id, TensorGroup::Engram};
      const int64_t rows = s.engram_num_embeddings[r.engram_slot], hd = s.engram_head_dim;
      const int64_t cols = s.n_engram_cols();
      e.add(p + "engram.embed.weight", "F8_E4M3", {rows, hd}, rows * hd, double(cols) / double(rows));
      e.add(p + "engram.embed.scale", "F8_E8M0", {rows, hd / 32}, 0, double(cols) / double(rows));
      b.fp8(p + "engram.wkv", d * (hc + 1), cols * hd);
      b.bf16(p + "engram.q_weight", {hc, d});
      b.bf16(p + "engram.k_weight", {hc, d});
    }
    if (r.dspark) {
      const int stage = r.id - s.num_hidden_layers;
      if (stage == 0) {
        b.fp8(p + "main_proj", d, d * (int64_t)s.dspark_target_layer_ids.size());
        b.bf16(p + "main_norm.weight", {d});
      }
      if (stage == s.n_dspark() - 1) {
        b.bf16(p + "norm.weight", {d});
        b.bf16(p + "markov_head.embed.weight", {s.vocab_size, s.dspark_markov_rank}, 1.0 / s.vocab_size);
        b.bf16(p + "markov_head.head.weight", {s.vocab_size, s.dspark_markov_rank});
        b.bf16(p + "confidence_head.proj.weight", {1, d + s.dspark_markov_rank});
      }
    }
  }
  if (s.has_vision && s.vision.num_hidden_layers > 0) {  // SPEC §4.10, all BF16
    const auto& v = s.vision;
    const int64_t dv = v.hidden_size, iv = v.intermediate_size, pin = 3 * int64_t(v.patch_size) * v.patch_size;
    const int64_t rr = int64_t(v.downsample_ratio) * v.downsample_ratio;
    detail::SpecBuilder b{out, -1, TensorGroup::Vision};
    b.bf16("vision.patch_embed.proj.weight", {dv, pin});
    b.bf16("vision.patch_embed.proj.bias", {dv});
    for (int l = 0; l < v.num_hidden_layers; ++l) {
      const std::string p = "vision.blocks." + std::to_string(l) + ".";
      b.bf16(p + "norm1.weight", {dv});
      b.bf16(p + "attn.wqkv.weight", {3 * dv, dv});
      b.bf16(p + "attn.wqkv.bias", {3 * dv});
      b.bf16(p + "attn.wo.weight", {dv, dv});
      b.bf16(p + "attn.wo.bias", {dv});
      b.bf16(p + "norm2.weight", {dv});
      b.bf16(p + "mlp.w1.weight", {2 * iv, dv});
      b.bf16(p + "mlp.w2.weight", {dv, iv});
    }
    b.bf16("vision.norm.weight", {dv});
    b.bf16("aligner.w1.weight", {d, dv * rr});
    b.bf16("aligner.w1.bias", {d});
    b.bf16("aligner.w2.weight", {d, d});
    b.bf16("aligner.w2.bias", {d});
    for (const char* n : {"image_start", "image_end", "image_newline"}) b.bf16(n, {d});
  }
  return out;
}

}  // namespace dsv41
