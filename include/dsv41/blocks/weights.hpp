// Typed views of a checkpoint's tensors, bound by name and checked against the expected list
// (names, dtypes, shapes) with every mismatch reported at once. Views point into the mapped files.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/config/tensors.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/core/unsanitized.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/parallel/partition.hpp>

namespace dsv41 {

enum class WKind { None, BF16, F32, FP8, FP4 };

// A weight matrix [out, in] in its storage format. FP8: E4M3 with UE8M0 per 32x32 block;
// FP4: packed E2M1 pairs with UE8M0 per 32 inputs of a row.
struct Linear {
  WKind kind = WKind::None;
  int out = 0, in = 0;
  const uint8_t* w = nullptr;
  const uint8_t* s = nullptr;
  explicit operator bool() const { return kind != WKind::None; }

  // Row o, dequantized to FP32 (exact: every stored value is representable). Most of a CPU decode's time
  // (core/unsanitized.hpp).
  DSV41_UNSANITIZED void row(int o, float* dst) const {
    switch (kind) {
      case WKind::BF16: {
        const uint8_t* r = w + size_t(o) * in * 2;
        for (int i = 0; i < in; ++i) {
          uint16_t b;
          std::memcpy(&b, r + 2 * i, 2);
          dst[i] = num::bf16_to_f32(b);
        }
        break;
      }
      case WKind::F32: std::memcpy(dst, w + size_t(o) * in * 4, size_t(in) * 4); break;
      case WKind::FP8: {
        const int sb = (in + 31) / 32;
        const uint8_t* r = w + size_t(o) * in;
        const uint8_t* sr = s + size_t(o / 32) * sb;
        for (int i = 0; i < in; ++i) dst[i] = num::e4m3_to_f32(r[i]) * num::ue8m0_to_f32(sr[i / 32]);
        break;
      }
      case WKind::FP4: {
        const uint8_t* r = w + size_t(o) * (in / 2);
        const uint8_t* sr = s + size_t(o) * (in / 32);
        for (int i = 0; i < in; ++i) {
          const uint8_t byte = r[i / 2];
          dst[i] = num::e2m1_to_f32((i & 1) ? (byte >> 4) : (byte & 0xF)) * num::ue8m0_to_f32(sr[i / 32]);
        }
        break;
      }
      case WKind::None: break;
    }
  }

  // Rows [first, first + n) as a view (FP8: first a multiple of the 32-row scale block).
  Linear rows(int first, int n) const {
    Linear v = *this;
    v.out = n;
    switch (kind) {
      case WKind::BF16: v.w = w + size_t(first) * in * 2; break;
      case WKind::F32: v.w = w + size_t(first) * in * 4; break;
      case WKind::FP8: v.w = w + size_t(first) * in; v.s = s + size_t(first / 32) * ((in + 31) / 32); break;
      case WKind::FP4: v.w = w + size_t(first) * (in / 2); v.s = s + size_t(first) * (in / 32); break;
      case WKind::None: break;
    }
    return v;
  }
};

struct HcWeights { std::vector<float> fn, base, scale; };

struct LayerWeights {
  // attention (tensor parallel: wq_b, attn_sink and wo_a hold a rank's heads and output groups only)
  Linear wq_a, wq_b, wkv, wo_a, wo_b;
  int head_first = 0, group_first = 0;
  std::vector<float> q_norm, kv_norm, attn_sink, attn_norm, ffn_norm;
  // compressor and indexer (by role)
  Linear c_wkv, c_wgate, i_wk, i_wq_b, i_wproj;
  std::vector<float> c_norm, i_knorm;
  // mHC
  HcWeights hc_attn, hc_ffn;
  // MoE
  Linear gate;
  std::vector<float> gate_bias, gate_bias_vl;
  std::vector<std::array<Linear, 3>> experts;  // w1, w2, w3 of experts expert_first, expert_first + 1, ...
  int expert_first = 0;                        // > 0 or fewer than all: a rank's share (parallel::Plan)
  std::array<Linear, 3> shared;
  // Engram
  const uint8_t* engram_table = nullptr;        // E4M3 [rows, head_dim]
  const uint8_t* engram_table_scale = nullptr;  // UE8M0 [rows, head_dim/32]
  int64_t engram_rows = 0;                      // rows held: engram_row_first .. + engram_rows
  int64_t engram_row_first = 0;                 // > 0 or fewer than the table's: a rank's share (parallel::Plan)
  Linear engram_wkv;
  std::vector<float> engram_qk;  // q_weight * k_weight in FP32, [hc, d]
  // DSpark stage extras
  Linear main_proj, markov_embed, markov_head, conf_proj;
  std::vector<float> main_norm, norm;
};

// SPEC §4.10 the vision tower, aligner and image-span vectors (BF16 in the checkpoint; norms and biases as FP32
// copies of their BF16 values).
struct VisionBlockWeights {
  std::vector<float> norm1, norm2, bqkv, bo;
  Linear wqkv, wo, w1, w2;  // [3dv, dv], [dv, dv], [2·inter, dv] (gate rows then up rows), [dv, inter]
};
struct VisionWeights {
  Linear patch;             // [dv, 3·p·p]
  std::vector<float> patch_b, norm;
  std::vector<VisionBlockWeights> blocks;
  Linear al_w1, al_w2;      // [d, dv·r·r], [d, d]
  std::vector<float> al_b1, al_b2;
  std::vector<float> image_start, image_end, image_newline;  // [d]
  explicit operator bool() const { return bool(patch); }
};

struct Weights {
  Linear embed, head;  // head: vocabulary rows head_first .. head_first + head.out
  int head_first = 0;
  std::vector<float> norm;
  std::vector<LayerWeights> layers;  // backbone then DSpark stages
  VisionWeights vision;              // empty without a vision_config
};

namespace detail {

inline std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  r += ']';
  return r;
}

}  // namespace detail

// Every expected tensor present with its dtype and shape; returns all problems in one message.
inline Status check_checkpoint(const st::Checkpoint& ck, const ModelShape& s, int* n_checked = nullptr) {
  std::string errs;
  int bad = 0, n = 0;
  for (const auto& t : expected_tensors(s)) {
    ++n;
    auto v = ck.get(t.name);
    if (!v.ok()) {
      if (++bad <= 50) errs += "  missing " + t.name + " (" + t.dtype + " " + detail::shape_str(t.shape) + ")\n";
      continue;
    }
    const std::string dt = st::dtype_name(v->dtype);
    if (dt != t.dtype || v->shape != t.shape) {
      if (++bad <= 50)
        errs += "  " + t.name + ": " + dt + " " + detail::shape_str(v->shape) + ", expected " + t.dtype + " " +
                detail::shape_str(t.shape) + "\n";
    }
  }
  if (n_checked) *n_checked = n;
  if (bad == 0) return Status::Ok();
  if (bad > 50) errs += "  ... and " + std::to_string(bad - 50) + " more\n";
  return error(Code::mismatch, "checkpoint does not match the configuration (" + std::to_string(bad) +
                                   " problems):\n" + errs);
}

namespace detail {

struct Binder {
  const st::Checkpoint& ck;
  std::string errs;

  const uint8_t* raw(const std::string& name) {
    auto v = ck.get(name);
    if (!v.ok()) { errs += "  " + v.status().message() + "\n"; return nullptr; }
    return reinterpret_cast<const uint8_t*>(v->data);
  }
  std::vector<float> vec(const std::string& name) {
    std::vector<float> out;
    auto v = ck.get(name);
    if (!v.ok()) { errs += "  " + v.status().message() + "\n"; return out; }
    const auto* p = reinterpret_cast<const uint8_t*>(v->data);
    const int64_t n = v->numel();
    out.resize(size_t(n));
    if (v->dtype == st::DType::F32) std::memcpy(out.data(), p, size_t(n) * 4);
    else if (v->dtype == st::DType::BF16)
      for (int64_t i = 0; i < n; ++i) { uint16_t b; std::memcpy(&b, p + 2 * i, 2); out[i] = num::bf16_to_f32(b); }
    else errs += "  " + name + ": expected BF16 or F32\n";
    return out;
  }
  Linear lin(const std::string& name, WKind kind, int out, int in) {
    Linear l;
    l.kind = kind;
    l.out = out;
    l.in = in;
    l.w = raw(name + ".weight");
    if (kind == WKind::FP8 || kind == WKind::FP4) l.s = raw(name + ".scale");
    return l;
  }
};

}  // namespace detail

// Binds views after check_checkpoint passed. `ck` must outlive the returned Weights. plan: bind only what its rank
// holds (its routed experts, its head rows); null: everything.
inline Result<Weights> bind_weights(const st::Checkpoint& ck, const ModelShape& s, const parallel::Plan* plan = nullptr) {
  DSV41_TRY(check_checkpoint(ck, s));
  detail::Binder b{ck, {}};
  Weights w;
  const int d = s.hidden_size, H = s.num_attention_heads, D = s.head_dim, I = s.moe_intermediate_size;
  w.embed = b.lin("embed", WKind::BF16, s.vocab_size, d);
  w.head = b.lin("head", WKind::BF16, s.vocab_size, d);
  if (plan && w.head.w && plan->vocab.size() != s.vocab_size) {  // a view of the rank's rows
    w.head_first = plan->vocab.begin;
    w.head = w.head.rows(plan->vocab.begin, plan->vocab.size());
  }
  const bool split_heads = plan && plan->heads.size() != H;
  if (split_heads && (D % 32 || s.o_lora_rank % 32))
    return error(Code::unsupported, "parallel: heads split only where head_dim and o_lora_rank are multiples of 32");
  w.norm = b.vec("norm.weight");
  for (const auto& r : make_schedule(s)) {
    const std::string p = weight_prefix(s, r.id) + ".";
    LayerWeights L;
    L.wq_a = b.lin(p + "attn.wq_a", WKind::FP8, s.q_lora_rank, d);
    L.wq_b = b.lin(p + "attn.wq_b", WKind::FP8, H * D, s.q_lora_rank);
    L.wkv = b.lin(p + "attn.wkv", WKind::FP8, D, d);
    L.wo_a = b.lin(p + "attn.wo_a", WKind::FP8, s.o_groups * s.o_lora_rank, H * D / s.o_groups);
    L.wo_b = b.lin(p + "attn.wo_b", WKind::FP8, d, s.o_groups * s.o_lora_rank);
    L.q_norm = b.vec(p + "attn.q_norm.weight");
    L.kv_norm = b.vec(p + "attn.kv_norm.weight");
    L.attn_sink = b.vec(p + "attn.attn_sink");
    if (split_heads && L.wq_b.w && L.wo_a.w && L.attn_sink.size() == size_t(H)) {  // the rank's heads and groups
      const parallel::Range h = plan->heads, g = plan->groups;
      L.head_first = h.begin;
      L.group_first = g.begin;
      L.wq_b = L.wq_b.rows(h.begin * D, h.size() * D);
      L.wo_a = L.wo_a.rows(g.begin * s.o_lora_rank, g.size() * s.o_lora_rank);
      L.attn_sink = std::vector<float>(L.attn_sink.begin() + h.begin, L.attn_sink.begin() + h.end);
    }
    L.attn_norm = b.vec(p + "attn_norm.weight");
    L.ffn_norm = b.vec(p + "ffn_norm.weight");
    L.hc_attn = {b.vec(p + "hc_attn_fn"), b.vec(p + "hc_attn_base"), b.vec(p + "hc_attn_scale")};
    L.hc_ffn = {b.vec(p + "hc_ffn_fn"), b.vec(p + "hc_ffn_base"), b.vec(p + "hc_ffn_scale")};
    if (r.mode == AttnMode::Full) {
      L.c_wkv = b.lin(p + "attn.compressor.wkv", WKind::BF16, D, d);
      if (r.ratio > 1) L.c_wgate = b.lin(p + "attn.compressor.wgate", WKind::BF16, D, d);
      L.c_norm = b.vec(p + "attn.compressor.norm.weight");
      L.i_wk = b.lin(p + "attn.indexer.wk", WKind::BF16, s.index_head_dim, D);
      L.i_knorm = b.vec(p + "attn.indexer.k_norm.weight");
    }
    if (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex) {
      L.i_wq_b = b.lin(p + "attn.indexer.wq_b", WKind::FP8, s.index_n_heads * s.index_head_dim, s.q_lora_rank);
      L.i_wproj = b.lin(p + "attn.indexer.weights_proj", WKind::BF16, s.index_n_heads, d);
    }
    L.gate = b.lin(p + "ffn.gate", WKind::BF16, r.n_experts, d);
    L.gate_bias = b.vec(p + "ffn.gate.bias");
    if (s.has_vision && !r.dspark) L.gate_bias_vl = b.vec(p + "ffn.gate.bias_vl");
    const parallel::Range held = plan ? plan->experts_of(r) : parallel::Range{0, r.n_experts};
    L.expert_first = held.begin;
    for (int e = held.begin; e < held.end; ++e) {
      const std::string q = p + "ffn.experts." + std::to_string(e) + ".";
      L.experts.push_back({b.lin(q + "w1", WKind::FP4, I, d), b.lin(q + "w2", WKind::FP4, d, I),
                           b.lin(q + "w3", WKind::FP4, I, d)});
    }
    L.shared = {b.lin(p + "ffn.shared_experts.w1", WKind::FP8, I, d), b.lin(p + "ffn.shared_experts.w2", WKind::FP8, d, I),
                b.lin(p + "ffn.shared_experts.w3", WKind::FP8, I, d)};
    if (r.engram_slot >= 0) {
      L.engram_table = b.raw(p + "engram.embed.weight");
      L.engram_table_scale = b.raw(p + "engram.embed.scale");
      const parallel::Range64 rows =
          plan ? plan->engram_rows(s.engram_num_embeddings[r.engram_slot]) : parallel::Range64{0, s.engram_num_embeddings[r.engram_slot]};
      L.engram_row_first = rows.begin;
      L.engram_rows = rows.size();
      if (L.engram_table) L.engram_table += size_t(rows.begin) * s.engram_head_dim;
      if (L.engram_table_scale) L.engram_table_scale += size_t(rows.begin) * (s.engram_head_dim / 32);
      L.engram_wkv = b.lin(p + "engram.wkv", WKind::FP8, d * (s.hc_mult + 1), s.n_engram_cols() * s.engram_head_dim);
      auto q = b.vec(p + "engram.q_weight"), k = b.vec(p + "engram.k_weight");
      L.engram_qk.resize(q.size());
      for (size_t i = 0; i < q.size() && i < k.size(); ++i) L.engram_qk[i] = q[i] * k[i];
    }
    if (r.dspark) {
      const int stage = r.id - s.num_hidden_layers;
      if (stage == 0) {
        L.main_proj = b.lin(p + "main_proj", WKind::FP8, d, d * int(s.dspark_target_layer_ids.size()));
        L.main_norm = b.vec(p + "main_norm.weight");
      }
      if (stage == s.n_dspark() - 1) {
        L.norm = b.vec(p + "norm.weight");
        L.markov_embed = b.lin(p + "markov_head.embed", WKind::BF16, s.vocab_size, s.dspark_markov_rank);
        L.markov_head = b.lin(p + "markov_head.head", WKind::BF16, s.vocab_size, s.dspark_markov_rank);
        L.conf_proj = b.lin(p + "confidence_head.proj", WKind::BF16, 1, d + s.dspark_markov_rank);
      }
    }
    w.layers.push_back(std::move(L));
  }
  if (s.has_vision && s.vision.num_hidden_layers > 0) {
    const auto& v = s.vision;
    const int dv = v.hidden_size, iv = v.intermediate_size, rr = v.downsample_ratio * v.downsample_ratio;
    VisionWeights& V = w.vision;
    V.patch = b.lin("vision.patch_embed.proj", WKind::BF16, dv, 3 * v.patch_size * v.patch_size);
    V.patch_b = b.vec("vision.patch_embed.proj.bias");
    for (int l = 0; l < v.num_hidden_layers; ++l) {
      const std::string p = "vision.blocks." + std::to_string(l) + ".";
      VisionBlockWeights B;
      B.norm1 = b.vec(p + "norm1.weight");
      B.norm2 = b.vec(p + "norm2.weight");
      B.wqkv = b.lin(p + "attn.wqkv", WKind::BF16, 3 * dv, dv);
      B.bqkv = b.vec(p + "attn.wqkv.bias");
      B.wo = b.lin(p + "attn.wo", WKind::BF16, dv, dv);
      B.bo = b.vec(p + "attn.wo.bias");
      B.w1 = b.lin(p + "mlp.w1", WKind::BF16, 2 * iv, dv);
      B.w2 = b.lin(p + "mlp.w2", WKind::BF16, dv, iv);
      V.blocks.push_back(std::move(B));
    }
    V.norm = b.vec("vision.norm.weight");
    V.al_w1 = b.lin("aligner.w1", WKind::BF16, d, dv * rr);
    V.al_b1 = b.vec("aligner.w1.bias");
    V.al_w2 = b.lin("aligner.w2", WKind::BF16, d, d);
    V.al_b2 = b.vec("aligner.w2.bias");
    V.image_start = b.vec("image_start");
    V.image_end = b.vec("image_end");
    V.image_newline = b.vec("image_newline");
  }
  if (!b.errs.empty()) return error(Code::format_error, "binding weights:\n" + b.errs);
  return w;
}

}  // namespace dsv41
