// Compile-time model configurations as traits types (static constexpr members; nvcc 13 mishandles
// class-type template parameters, so configs are types, not values). `schedule<C>()` is the
// per-layer schedule as a constexpr array. `to_shape<Config>()` gives the runtime ModelShape the
// loader checks against.
#pragma once
#include <array>
#include <cstdint>
#include <cstddef>

#include <dsv41/config/accounting.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>

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

// ---- compile-time schedule: the same rules as make_schedule() (schedule.hpp) ----
template <class C>
inline constexpr int n_dspark = C::dspark_block_size > 0 ? C::num_nextn_predict_layers : 0;  // as ModelShape::n_dspark()

template <class C>
constexpr ScheduleView schedule_view() {
  static_assert(C::compress_ratios.size() == std::size_t(C::num_hidden_layers + C::num_nextn_predict_layers));
  ScheduleView v;
  v.n_layers = C::num_hidden_layers;
  v.n_dspark = n_dspark<C>;
  v.compress_ratios = C::compress_ratios;
  v.kv_source_layer_ids = C::kv_source_layer_ids;
  v.index_source_layer_ids = C::index_source_layer_ids;
  v.engram_layer_ids = C::engram_layer_ids;
  v.dspark_target_layer_ids = C::dspark_target_layer_ids;
  v.candidate_source_layer_id = C::candidate_source_layer_id;
  v.n_routed_experts = C::n_routed_experts;
  v.num_experts_per_tok = C::num_experts_per_tok;
  v.dspark_n_routed_experts = C::dspark_n_routed_experts;
  v.dspark_num_experts_per_tok = C::dspark_num_experts_per_tok;
  return v;
}

// Roles of layers 0..L-1 and DSpark stages L..L+n_dspark-1.
template <class C>
constexpr std::array<LayerRole, std::size_t(C::num_hidden_layers + n_dspark<C>)> schedule() {
  std::array<LayerRole, std::size_t(C::num_hidden_layers + n_dspark<C>)> out{};
  fill_schedule(schedule_view<C>(), out);
  return out;
}

template <class C>
constexpr int first_decoder_layer() { return dsv41::first_decoder_layer(schedule_view<C>()); }

namespace detail {
// Checks of a schedule against the release's layout as SPEC §1 words it (not by re-running the rules).
constexpr bool v41_backbone_ok() {
  constexpr auto s = schedule<V41Flash>();
  for (int l = 0; l < 40; ++l) {
    const LayerRole& r = s[std::size_t(l)];
    const int want_ratio = l < 2 ? 0 : l < 20 ? 2 : 1;
    // 2-19: groups of six, Full at 2, 8, 14; 20-39: groups of four, Full at 20, Reindex at 24, 28, 32, 36.
    const int want_kv = l < 2 ? -1 : l < 20 ? 2 + 6 * ((l - 2) / 6) : 20;
    const int want_index = l < 20 ? want_kv : 20 + 4 * ((l - 20) / 4);
    const AttnMode want_mode = l < 2 ? AttnMode::Window
                               : l == want_kv ? AttnMode::Full
                               : l == want_index ? AttnMode::Reindex
                                                 : AttnMode::Reuse;
    if (r.id != l || r.dspark || r.ratio != want_ratio || r.mode != want_mode || r.kv_source != want_kv ||
        r.index_source != want_index || r.encoder != (l < 20) || r.candidate_source != (l == 20) ||
        r.uses_candidates != (l > 20 && want_mode == AttnMode::Reindex) || r.n_experts != 384 || r.top_k != 6)
      return false;
    const int want_engram = l == 1 ? 0 : l == 14 ? 1 : -1;
    const int want_tap = l >= 37 ? l - 37 : -1;
    if (r.engram_slot != want_engram || r.tap_slot != want_tap) return false;
  }
  return true;
}
constexpr bool v41_dspark_ok() {
  constexpr auto s = schedule<V41Flash>();
  for (int l = 40; l < 43; ++l) {
    const LayerRole& r = s[std::size_t(l)];
    if (!r.dspark || r.mode != AttnMode::Window || r.ratio != 0 || r.encoder || r.engram_slot != -1 ||
        r.tap_slot != -1 || r.n_experts != 128 || r.top_k != 3)
      return false;
  }
  return true;
}
}  // namespace detail

// The release's roles (SPEC §1).
static_assert(schedule<V41Flash>().size() == 43);
static_assert(first_decoder_layer<V41Flash>() == 20, "layers 0-19 are the encoder");
static_assert(schedule<V41Flash>()[0].is_window_only() && schedule<V41Flash>()[1].is_window_only());
static_assert(schedule<V41Flash>()[2].compresses() && schedule<V41Flash>()[2].ratio == 2);
static_assert(schedule<V41Flash>()[20].compresses() && schedule<V41Flash>()[20].ratio == 1 &&
              schedule<V41Flash>()[20].candidate_source && !schedule<V41Flash>()[20].uses_candidates);
static_assert(schedule<V41Flash>()[24].mode == AttnMode::Reindex && schedule<V41Flash>()[24].uses_candidates &&
              schedule<V41Flash>()[24].kv_source == 20);
static_assert(schedule<V41Flash>()[27].mode == AttnMode::Reuse && schedule<V41Flash>()[27].index_source == 24);
static_assert(detail::v41_backbone_ok(), "V41Flash layers 0-39 differ from SPEC §1");
static_assert(detail::v41_dspark_ok(), "V41Flash DSpark stages 40-42 differ from SPEC §1");

// tiny-ced (tests/data/golden/README.md): window 0-1; Full 2, Reuse 3; Full + candidate source 4,
// Reuse 5, Reindex 6, Reuse 7; Engram at 1 and 3; taps 5-7; 3 DSpark stages.
static_assert(schedule<TinyCed>().size() == 11 && first_decoder_layer<TinyCed>() == 4);
static_assert(schedule<TinyCed>()[1].is_window_only() && schedule<TinyCed>()[1].engram_slot == 0);
static_assert(schedule<TinyCed>()[2].compresses() && schedule<TinyCed>()[2].ratio == 2 && schedule<TinyCed>()[2].encoder);
static_assert(schedule<TinyCed>()[3].mode == AttnMode::Reuse && schedule<TinyCed>()[3].kv_source == 2 &&
              schedule<TinyCed>()[3].engram_slot == 1 && schedule<TinyCed>()[3].encoder);
static_assert(schedule<TinyCed>()[4].compresses() && schedule<TinyCed>()[4].candidate_source &&
              !schedule<TinyCed>()[4].uses_candidates && !schedule<TinyCed>()[4].encoder);
static_assert(schedule<TinyCed>()[5].mode == AttnMode::Reuse && schedule<TinyCed>()[5].index_source == 4 &&
              schedule<TinyCed>()[5].tap_slot == 0);
static_assert(schedule<TinyCed>()[6].mode == AttnMode::Reindex && schedule<TinyCed>()[6].uses_candidates &&
              schedule<TinyCed>()[6].kv_source == 4 && schedule<TinyCed>()[6].tap_slot == 1);
static_assert(schedule<TinyCed>()[7].mode == AttnMode::Reuse && schedule<TinyCed>()[7].index_source == 6 &&
              schedule<TinyCed>()[7].tap_slot == 2);
static_assert(schedule<TinyCed>()[8].dspark && schedule<TinyCed>()[10].dspark &&
              schedule<TinyCed>()[10].n_experts == 4 && schedule<TinyCed>()[10].top_k == 2);

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
