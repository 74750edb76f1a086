// A configuration of one's own: models/dsv41-tiny-py (its config.json is not a preset). The idiom: derive
// from the preset closest in layout (TinyCed has the same 8-layer schedule) and redeclare the members that
// differ; a member of the derived struct hides the base's, so configs::to_shape<TinyPy>() sees these values.
#pragma once
#include <array>
#include <cstdint>

#include <dsv41/config/presets.hpp>

struct TinyPy : dsv41::configs::TinyCed {
  // Checked by the loader against config.json (a directory with other values is refused).
  static constexpr int vocab_size = 12288, hidden_size = 256, moe_intermediate_size = 192;
  static constexpr int num_attention_heads = 8, q_lora_rank = 128, o_lora_rank = 64, o_groups = 4;
  static constexpr int n_routed_experts = 16, sliding_window = 128, index_topk = 64;
  static constexpr std::array<int64_t, 2> engram_num_embeddings = {48096, 48236};
  // Not checked at load (the model runs with config.json's values), redeclared so the type tells the truth.
  static constexpr int64_t yarn_original = 1024;
  static constexpr int candidate_topk_blocks = 16, candidate_block_size = 8;
  static constexpr int64_t engram_vocab_size = 12000, engram_compressed_vocab_size = 7497;
  static constexpr int dspark_noise_token_id = 12281, dspark_markov_rank = 32, dspark_n_routed_experts = 8;
  static constexpr int image_token_id = 12287;
  // Everything else (8 layers, head_dim 64, compress ratios, sources, Engram layers, DSpark targets, ...)
  // is TinyCed's and equal to config.json.
};
