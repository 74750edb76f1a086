// Reads the released config.json schema (text_config, quantization_config, vision_config) into a
// ModelShape and checks it for internal consistency. Host-only (nlohmann-json).
#pragma once
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/core/read_file.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41 {

namespace detail {

// Collects every problem instead of stopping at the first.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  template <class T>
  void req(const char* key, T& out) { get(key, out, true); }
  template <class T>
  void opt(const char* key, T& out) { get(key, out, false); }
  bool has(const char* key) const { return obj_.is_object() && obj_.contains(key) && !obj_[key].is_null(); }
  std::string errors;

 private:
  template <class T>
  void get(const char* key, T& out, bool required) {
    if (!obj_.is_object() || !obj_.contains(key) || obj_[key].is_null()) {
      if (required) errors += "  " + where_ + "." + key + ": missing\n";
      return;
    }
    const auto& v = obj_[key];
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!v.is_boolean()) throw std::runtime_error("expected a boolean");
        out = v.get<bool>();
      } else if constexpr (std::is_integral_v<T>) {
        if (!v.is_number_integer()) throw std::runtime_error("expected an integer");
        out = v.get<T>();
      } else if constexpr (std::is_floating_point_v<T>) {
        if (!v.is_number()) throw std::runtime_error("expected a number");
        out = v.get<T>();
      } else if constexpr (std::is_same_v<T, std::string>) {
        if (!v.is_string()) throw std::runtime_error("expected a string");
        out = v.get<std::string>();
      } else {  // std::vector<int> / std::vector<int64_t>
        if (!v.is_array()) throw std::runtime_error("expected an array of integers");
        T tmp;
        for (const auto& e : v) {
          if (!e.is_number_integer()) throw std::runtime_error("expected an array of integers");
          tmp.push_back(e.get<typename T::value_type>());
        }
        out = std::move(tmp);
      }
    } catch (const std::exception& e) {
      errors += "  " + where_ + "." + key + ": " + e.what() + "\n";
    }
  }
  const nlohmann::json& obj_;
  std::string where_;
};

inline bool contains(const std::vector<int>& v, int x) {
  for (int e : v) if (e == x) return true;
  return false;
}

}  // namespace detail

// Checks the relations between fields that the model relies on. Returns every violation at once.
inline Status validate_shape(const ModelShape& s) {
  std::string e;
  auto need = [&](bool ok, const std::string& msg) { if (!ok) e += "  " + msg + "\n"; };
  need(s.vocab_size > 0, "vocab_size must be positive");
  need(s.hidden_size > 0 && s.hidden_size % 32 == 0, "hidden_size must be a positive multiple of 32");
  need(s.num_hidden_layers > 0, "num_hidden_layers must be positive");
  need(s.num_attention_heads > 0, "num_attention_heads must be positive");
  need(s.num_key_value_heads == 1, "num_key_value_heads must be 1 (one shared latent KV)");
  need(s.head_dim > 0 && s.head_dim % 32 == 0, "head_dim must be a positive multiple of 32");
  need(s.qk_rope_head_dim > 0 && s.qk_rope_head_dim % 2 == 0 && s.qk_rope_head_dim <= s.head_dim,
       "qk_rope_head_dim must be even and at most head_dim");
  need(s.q_lora_rank > 0 && s.q_lora_rank % 32 == 0, "q_lora_rank must be a positive multiple of 32");
  need(s.o_groups > 0 && s.num_attention_heads % std::max(s.o_groups, 1) == 0,
       "o_groups must divide num_attention_heads");
  need(s.o_lora_rank > 0 && s.o_lora_rank % 32 == 0, "o_lora_rank must be a positive multiple of 32");
  need(s.moe_intermediate_size > 0 && s.moe_intermediate_size % 32 == 0,
       "moe_intermediate_size must be a positive multiple of 32");
  need(s.n_routed_experts > 0, "n_routed_experts must be positive");
  need(s.num_experts_per_tok > 0 && s.num_experts_per_tok <= s.n_routed_experts,
       "num_experts_per_tok must be in 1..n_routed_experts");
  need(s.n_shared_experts == 1, "n_shared_experts must be 1");
  need(s.scoring_func == "sqrtsoftplus", "scoring_func '" + s.scoring_func + "' is not supported (sqrtsoftplus)");
  need(s.topk_method == "noaux_tc", "topk_method '" + s.topk_method + "' is not supported (noaux_tc)");
  need(s.sliding_window > 0, "sliding_window must be positive");
  need(s.hc_mult > 0, "hc_mult must be positive");
  need(s.hc_sinkhorn_iters > 0, "hc_sinkhorn_iters must be positive");
  need(s.weight_block_size == 32, "quantization_config.weight_block_size must be [32, 32]");
  need(s.scale_fmt == "ue8m0", "quantization_config.scale_fmt must be ue8m0");
  need(s.expert_dtype == "fp4", "quantization_config.expert_dtype must be fp4");
  if (s.has_vision) {  // SPEC §4.10: heads split the ViT width; each head's halves carry an even 2-D rope
    const auto& v = s.vision;
    need(v.hidden_size > 0 && v.num_attention_heads > 0 && v.hidden_size % v.num_attention_heads == 0 &&
             (v.hidden_size / v.num_attention_heads) % 4 == 0,
         "vision_config: num_attention_heads must divide hidden_size into heads of a multiple of 4");
    need(v.intermediate_size > 0 && v.patch_size > 0 && v.downsample_ratio > 0 && v.rope_theta > 0,
         "vision_config: intermediate_size, patch_size, downsample_ratio and rope_theta must be positive");
    need(s.image_token_id >= 0 && s.image_token_id < s.vocab_size, "image_token_id must be a token of the vocabulary");
  }
  const int L = s.num_hidden_layers;
  need((int)s.compress_ratios.size() == L + s.num_nextn_predict_layers,
       "compress_ratios has " + std::to_string(s.compress_ratios.size()) + " entries, expected num_hidden_layers + "
       "num_nextn_predict_layers = " + std::to_string(L + s.num_nextn_predict_layers));
  for (size_t i = 0; i < s.compress_ratios.size(); ++i) {
    int r = s.compress_ratios[i];
    need(r >= 0, "compress_ratios[" + std::to_string(i) + "] is negative");
    if ((int)i >= L) need(r == 0, "DSpark stage " + std::to_string(i - L) + " must be window-only (ratio 0)");
  }
  auto ratio = [&](int l) { return (l >= 0 && l < (int)s.compress_ratios.size()) ? s.compress_ratios[l] : -1; };
  for (int l : s.kv_source_layer_ids)
    need(l >= 0 && l < L && ratio(l) > 0, "kv_source_layer_ids: layer " + std::to_string(l) + " is not a compressed backbone layer");
  for (int l : s.index_source_layer_ids)
    need(l >= 0 && l < L && ratio(l) > 0, "index_source_layer_ids: layer " + std::to_string(l) + " is not a compressed backbone layer");
  for (int l : s.kv_source_layer_ids)
    need(detail::contains(s.index_source_layer_ids, l), "kv source " + std::to_string(l) + " must also be an index source");
  for (int l = 0; l < L && l < (int)s.compress_ratios.size(); ++l) {
    if (ratio(l) <= 0) continue;
    int src = -1;
    for (int k : s.kv_source_layer_ids) if (k <= l && k > src) src = k;
    need(src >= 0, "layer " + std::to_string(l) + " has ratio " + std::to_string(ratio(l)) + " but no KV source at or below it");
    if (src >= 0) need(ratio(src) == ratio(l), "layer " + std::to_string(l) + " has a different ratio than its KV source " + std::to_string(src));
  }
  bool any_compressed = false;
  for (int l = 0; l < L && l < (int)s.compress_ratios.size(); ++l) any_compressed |= ratio(l) > 0;
  if (any_compressed) {
    need(s.index_n_heads > 0 && s.index_head_dim > 0 && s.index_head_dim % 32 == 0 &&
             s.index_head_dim >= s.qk_rope_head_dim,
         "index_n_heads/index_head_dim must be positive, index_head_dim a multiple of 32 and >= qk_rope_head_dim");
    need(s.index_topk > 0, "index_topk must be positive");
  }
  if (s.candidate_source_layer_id >= 0) {
    need(detail::contains(s.kv_source_layer_ids, s.candidate_source_layer_id),
         "candidate_source_layer_id must be a KV source layer");
    need(s.candidate_topk_blocks > 0 && s.candidate_block_size > 0, "candidate_topk_blocks/candidate_block_size must be positive");
  }
  if (!s.engram_layer_ids.empty()) {
    need(s.engram_num_embeddings.size() == s.engram_layer_ids.size(), "engram_num_embeddings needs one entry per engram layer");
    need(s.engram_max_ngram_size >= 2, "engram_max_ngram_size must be at least 2");
    need(s.engram_n_heads > 0 && s.engram_head_dim > 0 && s.engram_head_dim % 32 == 0,
         "engram_n_heads must be positive and engram_head_dim a positive multiple of 32");
    need(s.engram_compressed_vocab_size > 0, "engram_compressed_vocab_size must be positive");
    need(s.engram_vocab_size > 2, "engram_vocab_size must be > 2");
    for (int l : s.engram_layer_ids) need(l >= 0 && l < L, "engram layer " + std::to_string(l) + " out of range");
  }
  if (s.n_dspark() > 0) {
    need(!s.dspark_target_layer_ids.empty(), "dspark_target_layer_ids must not be empty");
    for (int l : s.dspark_target_layer_ids) need(l >= 0 && l < L, "dspark target layer " + std::to_string(l) + " out of range");
    need(s.dspark_markov_rank > 0, "dspark_markov_rank must be positive");
    need(s.dspark_n_routed_experts > 0 && s.dspark_num_experts_per_tok > 0 &&
             s.dspark_num_experts_per_tok <= s.dspark_n_routed_experts,
         "dspark expert counts are inconsistent");
    need(s.dspark_noise_token_id >= 0 && s.dspark_noise_token_id < s.vocab_size, "dspark_noise_token_id out of vocab");
  }
  // Upper bounds: far above any released shape, low enough that what a loader derives from the shape (the
  // expected tensor list, parameter and cache byte counts) stays small and cannot overflow.
  need(s.vocab_size <= (1 << 24), "vocab_size must be at most 2^24");
  need(s.hidden_size <= 65536 && s.head_dim <= 4096 && s.q_lora_rank <= 65536 && s.o_lora_rank <= 65536 &&
           s.moe_intermediate_size <= (1 << 20) && s.index_head_dim <= 4096 && s.engram_head_dim <= 4096,
       "a width is too large (hidden_size, q/o_lora_rank ≤ 65536; head dims ≤ 4096; moe_intermediate_size ≤ 2^20)");
  need(s.num_hidden_layers <= 1024 && s.num_nextn_predict_layers <= 64,
       "num_hidden_layers must be at most 1024 and num_nextn_predict_layers at most 64");
  need(s.num_attention_heads <= 1024 && s.index_n_heads <= 1024 && s.engram_n_heads <= 1024 && s.hc_mult <= 64,
       "head counts must be at most 1024 and hc_mult at most 64");
  need(s.n_routed_experts <= 4096 && s.dspark_n_routed_experts <= 4096, "n_routed_experts must be at most 4096");
  need(int64_t(s.num_hidden_layers) * s.n_routed_experts + int64_t(s.n_dspark()) * s.dspark_n_routed_experts <=
           (int64_t(1) << 20),
       "layers × routed experts must be at most 2^20 (the expected tensor list)");
  need(s.sliding_window <= (1 << 20) && s.index_topk <= (1 << 20) && s.max_position_embeddings <= (int64_t(1) << 32),
       "sliding_window and index_topk must be at most 2^20, max_position_embeddings at most 2^32");
  for (int64_t n : s.engram_num_embeddings)
    need(n > 0 && n <= (int64_t(1) << 40), "engram_num_embeddings entries must be in 1..2^40");
  if (e.empty()) return Status::Ok();
  return error(Code::format_error, "invalid model configuration:\n" + e);
}

inline Result<ModelShape> parse_config(const nlohmann::json& j, const std::string& where = "config.json") {
  if (!j.is_object()) return error(Code::format_error, where + ": top level is not a JSON object");
  ModelShape s;
  std::string errs;
  detail::JsonReader top(j, "");
  top.opt("bos_token_id", s.bos_token_id);
  top.opt("eos_token_id", s.eos_token_id);
  top.opt("pad_token_id", s.pad_token_id);
  top.opt("image_token_id", s.image_token_id);
  errs += top.errors;
  if (j.contains("quantization_config") && j["quantization_config"].is_object()) {
    const auto& q = j["quantization_config"];
    detail::JsonReader r(q, "quantization_config");
    r.opt("quant_method", s.quant_method);
    r.opt("scale_fmt", s.scale_fmt);
    r.opt("expert_dtype", s.expert_dtype);
    if (q.contains("weight_block_size")) {
      const auto& b = q["weight_block_size"];
      if (b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer() && b[0] == b[1])
        s.weight_block_size = b[0].get<int>();
      else
        errs += "  quantization_config.weight_block_size: expected [n, n]\n";
    }
    errs += r.errors;
  } else {
    errs += "  quantization_config: missing (the released checkpoint is FP8/FP4)\n";
  }
  const nlohmann::json* tc = &j;
  if (j.contains("text_config")) {
    if (!j["text_config"].is_object()) return error(Code::format_error, where + ": text_config is not an object");
    tc = &j["text_config"];
  }
  detail::JsonReader t(*tc, "text_config");
  t.req("vocab_size", s.vocab_size);
  t.req("hidden_size", s.hidden_size);
  t.req("moe_intermediate_size", s.moe_intermediate_size);
  t.req("num_hidden_layers", s.num_hidden_layers);
  t.req("num_attention_heads", s.num_attention_heads);
  t.opt("num_key_value_heads", s.num_key_value_heads);
  t.req("head_dim", s.head_dim);
  t.req("qk_rope_head_dim", s.qk_rope_head_dim);
  t.req("q_lora_rank", s.q_lora_rank);
  t.req("o_lora_rank", s.o_lora_rank);
  t.req("o_groups", s.o_groups);
  t.opt("swiglu_limit", s.swiglu_limit);
  t.req("rms_norm_eps", s.rms_norm_eps);
  t.opt("max_position_embeddings", s.max_position_embeddings);
  t.req("rope_theta", s.rope_theta);
  t.req("n_routed_experts", s.n_routed_experts);
  t.opt("n_shared_experts", s.n_shared_experts);
  t.req("num_experts_per_tok", s.num_experts_per_tok);
  t.opt("scoring_func", s.scoring_func);
  t.opt("topk_method", s.topk_method);
  t.opt("norm_topk_prob", s.norm_topk_prob);
  t.opt("routed_scaling_factor", s.routed_scaling_factor);
  t.req("sliding_window", s.sliding_window);
  t.req("compress_ratios", s.compress_ratios);
  t.opt("compress_rope_theta", s.compress_rope_theta);
  t.opt("kv_source_layer_ids", s.kv_source_layer_ids);
  t.opt("index_source_layer_ids", s.index_source_layer_ids);
  t.opt("index_n_heads", s.index_n_heads);
  t.opt("index_head_dim", s.index_head_dim);
  t.opt("index_topk", s.index_topk);
  t.opt("candidate_source_layer_id", s.candidate_source_layer_id);
  t.opt("candidate_topk_blocks", s.candidate_topk_blocks);
  t.opt("candidate_block_size", s.candidate_block_size);
  t.req("hc_mult", s.hc_mult);
  t.req("hc_sinkhorn_iters", s.hc_sinkhorn_iters);
  t.req("hc_eps", s.hc_eps);
  t.opt("engram_layer_ids", s.engram_layer_ids);
  t.opt("engram_num_embeddings", s.engram_num_embeddings);
  t.opt("engram_max_ngram_size", s.engram_max_ngram_size);
  t.opt("engram_vocab_size", s.engram_vocab_size);
  t.opt("engram_n_heads", s.engram_n_heads);
  t.opt("engram_head_dim", s.engram_head_dim);
  t.opt("engram_pad_token_id", s.engram_pad_token_id);
  t.opt("engram_compressed_vocab_size", s.engram_compressed_vocab_size);
  t.opt("num_nextn_predict_layers", s.num_nextn_predict_layers);
  t.opt("dspark_block_size", s.dspark_block_size);
  t.opt("dspark_noise_token_id", s.dspark_noise_token_id);
  t.opt("dspark_target_layer_ids", s.dspark_target_layer_ids);
  t.opt("dspark_markov_rank", s.dspark_markov_rank);
  t.opt("dspark_n_routed_experts", s.dspark_n_routed_experts);
  t.opt("dspark_num_experts_per_tok", s.dspark_num_experts_per_tok);
  errs += t.errors;
  if (tc->contains("rope_scaling") && !(*tc)["rope_scaling"].is_null()) {
    detail::JsonReader r((*tc)["rope_scaling"], "text_config.rope_scaling");
    r.opt("rope_type", s.rope_scaling.type);
    r.req("factor", s.rope_scaling.factor);
    r.opt("beta_fast", s.rope_scaling.beta_fast);
    r.opt("beta_slow", s.rope_scaling.beta_slow);
    r.req("original_max_position_embeddings", s.rope_scaling.original_max_position_embeddings);
    errs += r.errors;
    s.has_rope_scaling = true;
    if (s.rope_scaling.type != "yarn") errs += "  text_config.rope_scaling.rope_type: only yarn is supported\n";
  }
  if (j.contains("vision_config") && j["vision_config"].is_object()) {
    detail::JsonReader r(j["vision_config"], "vision_config");
    r.opt("num_hidden_layers", s.vision.num_hidden_layers);
    r.opt("rope_theta", s.vision.rope_theta);
    r.opt("hidden_size", s.vision.hidden_size);
    r.opt("num_attention_heads", s.vision.num_attention_heads);
    r.opt("intermediate_size", s.vision.intermediate_size);
    r.opt("patch_size", s.vision.patch_size);
    r.opt("downsample_ratio", s.vision.downsample_ratio);
    r.opt("max_image_tokens", s.vision.max_image_tokens);
    r.opt("min_pixels", s.vision.min_pixels);
    r.opt("max_wh_ratio", s.vision.max_wh_ratio);
    errs += r.errors;
    s.has_vision = s.vision.num_hidden_layers > 0;
  }
  if (!errs.empty()) return error(Code::format_error, where + ": invalid config:\n" + errs);
  Status v = validate_shape(s);
  if (!v.ok()) return error(v.code(), where + ": " + v.message());
  return s;
}

inline Result<ModelShape> load_config(const std::string& path) {
  auto text = read_small_file(path, uintmax_t(4) << 20);  // released configs are a few KB
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(Code::format_error, path + ": not valid JSON");
  return parse_config(j, path);
}

}  // namespace dsv41
