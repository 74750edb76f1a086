// SPEC §5 bounded replay: where it is exact, what it keeps identical, and that it runs on.
#include <catch2/catch.hpp>

#include <cmath>

#include <dsv41/model/model.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

namespace {
const Model<configs::TinyCed>& tiny() { return test::tiny_ced(); }
std::vector<int32_t> prompt(int n, int seed) { return test::tiny_prompt(n, seed, 7); }
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double n = 0, d = 0;
  for (size_t i = 0; i < a.size(); ++i) { n += double(a[i] - b[i]) * (a[i] - b[i]); d += double(b[i]) * b[i]; }
  return std::sqrt(n / d);
}
bool same_global(const SequenceState& a, const SequenceState& b) {
  for (size_t l = 0; l < a.layers.size(); ++l)
    if (a.layers[l].comp != b.layers[l].comp || a.layers[l].ikeys != b.layers[l].ikeys ||
        a.layers[l].pend_kv != b.layers[l].pend_kv || a.layers[l].n_entries != b.layers[l].n_entries)
      return false;
  return true;
}
}  // namespace

TEST_CASE("decoder bounded replay is exact up to W tokens", "[replay]") {
  const auto& m = tiny();
  const auto ids = prompt(m.shape().sliding_window, 1);
  SequenceState a = m.new_sequence(64), b = m.new_sequence(64);
  std::vector<float> la, lb;
  PrefillOptions bounded;
  bounded.bounded_replay = true;
  REQUIRE(m.prefill(a, ids, &la).ok());
  REQUIRE(m.prefill(b, ids, &lb, bounded).ok());
  CHECK(la == lb);
}

TEST_CASE("decoder bounded replay keeps the global KV exact and decodes on", "[replay]") {
  const auto& m = tiny();
  const auto ids = prompt(48, 2);
  SequenceState a = m.new_sequence(64), b = m.new_sequence(64);
  std::vector<float> la, lb;
  PrefillOptions bounded;
  bounded.bounded_replay = true;
  REQUIRE(m.prefill(a, ids, &la).ok());
  REQUIRE(m.prefill(b, ids, &lb, bounded).ok());
  // Layers 0..4 (encoder and the decoder's first) saw every token: their caches are identical.
  CHECK(same_global(a, b));
  for (int l = 0; l <= 5; ++l) CHECK(a.layers[l].ring == b.layers[l].ring);  // layer 5's input is layer 4's output
  const double r = rel(lb, la);
  WARN("decoder bounded replay, 48-token prompt: last-row logits rel diff " << r);
  CHECK(std::isfinite(r));
  CHECK(r > 0.0);  // it is an approximation: the decoder's window was floored
  // Decoding continues from the bounded state.
  std::vector<float> l2;
  Model<configs::TinyCed>::DecodeItem item{&b, 11, &l2};
  REQUIRE(m.decode(std::span(&item, 1)).ok());
  CHECK(b.pos == 49);
}

TEST_CASE("encoder bounded replay rebuilds dropped windows from the stored global KV", "[replay]") {
  const auto& m = tiny();
  const auto ids = prompt(40, 3);
  SequenceState a = m.new_sequence(64);
  std::vector<float> la;
  REQUIRE(m.prefill(a, ids, &la).ok());
  SequenceState b = a;
  b.drop_windows();
  const int W = m.shape().sliding_window, N1 = m.shape().engram_max_ngram_size - 1;
  std::vector<int32_t> recent(ids.end() - (W + N1), ids.end());
  std::vector<float> lb;
  REQUIRE(m.replay_window(b, recent, &lb).ok());
  CHECK(b.pos == a.pos);
  CHECK(same_global(a, b));
  CHECK(a.layers[0].ring == b.layers[0].ring);  // layer 0's window depends on the embeddings alone
  WARN("encoder bounded replay after 40 tokens: last-row logits rel diff " << rel(lb, la));
  // Too few tokens to hash the replayed rows is an error.
  SequenceState c = a;
  c.drop_windows();
  std::vector<int32_t> short_recent(ids.end() - W, ids.end());
  CHECK(m.replay_window(c, short_recent).code() == Code::invalid_argument);
  // And the replayed state decodes.
  std::vector<float> l2;
  Model<configs::TinyCed>::DecodeItem item{&b, 9, &l2};
  REQUIRE(m.decode(std::span(&item, 1)).ok());
}
