// The decode step captured once and replayed across steps (backend/cuda/decode_graph.hpp): positions, entry counts
// and pointer tables come from device memory, so each replay is a new step. Against the eager decode of the same
// batch it must give the same logits and leave the same caches, bit for bit, across group boundaries of every
// compress ratio; refused steps change nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/numeric/quant.hpp>

#include "model_dirs.hpp"

using namespace dsv41;
using GModel = Model<configs::Dynamic, Cuda>;

namespace {

using gputest::kPy;
using gputest::kTiny;
using gputest::prompt;

std::vector<uint8_t> bytes_of(const void* d, size_t n) {
  std::vector<uint8_t> h(n);
  if (n) REQUIRE(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

// Every cache byte a step writes: rings, compressed entries and index keys up to the count, pending rows.
void require_same_state(const GModel& m, const gpu::DeviceSequence& a, const gpu::DeviceSequence& b) {
  const ModelShape& s = m.shape();
  REQUIRE(a.pos == b.pos);
  REQUIRE(a.history == b.history);
  const size_t we = size_t(num::window_entry_size(s.head_dim)) * s.sliding_window;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    INFO("layer " << l);
    REQUIRE(x.n_entries == y.n_entries);
    REQUIRE(x.n_pend == y.n_pend);
    if (x.ring) CHECK(bytes_of(x.ring, we) == bytes_of(y.ring, we));
    if (!x.comp) continue;
    CHECK(bytes_of(x.comp, size_t(x.n_entries) * num::main_entry_size(s.head_dim)) ==
          bytes_of(y.comp, size_t(y.n_entries) * num::main_entry_size(s.head_dim)));
    CHECK(bytes_of(x.ikeys, size_t(x.n_entries) * num::index_entry_size(s.index_head_dim)) ==
          bytes_of(y.ikeys, size_t(y.n_entries) * num::index_entry_size(s.index_head_dim)));
    if (x.pend_kv && x.n_pend > 0) {
      const size_t pb = size_t(x.n_pend) * s.head_dim * 4;
      CHECK(bytes_of(x.pend_kv, pb) == bytes_of(y.pend_kv, pb));
      CHECK(bytes_of(x.pend_score, pb) == bytes_of(y.pend_score, pb));
    }
  }
}

}  // namespace

TEST_CASE("CUDA decode graph replayed across steps equals the eager decode", "[gpu][decode_graph]") {
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  for (const std::string& dir : {kTiny, kPy}) {
    auto g = GModel::load(dir, stream);
    REQUIRE(g.ok());
    const GModel& m = **g;
    const int V = m.shape().vocab_size;
    int max_ratio = 1;
    for (const LayerRole& r : m.schedule()) max_ratio = std::max(max_ratio, r.ratio);
    const int steps = 2 * max_ratio + 3;  // every ratio's group boundary at least twice
    for (int B : {1, 3}) {
      INFO(dir << " batch " << B);
      std::vector<GModel::State> a, b;
      for (int i = 0; i < B; ++i) {
        const auto ids = prompt(11 + 7 * i, V, 40 + i);  // different positions and group phases
        for (auto* v : {&a, &b}) {
          auto st = m.new_sequence(96);
          REQUIRE(st.ok());
          REQUIRE(m.prefill(*st, ids).ok());
          v->push_back(std::move(st).value());
        }
      }
      std::vector<GModel::State*> pa, pb;
      for (int i = 0; i < B; ++i) {
        pa.push_back(&a[size_t(i)]);
        pb.push_back(&b[size_t(i)]);
      }
      float* d_logits = nullptr;
      REQUIRE(cudaMalloc(&d_logits, size_t(2) * B * V * 4) == cudaSuccess);
      float* ga = d_logits;
      float* gb = d_logits + size_t(B) * V;
      auto graph = capture_decode(m, pb, gb, steps);
      REQUIRE(graph.ok());
      for (int step = 0; step < steps; ++step) {
        INFO("step " << step);
        std::vector<int32_t> toks;
        for (int i = 0; i < B; ++i) toks.push_back(int32_t((step * 131 + i * 17 + 3) % V));
        // The eager reference: the same batch through blocks::decode (a single sequence takes its own path).
        REQUIRE(m.decode(pa, toks, ga).ok());
        REQUIRE((*graph)->step(toks).ok());
        REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
        const auto la = bytes_of(ga, size_t(B) * V * 4), lb = bytes_of(gb, size_t(B) * V * 4);
        CHECK(la == lb);
        for (int i = 0; i < B; ++i) CHECK(a[size_t(i)].pos == b[size_t(i)].pos);
      }
      for (int i = 0; i < B; ++i) require_same_state(m, a[size_t(i)], b[size_t(i)]);
      cudaFree(d_logits);
    }
  }
  cudaStreamDestroy(stream);
}

TEST_CASE("CUDA decode graph refuses bad steps and changes nothing", "[gpu][decode_graph]") {
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    auto g = GModel::load(kTiny, stream);
    REQUIRE(g.ok());
    const GModel& m = **g;
    const int V = m.shape().vocab_size;
    auto st = m.new_sequence(40);
    REQUIRE(st.ok());
    REQUIRE(m.prefill(*st, prompt(20, V, 7)).ok());
    GModel::State* one[] = {&*st};
    float* d_logits = nullptr;
    REQUIRE(cudaMalloc(&d_logits, size_t(V) * 4) == cudaSuccess);
    CHECK(capture_decode(m, std::span<GModel::State* const>(), d_logits, 4).status().code() == Code::invalid_argument);
    CHECK(capture_decode(m, std::span<GModel::State* const>(one), d_logits, 0).status().code() == Code::invalid_argument);
    bool ratio1 = false;
    for (const LayerRole& r : m.schedule()) ratio1 = ratio1 || (r.compresses() && r.ratio == 1);
    auto graph = capture_decode(m, std::span<GModel::State* const>(one), d_logits, 1);
    REQUIRE(graph.ok());
    const int64_t p = st->pos;
    const int32_t bad[] = {V};
    CHECK((*graph)->step(bad).code() == Code::invalid_argument);
    CHECK(st->pos == p);
    const int32_t two[] = {1, 2};
    CHECK((*graph)->step(two).code() == Code::invalid_argument);
    const int32_t tok[] = {5};
    REQUIRE((*graph)->step(tok).ok());
    CHECK(st->pos == p + 1);
    if (ratio1) {  // a horizon of one step: the next step would need more entries than the graph was sized for
      std::vector<std::pair<int64_t, int>> before;
      for (const auto& ls : st->layers) before.emplace_back(ls.n_entries, ls.n_pend);
      CHECK((*graph)->step(tok).code() == Code::out_of_range);
      CHECK(st->pos == p + 1);
      for (size_t l = 0; l < before.size(); ++l) CHECK(st->layers[l].n_entries == before[l].first);
    }
    // Up to the sequence's capacity, then refused.
    auto again = capture_decode(m, std::span<GModel::State* const>(one), d_logits, 64);
    REQUIRE(again.ok());
    while (st->pos < st->max_positions) REQUIRE((*again)->step(tok).ok());
    CHECK((*again)->step(tok).code() == Code::out_of_range);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    // A model on the legacy default stream cannot be captured: refused, not a failed capture.
    auto g0 = GModel::load(kTiny);
    REQUIRE(g0.ok());
    auto s0 = (*g0)->new_sequence(40);
    REQUIRE(s0.ok());
    REQUIRE((*g0)->prefill(*s0, prompt(5, V, 8)).ok());
    GModel::State* one0[] = {&*s0};
    CHECK(capture_decode(**g0, std::span<GModel::State* const>(one0), d_logits, 4).status().code() ==
          Code::invalid_argument);
    cudaFree(d_logits);
  }
  cudaStreamDestroy(stream);
}

// The shared expert on a second stream (UnitOps::set_moe_overlap) changes no bit: prefill, eager decode batches and
// the decode graph (a fork and a join per layer inside the capture) against a model without it.
TEST_CASE("CUDA MoE shared expert on a second stream gives the same logits", "[gpu][decode_graph]") {
  cudaStream_t s1, s2;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  for (const std::string& dir : {kTiny, kPy}) {
    INFO(dir);
    auto plain = GModel::load(dir, s1);
    auto side = GModel::load(dir, s2);
    REQUIRE(plain.ok());
    REQUIRE(side.ok());
    REQUIRE((*side)->backend().set_moe_overlap(true).ok());
    const GModel &m1 = **plain, &m2 = **side;
    const int V = m1.shape().vocab_size, B = 3;
    std::vector<GModel::State> a, b;
    for (int i = 0; i < B; ++i) {
      const auto ids = prompt(30 + 5 * i, V, 70 + i);
      std::vector<float> la, lb;
      auto x = m1.new_sequence(96);
      auto y = m2.new_sequence(96);
      REQUIRE(x.ok());
      REQUIRE(y.ok());
      REQUIRE(m1.prefill(*x, ids, &la).ok());
      REQUIRE(m2.prefill(*y, ids, &lb).ok());
      CHECK(la == lb);
      a.push_back(std::move(x).value());
      b.push_back(std::move(y).value());
    }
    std::vector<GModel::State*> pa, pb;
    for (int i = 0; i < B; ++i) {
      pa.push_back(&a[size_t(i)]);
      pb.push_back(&b[size_t(i)]);
    }
    float *da = nullptr, *db = nullptr;
    REQUIRE(cudaMalloc(&da, size_t(B) * V * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&db, size_t(B) * V * 4) == cudaSuccess);
    auto graph = capture_decode(m2, pb, db, 8);
    REQUIRE(graph.ok());
    for (int step = 0; step < 6; ++step) {
      INFO("step " << step);
      std::vector<int32_t> toks;
      for (int i = 0; i < B; ++i) toks.push_back(int32_t((step * 53 + i * 29 + 1) % V));
      REQUIRE(m1.decode(pa, toks, da).ok());
      if (step % 2 == 0) REQUIRE(m2.decode(pb, toks, db).ok());  // eager with the second stream
      else REQUIRE((*graph)->step(toks).ok());                    // the graph, with the same stream's fork and join
      REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
      CHECK(bytes_of(da, size_t(B) * V * 4) == bytes_of(db, size_t(B) * V * 4));
    }
    for (int i = 0; i < B; ++i) require_same_state(m1, a[size_t(i)], b[size_t(i)]);
    cudaFree(da);
    cudaFree(db);
  }
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}
