// The pieces of the model API both backends share (model.hpp, cpu/forward.hpp): prompt checks, the SPEC §5
// replay split, new_sequence_of, and hooks on window replay (the GPU tests drive the CPU reference with them).
#include <catch2/catch.hpp>

#include <dsv41/model/model.hpp>

#include "fixture.hpp"

using namespace dsv41;

TEST_CASE("check_prompt refuses empty, too long and out-of-vocabulary prompts", "[model][api]") {
  const ModelShape& s = test::tiny_ced().shape();
  const auto ok = test::tiny_prompt(10, 1);
  CHECK(detail::check_prompt(s, 0, 10, ok).ok());
  CHECK(detail::check_prompt(s, 5, 10, ok).code() == Code::out_of_range);
  CHECK(detail::check_prompt(s, 0, 10, std::span<const int32_t>()).code() == Code::invalid_argument);
  std::vector<int32_t> bad = ok;
  bad[3] = s.vocab_size;
  CHECK(detail::check_prompt(s, 0, 10, bad).code() == Code::invalid_argument);
  bad[3] = -1;
  CHECK(detail::check_prompt(s, 0, 10, bad).code() == Code::invalid_argument);
}

TEST_CASE("split_replay takes the last min(W, pos) rows and at most N-1 ids before them", "[model][api]") {
  const ModelShape& s = test::tiny_ced().shape();
  const int W = s.sliding_window, N1 = s.engram_max_ngram_size - 1;
  REQUIRE(W == 8);
  REQUIRE(N1 == 2);
  const auto ids = test::tiny_prompt(40, 2);
  // pos 40: at least W + N − 1 = 10 tokens, at most pos.
  CHECK(split_replay(s, 40, std::span(ids).subspan(31)).status().code() == Code::invalid_argument);
  CHECK(split_replay(s, 30, ids).status().code() == Code::invalid_argument);
  auto r = split_replay(s, 40, std::span(ids).subspan(25));
  REQUIRE(r.ok());
  CHECK(r->S == W);
  CHECK(r->rows.data() == ids.data() + 32);
  CHECK(r->rows.size() == size_t(W));
  CHECK(r->before.size() == size_t(N1));
  CHECK(r->before.data() == ids.data() + 30);
  // A short sequence: every position is replayed, nothing before.
  auto q = split_replay(s, 5, std::span(ids).subspan(0, 5));
  REQUIRE(q.ok());
  CHECK(q->S == 5);
  CHECK(q->before.empty());
}

TEST_CASE("new_sequence_of gives the CPU model's state as a Result", "[model][api]") {
  const auto& m = test::tiny_ced();
  auto st = new_sequence_of(m, 77);
  REQUIRE(st.ok());
  CHECK(st->max_positions == 77);
  CHECK(st->pos == 0);
  CHECK(st->layers.size() == m.schedule().size());
}

TEST_CASE("window replay calls the unit hooks on its rows and keeps positions", "[model][api][replay]") {
  const auto& m = test::tiny_ced();
  const auto ids = test::tiny_prompt(30, 3);
  SequenceState st = m.new_sequence(64);
  REQUIRE(m.prefill(st, ids).ok());
  st.drop_windows();
  struct Seen {
    int units = 0, rows = 0;
    int64_t start = -1;
  } seen;
  ForwardHooks h;
  h.ctx = &seen;
  h.unit_output = [](void* c, int, int64_t start, int rows, const float*, const float*) {
    auto& s = *static_cast<Seen*>(c);
    ++s.units;
    s.rows = rows;
    s.start = start;
  };
  std::vector<float> logits;
  REQUIRE(m.replay_window(st, std::span(ids).subspan(20), &logits, &h).ok());
  CHECK(seen.units == m.shape().num_hidden_layers);
  CHECK(seen.rows == m.shape().sliding_window);
  CHECK(seen.start == 30 - m.shape().sliding_window);
  CHECK(st.pos == 30);
  CHECK(logits.size() == size_t(m.shape().vocab_size));
}
