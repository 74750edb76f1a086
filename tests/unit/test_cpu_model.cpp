// The CPU reference model on the golden fixture: the contract, chunking invariance, batching, errors.
#include <catch2/catch.hpp>

#include <numeric>

#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

namespace {
const Model<configs::TinyCed>& tiny() { return test::tiny_ced(); }
std::vector<int32_t> prompt(int n, int seed) { return test::tiny_prompt(n, seed); }
bool same_state(const SequenceState& a, const SequenceState& b) {
  if (a.pos != b.pos || a.history != b.history || a.layers.size() != b.layers.size()) return false;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    if (x.ring != y.ring || x.comp != y.comp || x.ikeys != y.ikeys || x.pend_kv != y.pend_kv ||
        x.pend_score != y.pend_score || x.n_entries != y.n_entries)
      return false;
  }
  return true;
}
}  // namespace

TEST_CASE("tiny-ced meets the golden contract", "[model][golden]") {
  auto rep = golden::run(tiny(), DSV41_FIXTURES "/tiny-ced/golden.safetensors");
  REQUIRE(rep.ok());
  INFO(rep->summary());
  CHECK(rep->pass);
  CHECK_FALSE(rep->has_nan);
  CHECK(rep->engram_mismatches == 0);
  CHECK(rep->engram_total == 2 * 64 * 2 * 4);
  CHECK(rep->units.size() == 16);
  for (const auto& u : rep->units) {
    CHECK(u.median <= 1e-3);
    CHECK(u.frac_above <= 0.05);
  }
  CHECK(rep->mean_unit_frac <= 0.02);
  for (const auto& t : rep->topk) CHECK(t.frac_above <= 0.05);
  CHECK(rep->head.max <= 1e-3);
  CHECK(rep->dspark.median <= 1e-3);
  CHECK(rep->dspark.frac_above <= 0.15);
}

TEST_CASE("any chunk split gives the same logits and state as one chunk", "[model]") {
  const auto& m = tiny();
  const auto ids = prompt(45, 7);
  SequenceState one = m.new_sequence(64);
  std::vector<float> ref;
  REQUIRE(m.prefill(one, ids, &ref).ok());
  for (int chunk : {1, 2, 3, 7, 8, 16, 44}) {
    SequenceState st = m.new_sequence(64);
    std::vector<float> got;
    PrefillOptions opt;
    opt.chunk = chunk;
    REQUIRE(m.prefill(st, ids, &got, opt).ok());
    INFO("chunk " << chunk);
    CHECK(got == ref);
    CHECK(same_state(st, one));
  }
}

TEST_CASE("decode continues prefill exactly; a batch of sequences equals each alone", "[model]") {
  const auto& m = tiny();
  const auto a = prompt(20, 1), b = prompt(33, 2);
  // Reference: each sequence alone, three decode steps.
  auto run_alone = [&](const std::vector<int32_t>& p, std::vector<std::vector<float>>& out) {
    SequenceState st = m.new_sequence(64);
    std::vector<float> l;
    REQUIRE(m.prefill(st, p, &l).ok());
    for (int i = 0; i < 3; ++i) {
      const int32_t tok = int32_t(10 + i);
      Model<configs::TinyCed>::DecodeItem item{&st, tok, &l};
      REQUIRE(m.decode(std::span(&item, 1)).ok());
      out.push_back(l);
    }
  };
  std::vector<std::vector<float>> ra, rb;
  run_alone(a, ra);
  run_alone(b, rb);
  SequenceState sa = m.new_sequence(64), sb = m.new_sequence(64);
  REQUIRE(m.prefill(sa, a).ok());
  REQUIRE(m.prefill(sb, b).ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<float> la, lb;
    Model<configs::TinyCed>::DecodeItem batch[2] = {{&sa, int32_t(10 + i), &la}, {&sb, int32_t(10 + i), &lb}};
    REQUIRE(m.decode(batch).ok());
    CHECK(la == ra[i]);
    CHECK(lb == rb[i]);
  }
  CHECK(sa.pos == 23);
  CHECK(sb.pos == 36);
  // Prefill of prompt + tokens gives the same last logits as decoding them.
  auto full = a;
  full.insert(full.end(), {10, 11, 12});
  SequenceState sf = m.new_sequence(64);
  std::vector<float> lf;
  REQUIRE(m.prefill(sf, full, &lf).ok());
  CHECK(lf == ra[2]);
}

TEST_CASE("caches hold the SPEC §6 bytes", "[model]") {
  const auto& m = tiny();
  SequenceState st = m.new_sequence(64);
  REQUIRE(m.prefill(st, prompt(41, 3)).ok());
  const auto& s = m.shape();
  // Layer 2: ratio 2 → 20 entries and one pending row; layer 4: ratio 1 → 41 entries.
  CHECK(st.layers[2].n_entries == 20);
  CHECK(st.layers[2].pend_kv.size() == size_t(s.head_dim));
  CHECK(st.layers[2].comp.size() == 20u * (64 / 2 + 64 / 16));
  CHECK(st.layers[2].ikeys.size() == 20u * (32 / 2 + 32 / 32));
  CHECK(st.layers[4].n_entries == 41);
  CHECK(st.layers[3].comp.empty());
  CHECK(st.window_bytes() == 11u * 8 * (64 + 2));
}

TEST_CASE("bad requests are errors and change nothing", "[model]") {
  const auto& m = tiny();
  SequenceState st = m.new_sequence(16);
  REQUIRE(m.prefill(st, prompt(10, 4)).ok());
  SequenceState before = st;
  Status s = m.prefill(st, prompt(7, 5));
  CHECK(s.code() == Code::out_of_range);
  CHECK(same_state(st, before));
  std::vector<int32_t> bad = {5, 512};
  s = m.prefill(st, bad);
  CHECK(s.code() == Code::invalid_argument);
  CHECK(same_state(st, before));
  CHECK(m.prefill(st, std::vector<int32_t>{}).code() == Code::invalid_argument);
  DraftResult dr;
  SequenceState fresh = m.new_sequence(8);
  CHECK(m.draft(fresh, 3, dr).code() == Code::invalid_argument);
  auto missing = Model<>::load("/nonexistent-model-dir");
  CHECK_FALSE(missing.ok());
  auto wrong = Model<configs::V41Flash>::load(DSV41_FIXTURES "/tiny-ced");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().code() == Code::mismatch);
}

TEST_CASE("prefill cancellation stops between chunks", "[model]") {
  const auto& m = tiny();
  SequenceState st = m.new_sequence(64);
  PrefillOptions opt;
  opt.chunk = 8;
  int calls = 0;
  opt.ctx = &calls;
  opt.on_chunk = [](void* c, int64_t done, int64_t) { ++*static_cast<int*>(c); return done < 16; };
  Status s = m.prefill(st, prompt(40, 6), nullptr, opt);
  CHECK(s.code() == Code::cancelled);
  CHECK(calls == 2);
  CHECK(st.pos == 16);
}
