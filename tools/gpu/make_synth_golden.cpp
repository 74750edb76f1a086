// A synthetic model at widths where the CUDA forward takes its tensor-core kernels (H = 16, D = 128,
// nI = 16, dI = 128, d = 256, E = 16; prefill of 80 rows for the wide FP8 GEMM), with a golden file made by
// the CPU reference itself, so that `golden_cuda OUT_DIR` checks the CUDA model layer by layer against the
// CPU model on those code paths (tiny-ced only reaches the shape-generic fallbacks).
//
//   make_synth_golden TINY_CED_DIR OUT_DIR
//
// Weights: random, with tiny-ced's magnitudes (linear weights N(0, 1/in) quantized to the stored format,
// norms 1 ± 0.1, mHC fn N(0, 1/(hc·d)), ...). The golden tensors follow ../shared/golden/README.md.
// Host-only; build: g++ -std=c++20 -O2 -Iinclude tools/gpu/make_synth_golden.cpp -lutf8proc
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <dsv41/config/tensors.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/model.hpp>

#include "../../tests/gpu/cpu_golden.hpp"

using namespace dsv41;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_synth_golden TINY_CED_DIR OUT_DIR\n");
    return 2;
  }
  const std::string src = argv[1], dir = argv[2];
  std::filesystem::create_directories(dir);
  // config: tiny-ced with wider shapes
  nlohmann::json cfg;
  {
    std::ifstream f(src + "/config.json");
    cfg = nlohmann::json::parse(f);
  }
  auto& tc = cfg["text_config"];
  tc["hidden_size"] = 256;
  tc["num_attention_heads"] = 16;
  tc["head_dim"] = 128;
  tc["qk_rope_head_dim"] = 64;
  tc["q_lora_rank"] = 128;
  tc["o_lora_rank"] = 64;
  tc["o_groups"] = 4;
  tc["moe_intermediate_size"] = 128;
  tc["n_routed_experts"] = 16;
  tc["index_n_heads"] = 16;
  tc["index_head_dim"] = 128;
  tc["index_topk"] = 8;
  tc["dspark_n_routed_experts"] = 16;
  tc["dspark_markov_rank"] = 32;
  {
    std::ofstream f(dir + "/config.json");
    f << cfg.dump(2);
  }
  std::filesystem::copy_file(src + "/engram_token_map.safetensors", dir + "/engram_token_map.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  auto sh = load_config(dir + "/config.json");
  if (!sh.ok()) {
    std::fprintf(stderr, "%s\n", sh.status().to_string().c_str());
    return 1;
  }
  const ModelShape s = *sh;
  if (Status w = golden_tools::write_random_checkpoint(s, dir + "/model.safetensors", 20261130); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.to_string().c_str());
    return 1;
  }

  if (Status w = golden_tools::write_cpu_golden(dir, dir + "/golden.safetensors", 2, 96, 80, 20261130); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s: d=%d H=%d D=%d nI=%d dI=%d E=%d, B=2 T=96 P=80\n", dir.c_str(), s.hidden_size,
              s.num_attention_heads, s.head_dim, s.index_n_heads, s.index_head_dim, s.n_routed_experts);
  return 0;
}
