// The runtime model shape: every field of the released config.json schema that the model uses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsv41 {

struct RopeScaling {
  std::string type = "yarn";
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
};

struct VisionShape {
  int num_hidden_layers = 0;
  double rope_theta = 10000.0;  // the ViT's 2-D rope base
  int hidden_size = 0;
  int num_attention_heads = 0;
  int intermediate_size = 0;
  int patch_size = 0;
  int downsample_ratio = 0;
  int max_image_tokens = 0;
  int64_t min_pixels = 0;     // smaller images are scaled up to about this many pixels
  double max_wh_ratio = 0.0;  // wider images are resized, not padded; 0 = none (JSON null)
};

struct ModelShape {
  // top level
  int bos_token_id = 0, eos_token_id = 1, pad_token_id = 2;
  int image_token_id = -1;
  // quantization_config
  std::string quant_method = "fp8";
  int weight_block_size = 32;  // square blocks
  std::string scale_fmt = "ue8m0";
  std::string expert_dtype = "fp4";
  // text_config
  int vocab_size = 0;
  int hidden_size = 0;            // d
  int moe_intermediate_size = 0;  // expert inner width
  int num_hidden_layers = 0;      // backbone layers L
  int num_attention_heads = 0;    // H
  int num_key_value_heads = 1;
  int head_dim = 0;               // D
  int qk_rope_head_dim = 0;       // r
  int q_lora_rank = 0;
  int o_lora_rank = 0;
  int o_groups = 0;
  double swiglu_limit = 0.0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool has_rope_scaling = false;
  int n_routed_experts = 0;
  int n_shared_experts = 1;
  int num_experts_per_tok = 0;
  std::string scoring_func = "sqrtsoftplus";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  int sliding_window = 0;  // W
  std::vector<int> compress_ratios;  // L + num_nextn_predict_layers entries
  double compress_rope_theta = 10000.0;
  std::vector<int> kv_source_layer_ids;
  std::vector<int> index_source_layer_ids;
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int candidate_source_layer_id = -1;
  int candidate_topk_blocks = 0;
  int candidate_block_size = 0;
  int hc_mult = 1;
  int hc_sinkhorn_iters = 0;
  double hc_eps = 0.0;
  std::vector<int> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int engram_n_heads = 0;
  int engram_head_dim = 0;
  int engram_pad_token_id = 2;
  int64_t engram_compressed_vocab_size = 0;
  int num_nextn_predict_layers = 0;  // DSpark stages
  int dspark_block_size = 0;
  int dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;
  int dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_num_experts_per_tok = 0;
  VisionShape vision;
  bool has_vision = false;

  // derived helpers
  int n_dspark() const { return dspark_block_size > 0 ? num_nextn_predict_layers : 0; }
  int n_engram_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
  int nope_dim() const { return head_dim - qk_rope_head_dim; }
};

}  // namespace dsv41
