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
  } rec{B, T, P, 0, K, hc, d, {}, {}, {}, {}, 0, L};
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
      DSV41_TRY((*m)->draft(st, y, dr));
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
  return st::write(out_path, ts);
}

}  // namespace dsv41::golden_tools
