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
using golden_tools::bf16_bytes;
using golden_tools::bytes_of;
using golden_tools::tensor;

namespace {

struct Gen {
  std::mt19937_64 rng{20261130};
  std::normal_distribution<float> nd{0.f, 1.f};
  float n() { return nd(rng); }
};

// Values of one tensor by its name (tiny-ced's statistics).
std::vector<float> values(const std::string& name, int64_t n, int64_t in, int64_t hcd, Gen& g) {
  std::vector<float> v(static_cast<size_t>(n));
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  float mean = 0.f, std = 1.f / std::sqrt(float(in));
  if (has("norm.weight") || has("q_weight") || has("k_weight")) { mean = 1.f; std = 0.1f; }
  else if (has("_fn")) std = 1.f / std::sqrt(float(hcd));
  else if (has("_base")) std = 0.5f;
  else if (has("_scale")) { mean = 0.75f; std = 0.1f; }
  else if (has("attn_sink")) std = 0.3f;
  else if (has("gate.bias")) std = 0.15f;
  else if (name == "embed.weight" || has("markov_head.embed") || has("engram.embed")) std = 1.f;
  for (auto& x : v) x = mean + std * g.n();
  return v;
}

}  // namespace

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
  const int64_t hcd = int64_t(s.hc_mult) * s.hidden_size;

  // weights
  Gen g;
  std::vector<st::TensorToWrite> ts;
  const auto specs = expected_tensors(s);
  std::map<std::string, const TensorSpec*> by_name;
  for (const auto& t : specs) by_name[t.name] = &t;
  for (const auto& t : specs) {
    const bool is_scale = t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, ".scale") == 0 &&
                          (t.dtype == "F8_E8M0");
    if (is_scale) continue;  // written with its weight
    if (t.dtype == "BF16" || t.dtype == "F32") {
      int64_t n = 1;
      for (auto d : t.shape) n *= d;
      const int64_t in = t.shape.back();
      auto v = values(t.name, n, in, hcd, g);
      if (t.dtype == "BF16") ts.push_back(tensor(t.name, st::DType::BF16, t.shape, bf16_bytes(v)));
      else ts.push_back(tensor(t.name, st::DType::F32, t.shape, bytes_of(v.data(), v.size() * 4)));
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);  // strip ".weight"
    const TensorSpec* sc = by_name.count(base + ".scale") ? by_name.at(base + ".scale") : nullptr;
    if (t.dtype == "F8_E4M3" && !sc) {
      std::fprintf(stderr, "no scale for %s\n", t.name.c_str());
      return 1;
    }
    if (t.dtype == "F8_E4M3") {
      const int64_t O = t.shape[0], I = t.shape[1];
      const bool table = t.name.find("engram.embed") != std::string::npos;  // rows with a scale per 32 inputs
      auto v = values(t.name, O * I, I, hcd, g);
      std::vector<uint8_t> codes(size_t(O * I));
      std::vector<uint8_t> scales(size_t(sc->shape[0] * sc->shape[1]));
      for (int64_t sr = 0; sr < sc->shape[0]; ++sr)
        for (int64_t scol = 0; scol < sc->shape[1]; ++scol) {
          const int64_t r0 = table ? sr : sr * 32, r1 = table ? sr + 1 : std::min(O, sr * 32 + 32);
          const int64_t c0 = scol * 32, c1 = std::min(I, c0 + 32);
          float amax = 0.f;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(v[size_t(r * I + c)]));
          const float scale = num::fp8_act_scale(amax);
          scales[size_t(sr * sc->shape[1] + scol)] = num::ue8m0_from_f32(scale);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c)
              codes[size_t(r * I + c)] = num::e4m3_from_f32(std::clamp(v[size_t(r * I + c)] / scale, -448.f, 448.f));
        }
      ts.push_back(tensor(t.name, st::DType::F8_E4M3, t.shape, bytes_of(codes.data(), codes.size())));
      ts.push_back(tensor(base + ".scale", st::DType::F8_E8M0, sc->shape, bytes_of(scales.data(), scales.size())));
      continue;
    }
    if (t.dtype == "I8") {  // FP4 experts: [O, I/2] packed, UE8M0 per row and 32 inputs
      const int64_t O = t.shape[0], I = t.shape[1] * 2;
      auto v = values(t.name, O * I, I, hcd, g);
      std::vector<uint8_t> packed(size_t(O * I / 2)), scales(size_t(O * (I / 32)));
      for (int64_t r = 0; r < O; ++r)
        for (int64_t b = 0; b < I / 32; ++b) {
          float* x = v.data() + r * I + b * 32;
          uint8_t nib[32];
          num::fp4_quant_block32(x, 32, nib, &scales[size_t(r * (I / 32) + b)]);
          for (int i = 0; i < 16; ++i) packed[size_t(r * I / 2 + b * 16 + i)] = num::pack_e2m1(nib[2 * i], nib[2 * i + 1]);
        }
      ts.push_back(tensor(t.name, st::DType::I8, t.shape, bytes_of(packed.data(), packed.size())));
      ts.push_back(tensor(base + ".scale", st::DType::F8_E8M0, sc->shape, bytes_of(scales.data(), scales.size())));
      continue;
    }
    std::fprintf(stderr, "unhandled dtype %s of %s\n", t.dtype.c_str(), t.name.c_str());
    return 1;
  }
  if (Status w = st::write(dir + "/model.safetensors", ts); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.to_string().c_str());
    return 1;
  }
  ts.clear();

  if (Status w = golden_tools::write_cpu_golden(dir, dir + "/golden.safetensors", 2, 96, 80, 20261130); !w.ok()) {
    std::fprintf(stderr, "%s\n", w.to_string().c_str());
    return 1;
  }
  std::printf("wrote %s: d=%d H=%d D=%d nI=%d dI=%d E=%d, B=2 T=96 P=80\n", dir.c_str(), s.hidden_size,
              s.num_attention_heads, s.head_dim, s.index_n_heads, s.index_head_dim, s.n_routed_experts);
  return 0;
}
