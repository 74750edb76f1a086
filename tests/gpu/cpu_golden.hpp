// The CPU reference's own run of a model, written as a golden file (../shared/golden/README.md layout), so
// that the CUDA model can be checked layer by layer against the CPU model on any model directory
// (tools/gpu/make_synth_golden.cpp, tests/gpu/test_cuda_api.cu). Host-only code.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <dsv41/config/tensors.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::golden_tools {

inline std::vector<std::byte> bytes_of(const void* p, size_t n) {
  std::vector<std::byte> b(n);
  std::memcpy(b.data(), p, n);
  return b;
}

inline st::TensorToWrite tensor(const std::string& name, st::DType dt, std::vector<int64_t> shape, std::vector<std::byte> b) {
  st::TensorToWrite t;
  t.name = name;
  t.dtype = dt;
  t.shape = std::move(shape);
  t.bytes = std::move(b);
  return t;
}

inline std::vector<std::byte> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = num::bf16_bits(v[i]);
  return bytes_of(h.data(), h.size() * 2);
}

// Values of one tensor by its name, with tiny-ced's statistics (linear weights N(0, 1/in), norms 1 ± 0.1,
// mHC fn N(0, 1/(hc·d)), ...).
inline std::vector<float> random_values(const std::string& name, int64_t n, int64_t in, int64_t hcd,
                                        std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  float mean = 0.f, sd = 1.f / std::sqrt(float(in));
  if (has("norm.weight") || has("q_weight") || has("k_weight")) { mean = 1.f; sd = 0.1f; }
  else if (has("_fn")) sd = 1.f / std::sqrt(float(hcd));
  else if (has("_base")) sd = 0.5f;
  else if (has("_scale")) { mean = 0.75f; sd = 0.1f; }
  else if (has("attn_sink")) sd = 0.3f;
  else if (has("gate.bias")) sd = 0.15f;
  else if (name == "embed.weight" || has("markov_head.embed") || has("engram.embed")) sd = 1.f;
  for (auto& x : v) x = mean + sd * nd(rng);
  return v;
}

// Every tensor expected_tensors(s) lists, random (random_values) and quantized to its stored format, into
// out_path (one safetensors file).
inline Status write_random_checkpoint(const ModelShape& s, const std::string& out_path, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t hcd = int64_t(s.hc_mult) * s.hidden_size;
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
      auto v = random_values(t.name, n, in, hcd, rng);
      if (t.dtype == "BF16") ts.push_back(tensor(t.name, st::DType::BF16, t.shape, bf16_bytes(v)));
      else ts.push_back(tensor(t.name, st::DType::F32, t.shape, bytes_of(v.data(), v.size() * 4)));
      continue;
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);  // strip ".weight"
    const TensorSpec* sc = by_name.count(base + ".scale") ? by_name.at(base + ".scale") : nullptr;
    if (!sc) return error(Code::internal, "no scale for " + t.name);
    if (t.dtype == "F8_E4M3") {
      const int64_t O = t.shape[0], I = t.shape[1];
      const bool table = t.name.find("engram.embed") != std::string::npos;  // rows with a scale per 32 inputs
      auto v = random_values(t.name, O * I, I, hcd, rng);
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
      auto v = random_values(t.name, O * I, I, hcd, rng);
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
    return error(Code::internal, "unhandled dtype " + t.dtype + " of " + t.name);
  }
  return st::write(out_path, ts);
}

// A golden file (../shared/golden/README.md layout) made by the CPU reference itself: B sequences of T
// random ids (below min(500, V)), prefill of P, then T − P decode steps with a draft after each.
inline Status write_cpu_golden(const std::string& model_dir, const std::string& out_path, int B, int T, int P,
                               uint64_t seed) {
  auto m = Model<>::load(model_dir);
  if (!m.ok()) return m.status();
  const ModelShape& s = (*m)->shape();
  std::mt19937_64 rng(seed);
  const int L = s.num_hidden_layers, hc = s.hc_mult, d = s.hidden_size, V = s.vocab_size;
  const int K = s.index_topk, blk = s.dspark_block_size, nt = int(s.dspark_target_layer_ids.size());
  std::vector<int32_t> ids(size_t(B) * T);
  for (auto& x : ids) x = 3 + int32_t(rng() % uint64_t(std::min(497, V - 3)));
  struct Rec {
    int B, T, P, b = 0, K, hc, d;
    std::map<std::string, std::vector<float>> f;        // h.l, pre.l, taps, scores
    std::map<std::string, std::vector<int32_t>> lists;
    std::map<std::string, std::vector<std::vector<float>>> scores;  // per (phase, l): rows of varying n
    std::vector<int64_t> engram;
    int engram_n = 0;
    int L;
    int step = 0, nd = 0;  // the draft being recorded (decode step), drafts per sequence
  } rec{B, T, P, 0, K, hc, d, {}, {}, {}, {}, 0, L, 0, T - P};
  ForwardHooks hooks;
  hooks.ctx = &rec;
  hooks.unit_input = [](void* c, int l, int64_t start, int rows, float* H, float* pre) {
    auto& r = *static_cast<Rec*>(c);
    auto& h = r.f["h." + std::to_string(l)];
    auto& p = r.f["pre." + std::to_string(l)];
    h.resize(size_t(r.B) * r.T * r.hc * r.d);
    p.resize(size_t(r.B) * r.T * r.hc);
    std::copy_n(H, size_t(rows) * r.hc * r.d, h.begin() + (size_t(r.b) * r.T + size_t(start)) * r.hc * r.d);
    std::copy_n(pre, size_t(rows) * r.hc, p.begin() + (size_t(r.b) * r.T + size_t(start)) * r.hc);
  };
  hooks.unit_output = [](void* c, int l, int64_t start, int rows, const float* H, const float* pre) {
    auto& r = *static_cast<Rec*>(c);
    if (l != r.L - 1) return;
    auto& h = r.f["h." + std::to_string(r.L)];
    auto& p = r.f["pre." + std::to_string(r.L)];
    h.resize(size_t(r.B) * r.T * r.hc * r.d);
    p.resize(size_t(r.B) * r.T * r.hc);
    std::copy_n(H, size_t(rows) * r.hc * r.d, h.begin() + (size_t(r.b) * r.T + size_t(start)) * r.hc * r.d);
    std::copy_n(pre, size_t(rows) * r.hc, p.begin() + (size_t(r.b) * r.T + size_t(start)) * r.hc);
  };
  hooks.topk = [](void* c, int l, int64_t start, int rows, int k, int32_t* lists) {
    auto& r = *static_cast<Rec*>(c);
    for (int t = 0; t < rows; ++t) {
      const int64_t pos = start + t;
      const bool pre = pos < r.P;
      const int per_b = pre ? r.P : r.T - r.P;
      auto& v = r.lists[(pre ? "prefill_topk." : "decode_topk.") + std::to_string(l)];
      v.resize(size_t(r.B) * per_b * k, -1);
      std::copy_n(lists + size_t(t) * k, k, v.begin() + (size_t(r.b) * per_b + size_t(pre ? pos : pos - r.P)) * k);
    }
  };
  hooks.index_scores = [](void* c, int l, int64_t start, int rows, int n, const float* sc) {
    auto& r = *static_cast<Rec*>(c);
    for (int t = 0; t < rows; ++t) {
      const int64_t pos = start + t;
      const bool pre = pos < r.P;
      auto& v = r.scores[(pre ? "prefill_scores." : "decode_scores.") + std::to_string(l)];
      const int per_b = pre ? r.P : r.T - r.P;
      v.resize(size_t(r.B) * per_b);
      v[size_t(r.b) * per_b + size_t(pre ? pos : pos - r.P)].assign(sc + size_t(t) * n, sc + size_t(t + 1) * n);
    }
  };
  hooks.engram_ids = [](void* c, int64_t start, int rows, int n, const int64_t* e) {
    auto& r = *static_cast<Rec*>(c);
    r.engram_n = n;
    r.engram.resize(size_t(r.B) * r.T * n);
    std::copy_n(e, size_t(rows) * n, r.engram.begin() + (size_t(r.b) * r.T + size_t(start)) * n);
  };
  hooks.taps = [](void* c, int64_t start, int rows, int width, float* taps) {
    auto& r = *static_cast<Rec*>(c);
    auto& v = r.f["taps"];
    v.resize(size_t(r.B) * r.T * width);
    std::copy_n(taps, size_t(rows) * width, v.begin() + (size_t(r.b) * r.T + size_t(start)) * width);
  };
  // Each DSpark stage's input streams (k = n_dspark: the last stage's output), so a backend's stages can be judged
  // one by one on these inputs as the layer units are.
  hooks.draft_stage = [](void* c, int k, int rows, float* H, float* pre) {
    auto& r = *static_cast<Rec*>(c);
    auto& h = r.f["dspark_h." + std::to_string(k)];
    auto& p = r.f["dspark_pre." + std::to_string(k)];
    h.resize(size_t(r.B) * r.nd * rows * r.hc * r.d);
    p.resize(size_t(r.B) * r.nd * rows * r.hc);
    const size_t row0 = (size_t(r.b) * r.nd + size_t(r.step)) * rows;
    std::copy_n(H, size_t(rows) * r.hc * r.d, h.begin() + row0 * r.hc * r.d);
    std::copy_n(pre, size_t(rows) * r.hc, p.begin() + row0 * r.hc);
  };
  std::vector<float> logits(size_t(B) * T * V), dl(size_t(B) * (T - P) * blk * V), dc(size_t(B) * (T - P) * blk);
  std::vector<int32_t> dids(size_t(B) * (T - P) * (blk + 1));
  for (int b = 0; b < B; ++b) {
    rec.b = b;
    const int32_t* seq = ids.data() + size_t(b) * T;
    SequenceState st = (*m)->new_sequence(T);
    ForwardResult fr;
    DSV41_TRY((*m)->forward(st, std::span<const int32_t>(seq, P), fr, true, &hooks));
    std::copy(fr.logits.begin(), fr.logits.end(), logits.begin() + size_t(b) * T * V);
    for (int t = P; t < T; ++t) {
      DSV41_TRY((*m)->forward(st, std::span<const int32_t>(seq + t, 1), fr, false, &hooks));
      std::copy(fr.logits.begin(), fr.logits.end(), logits.begin() + (size_t(b) * T + t) * V);
      const int32_t y = int32_t(std::max_element(fr.logits.begin(), fr.logits.end()) - fr.logits.begin());
      DraftResult dr;
      rec.step = t - P;
      DSV41_TRY((*m)->draft(st, y, dr, &hooks));
      const size_t i = size_t(b) * (T - P) + size_t(t - P);
      std::copy(dr.ids.begin(), dr.ids.end(), dids.begin() + i * (blk + 1));
      std::copy(dr.logits.begin(), dr.logits.end(), dl.begin() + i * blk * V);
      std::copy(dr.confidence.begin(), dr.confidence.end(), dc.begin() + i * blk);
    }
  }
  std::vector<st::TensorToWrite> ts;
  auto f32t = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    ts.push_back(tensor(name, st::DType::F32, std::move(shape), bytes_of(v.data(), v.size() * 4)));
  };
  auto i32t = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
    ts.push_back(tensor(name, st::DType::I32, std::move(shape), bytes_of(v.data(), v.size() * 4)));
  };
  i32t("input_ids", {B, T}, ids);
  i32t("prefill_length", {1}, std::vector<int32_t>{P});
  for (int l = 0; l <= L; ++l) {
    ts.push_back(tensor("h." + std::to_string(l), st::DType::BF16, {B, T, hc, d}, bf16_bytes(rec.f["h." + std::to_string(l)])));
    f32t("pre." + std::to_string(l), {B, T, hc}, rec.f["pre." + std::to_string(l)]);
  }
  f32t("logits", {B, T, V}, logits);
  for (auto& [name, v] : rec.lists) {
    const int64_t rows = name[0] == 'p' ? P : T - P;
    i32t(name, {B, rows, K}, v);
  }
  for (auto& [name, rows] : rec.scores) {
    size_t N = 0;
    for (auto& r : rows) N = std::max(N, r.size());
    N = std::max<size_t>(N, 1);
    std::vector<float> v(rows.size() * N, -INFINITY);
    for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), v.begin() + r * N);
    f32t(name, {B, int64_t(rows.size() / B), int64_t(N)}, v);
  }
  {
    const int64_t nl = int64_t(s.engram_layer_ids.size());
    ts.push_back(tensor("engram_hash_ids", st::DType::I64, {B, T, nl, rec.engram_n / nl},
                        bytes_of(rec.engram.data(), rec.engram.size() * 8)));
  }
  ts.push_back(tensor("taps", st::DType::BF16, {B, T, int64_t(nt) * d}, bf16_bytes(rec.f["taps"])));
  i32t("dspark_draft_ids", {B, T - P, blk + 1}, dids);
  f32t("dspark_logits", {B, T - P, blk, V}, dl);
  f32t("dspark_confidence", {B, T - P, blk}, dc);
  for (int k = 0; k <= s.n_dspark() && T > P; ++k) {
    const std::string n = std::to_string(k);
    ts.push_back(tensor("dspark_h." + n, st::DType::BF16, {B, T - P, blk, hc, d}, bf16_bytes(rec.f["dspark_h." + n])));
    f32t("dspark_pre." + n, {B, T - P, blk, hc}, rec.f["dspark_pre." + n]);
  }
  return st::write(out_path, ts);
}

}  // namespace dsv41::golden_tools
