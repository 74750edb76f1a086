// Tiny models at shapes no preset has (hc_mult 1, 2, 3, 8; widths 96, 160, 224; H·D and group widths not
// multiples of 64; more than 8 experts per token), with random weights (golden_tools::write_random_checkpoint)
// and a golden file made by the CPU reference itself (golden_tools::write_cpu_golden). The CPU half is a unit
// test (tests/unit/test_odd_shapes.cpp); the CUDA model is checked against the same files in
// tests/gpu/test_odd_shapes.cu. The CPU golden also carries each DSpark stage's input (dspark_h.{k}, dspark_pre.{k}),
// so the stages are judged one by one on golden inputs like the layer units: composed over three stages on random
// weights a rare rounding flip (an mHC sum in another order, then an MoE routing near-tie) changes whole draft rows
// (measured at hc 8: the composed drafts 5-6% off while every stage fed the CPU's inputs agrees within 2e-4).
// Host-only code.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/config/parse_config.hpp>

#include "cpu_golden.hpp"

namespace dsv41::golden_tools {

struct OddShape {
  std::string name;
  nlohmann::json text;  // text_config fields that replace tiny-ced's
};

// Each shape takes the generic path of at least one kernel (shape_support.hpp's table).
inline std::vector<OddShape> odd_shapes() {
  return {
      // hc 2; d = D = 96 (mHC without the d % 256 path, attention with D % 128 != 0 and H = 3); E = 12 with
      // 9 experts per token (routing, tiles and combine past the register-resident k <= 8); I = 96 (N % 64 != 0)
      {"hc2_d96", {{"hc_mult", 2}, {"hidden_size", 96}, {"head_dim", 96}, {"num_attention_heads", 3},
                   {"o_groups", 3}, {"o_lora_rank", 32}, {"q_lora_rank", 96}, {"moe_intermediate_size", 96},
                   {"n_routed_experts", 12}, {"num_experts_per_tok", 9}, {"index_n_heads", 3}}},
      // hc 3; d = D = 160; 5 heads in 5 groups of 160; index heads of 64
      {"hc3_d160", {{"hc_mult", 3}, {"hidden_size", 160}, {"head_dim", 160}, {"num_attention_heads", 5},
                    {"o_groups", 5}, {"o_lora_rank", 32}, {"q_lora_rank", 160}, {"moe_intermediate_size", 160},
                    {"index_n_heads", 5}, {"index_head_dim", 64}, {"qk_rope_head_dim", 32}}},
      // hc 1 (one stream); d = 224; D = 32 (the narrowest head); 7 heads
      {"hc1_d224", {{"hc_mult", 1}, {"hidden_size", 224}, {"head_dim", 32}, {"num_attention_heads", 7},
                    {"o_groups", 7}, {"o_lora_rank", 32}, {"q_lora_rank", 32}, {"moe_intermediate_size", 32}}},
      // hc 8 (the largest templated count); d = 128; D = 192
      {"hc8_d128", {{"hc_mult", 8}, {"hidden_size", 128}, {"head_dim", 192}, {"num_attention_heads", 2},
                    {"o_groups", 2}, {"q_lora_rank", 64}}},
      // hc 8 and head_dim 192 apart (which of the two a failure of hc8_d128 comes from)
      {"hc8_d128_D128", {{"hc_mult", 8}, {"hidden_size", 128}, {"head_dim", 128}, {"num_attention_heads", 2},
                         {"o_groups", 2}, {"q_lora_rank", 64}}},
      {"hc4_d128_D192", {{"hc_mult", 4}, {"hidden_size", 128}, {"head_dim", 192}, {"num_attention_heads", 2},
                         {"o_groups", 2}, {"q_lora_rank", 64}}},
  };
}

// tiny_ced_dir's config with o.text applied, its Engram token map, random weights (seed) and a CPU golden
// (1 sequence of 20 tokens: prefill 14, 6 decode steps with drafts) into dir.
inline Status write_odd_model(const std::string& tiny_ced_dir, const std::string& dir, const OddShape& o,
                              uint64_t seed) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return error(Code::io_error, dir + ": " + ec.message());
  nlohmann::json cfg;
  {
    std::ifstream f(tiny_ced_dir + "/config.json");
    if (!f) return error(Code::io_error, tiny_ced_dir + "/config.json: cannot open");
    cfg = nlohmann::json::parse(f, nullptr, false);
    if (cfg.is_discarded()) return error(Code::format_error, tiny_ced_dir + "/config.json: not valid JSON");
  }
  for (const auto& [k, v] : o.text.items()) cfg["text_config"][k] = v;
  {
    std::ofstream f(dir + "/config.json");
    f << cfg.dump(2);
    if (!f) return error(Code::io_error, dir + "/config.json: cannot write");
  }
  fs::copy_file(tiny_ced_dir + "/engram_token_map.safetensors", dir + "/engram_token_map.safetensors",
                fs::copy_options::overwrite_existing, ec);
  if (ec) return error(Code::io_error, "engram token map: " + ec.message());
  auto sh = load_config(dir + "/config.json");
  if (!sh.ok()) return sh.status();
  DSV41_TRY(write_random_checkpoint(*sh, dir + "/model.safetensors", seed));
  return write_cpu_golden(dir, dir + "/golden.safetensors", 1, 20, 14, seed + 1);
}

}  // namespace dsv41::golden_tools
