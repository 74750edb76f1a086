// Compile-time model configurations as traits types (static constexpr members; nvcc 13 mishandles
// class-type template parameters, so configs are types, not values). Per-layer schedules are
// constexpr arrays. `to_shape<Config>()` gives the runtime ModelShape the loader checks against.
#pragma once
#include <array>
#include <cstdint>

#include <dsv41/config/accounting.hpp>
#include <dsv41/config/model_shape.hpp>

namespace dsv41::configs {

// DeepSeek-V4.1-Flash as released (SPEC §1).
struct V41Flash {
  static constexpr int vocab_size = 129280, hidden_size = 5120, moe_intermediate_size = 2304;
  static constexpr int num_hidden_layers = 40, num_attention_heads = 64, head_dim = 512, qk_rope_head_dim = 64;
  static constexpr int q_lora_rank = 1280, o_lora_rank = 1024, o_groups = 8;
  static constexpr double swiglu_limit = 10.0, rms_norm_eps = 1e-20;
  static constexpr int64_t max_position_embeddings = 1048576;
  static constexpr double rope_theta = 10000, compress_rope_theta = 160000;
  static constexpr double yarn_factor = 16, yarn_beta_fast = 32, yarn_beta_slow = 1;
  static constexpr int64_t yarn_original = 65536;
  static constexpr int n_routed_experts = 384, num_experts_per_tok = 6;
  static constexpr double routed_scaling_factor = 1.5;
  static constexpr int sliding_window = 128;
  static constexpr std::array<int, 43> compress_ratios = {
      0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  static constexpr std::array<int, 4> kv_source_layer_ids = {2, 8, 14, 20};
  static constexpr std::array<int, 8> index_source_layer_ids = {2, 8, 14, 20, 24, 28, 32, 36};
  static constexpr int index_n_heads = 32, index_head_dim = 128, index_topk = 512;
  static constexpr int candidate_source_layer_id = 20, candidate_topk_blocks = 2048, candidate_block_size = 8;
  static constexpr int hc_mult = 4, hc_sinkhorn_iters = 20;
  static constexpr double hc_eps = 1e-6;
  static constexpr std::array<int, 2> engram_layer_ids = {1, 14};
  static constexpr std::array<int64_t, 2> engram_num_embeddings = {384006168, 384016682};
  static constexpr int engram_max_ngram_size = 4, engram_n_heads = 8, engram_head_dim = 256;
  static constexpr int64_t engram_vocab_size = 16000000, engram_compressed_vocab_size = 99092;
  static constexpr int engram_pad_token_id = 2;
  static constexpr int num_nextn_predict_layers = 3, dspark_block_size = 5, dspark_noise_token_id = 128799;
  static constexpr std::array<int, 3> dspark_target_layer_ids = {37, 38, 39};
  static constexpr int dspark_markov_rank = 256, dspark_n_routed_experts = 128, dspark_num_experts_per_tok = 3;
  static constexpr int bos_token_id = 0, eos_token_id = 1, pad_token_id = 2, image_token_id = 129264;
  static constexpr bool has_vision = true;
};

// The tiny-ced golden fixture (tests/data/golden/tiny-ced): a miniature of the release (8 layers, window 8, Engram at 1 and 3).
struct TinyCed {
  static constexpr int vocab_size = 512, hidden_size = 128, moe_intermediate_size = 64;
  static constexpr int num_hidden_layers = 8, num_attention_heads = 4, head_dim = 64, qk_rope_head_dim = 16;
  static constexpr int q_lora_rank = 64, o_lora_rank = 32, o_groups = 2;
  static constexpr double swiglu_limit = 10.0, rms_norm_eps = 1e-20;
  static constexpr int64_t max_position_embeddings = 4096;
  static constexpr double rope_theta = 10000, compress_rope_theta = 40000;
  static constexpr double yarn_factor = 4, yarn_beta_fast = 32, yarn_beta_slow = 1;
  static constexpr int64_t yarn_original = 32;
  static constexpr int n_routed_experts = 8, num_experts_per_tok = 2;
  static constexpr double routed_scaling_factor = 1.5;
  static constexpr int sliding_window = 8;
  static constexpr std::array<int, 11> compress_ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  static constexpr std::array<int, 2> kv_source_layer_ids = {2, 4};
  static constexpr std::array<int, 3> index_source_layer_ids = {2, 4, 6};
  static constexpr int index_n_heads = 4, index_head_dim = 32, index_topk = 6;
  static constexpr int candidate_source_layer_id = 4, candidate_topk_blocks = 3, candidate_block_size = 4;
  static constexpr int hc_mult = 4, hc_sinkhorn_iters = 20;
  static constexpr double hc_eps = 1e-6;
  static constexpr std::array<int, 2> engram_layer_ids = {1, 3};
  static constexpr std::array<int64_t, 2> engram_num_embeddings = {240, 306};
  static constexpr int engram_max_ngram_size = 3, engram_n_heads = 2, engram_head_dim = 32;
  static constexpr int64_t engram_vocab_size = 50, engram_compressed_vocab_size = 300;
  static constexpr int engram_pad_token_id = 2;
  static constexpr int num_nextn_predict_layers = 3, dspark_block_size = 5, dspark_noise_token_id = 500;
  static constexpr std::array<int, 3> dspark_target_layer_ids = {5, 6, 7};
  static constexpr int dspark_markov_rank = 16, dspark_n_routed_experts = 4, dspark_num_experts_per_tok = 2;
  static constexpr int bos_token_id = 0, eos_token_id = 1, pad_token_id = 2, image_token_id = 511;
  static constexpr bool has_vision = false;
};

// Marker for the runtime-shaped path: the shape comes from config.json alone.
struct Dynamic {};

// ---- compile-time derived figures ----
template <class C>
constexpr double global_kv_bytes_per_token() {
  double entries = 0;
  for (int l = 0; l < C::num_hidden_layers; ++l)
    for (int k : C::kv_source_layer_ids)
      if (k == l) entries += 1.0 / C::compress_ratios[l];
  return entries * double(main_kv_entry_bytes(C::head_dim) + index_key_entry_bytes(C::index_head_dim));
}

template <class C>
constexpr int64_t window_bytes_per_sequence() {
  return int64_t(C::num_hidden_layers + C::num_nextn_predict_layers) * C::sliding_window *
         window_entry_bytes(C::head_dim);
}

static_assert(main_kv_entry_bytes(V41Flash::head_dim) == 288);
static_assert(index_key_entry_bytes(V41Flash::index_head_dim) == 68);
static_assert(window_entry_bytes(V41Flash::head_dim) == 528);
static_assert(global_kv_bytes_per_token<V41Flash>() == 890.0, "the release's global KV is 890 B/token");

template <class C>
ModelShape to_shape() {
  ModelShape s;
  s.vocab_size = C::vocab_size;
  s.hidden_size = C::hidden_size;
  s.moe_intermediate_size = C::moe_intermediate_size;
  s.num_hidden_layers = C::num_hidden_layers;
  s.num_attention_heads = C::num_attention_heads;
  s.head_dim = C::head_dim;
  s.qk_rope_head_dim = C::qk_rope_head_dim;
  s.q_lora_rank = C::q_lora_rank;
  s.o_lora_rank = C::o_lora_rank;
  s.o_groups = C::o_groups;
  s.swiglu_limit = C::swiglu_limit;
  s.rms_norm_eps = C::rms_norm_eps;
  s.max_position_embeddings = C::max_position_embeddings;
  s.rope_theta = C::rope_theta;
  s.has_rope_scaling = true;
  s.rope_scaling = {"yarn", C::yarn_factor, C::yarn_beta_fast, C::yarn_beta_slow, C::yarn_original};
  s.n_routed_experts = C::n_routed_experts;
  s.num_experts_per_tok = C::num_experts_per_tok;
  s.routed_scaling_factor = C::routed_scaling_factor;
  s.sliding_window = C::sliding_window;
  s.compress_ratios.assign(C::compress_ratios.begin(), C::compress_ratios.end());
  s.compress_rope_theta = C::compress_rope_theta;
  s.kv_source_layer_ids.assign(C::kv_source_layer_ids.begin(), C::kv_source_layer_ids.end());
  s.index_source_layer_ids.assign(C::index_source_layer_ids.begin(), C::index_source_layer_ids.end());
  s.index_n_heads = C::index_n_heads;
  s.index_head_dim = C::index_head_dim;
  s.index_topk = C::index_topk;
  s.candidate_source_layer_id = C::candidate_source_layer_id;
  s.candidate_topk_blocks = C::candidate_topk_blocks;
  s.candidate_block_size = C::candidate_block_size;
  s.hc_mult = C::hc_mult;
  s.hc_sinkhorn_iters = C::hc_sinkhorn_iters;
  s.hc_eps = C::hc_eps;
  s.engram_layer_ids.assign(C::engram_layer_ids.begin(), C::engram_layer_ids.end());
  s.engram_num_embeddings.assign(C::engram_num_embeddings.begin(), C::engram_num_embeddings.end());
  s.engram_max_ngram_size = C::engram_max_ngram_size;
  s.engram_vocab_size = C::engram_vocab_size;
  s.engram_n_heads = C::engram_n_heads;
  s.engram_head_dim = C::engram_head_dim;
  s.engram_pad_token_id = C::engram_pad_token_id;
  s.engram_compressed_vocab_size = C::engram_compressed_vocab_size;
  s.num_nextn_predict_layers = C::num_nextn_predict_layers;
  s.dspark_block_size = C::dspark_block_size;
  s.dspark_noise_token_id = C::dspark_noise_token_id;
  s.dspark_target_layer_ids.assign(C::dspark_target_layer_ids.begin(), C::dspark_target_layer_ids.end());
  s.dspark_markov_rank = C::dspark_markov_rank;
  s.dspark_n_routed_experts = C::dspark_n_routed_experts;
  s.dspark_num_experts_per_tok = C::dspark_num_experts_per_tok;
  s.bos_token_id = C::bos_token_id;
  s.eos_token_id = C::eos_token_id;
  s.pad_token_id = C::pad_token_id;
  s.image_token_id = C::image_token_id;
  s.has_vision = C::has_vision;
  return s;
}

}  // namespace dsv41::configs
