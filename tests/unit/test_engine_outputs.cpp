// What the engine returns beside tokens: log-probabilities (runtime/logprobs.hpp, Request::on_logprobs: the
// log-softmax of the logits each token was drawn from) and forced continuations (Request::forced).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include <dsv41/runtime/engine.hpp>
#include <dsv41/runtime/generate.hpp>
#include <dsv41/runtime/logprobs.hpp>

#include "fixture.hpp"

using namespace dsv41;

TEST_CASE("logprobs_of: log-softmax, NaN as -inf, top list ordered with ties to the lower id", "[logprobs]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {0.f, float(std::log(2.0)), std::nanf(""), -inf, 0.f};
  std::vector<int32_t> ids;
  std::vector<float> vals;
  const TokenLogprobs lp = logprobs_of(logits, 1, 3, ids, vals);
  // p = (1, 2, 0, 0, 1) / 4
  CHECK(lp.token == 1);
  CHECK(lp.logprob == Approx(std::log(0.5)).margin(1e-6));
  REQUIRE(lp.top_ids.size() == 3);
  CHECK(lp.top_ids[0] == 1);
  CHECK(lp.top_ids[1] == 0);  // tie with id 4: the lower id first
  CHECK(lp.top_ids[2] == 4);
  CHECK(lp.top_logprobs[1] == Approx(std::log(0.25)).margin(1e-6));
  CHECK(logprobs_of(logits, 2, 0, ids, vals).logprob == -inf);
  CHECK(logprobs_of(logits, 2, 0, ids, vals).top_ids.empty());
  const std::vector<float> dead = {-inf, std::nanf("")};
  CHECK(logprobs_of(dead, 0, 2, ids, vals).logprob == -inf);
  CHECK(logprobs_of(logits, 0, 99, ids, vals).top_ids.size() == logits.size());  // n clamps to V
}

namespace {
struct Seen {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, std::vector<float>> lp;
  std::map<RequestId, std::vector<std::vector<int32_t>>> top;
  std::map<RequestId, std::vector<std::vector<float>>> top_lp;
  int order_errors = 0;  // on_token without a preceding on_logprobs for that token
  std::map<RequestId, size_t> pending;
};
bool on_lp(void* c, RequestId id, const TokenLogprobs& l) {
  auto* s = static_cast<Seen*>(c);
  s->lp[id].push_back(l.logprob);
  s->top[id].emplace_back(l.top_ids.begin(), l.top_ids.end());
  s->top_lp[id].emplace_back(l.top_logprobs.begin(), l.top_logprobs.end());
  ++s->pending[id];
  return true;
}
bool on_tok(void* c, RequestId id, int32_t t) {
  auto* s = static_cast<Seen*>(c);
  if (s->pending[id] != s->tokens[id].size() + 1) ++s->order_errors;
  s->tokens[id].push_back(t);
  return true;
}
// log_softmax of a run of the model itself: prefill, then each returned token decoded alone.
std::vector<std::vector<double>> reference(const test::TinyModel& m, const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& toks) {
  auto st = m.new_sequence(int64_t(prompt.size() + toks.size()) + 2);
  std::vector<float> logits;
  REQUIRE(m.prefill(st, prompt, &logits).ok());
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < toks.size(); ++i) {
    double mx = -1e300, sum = 0;
    for (float x : logits) mx = std::max(mx, double(x));
    for (float x : logits) sum += std::exp(double(x) - mx);
    std::vector<double> row(logits.size());
    for (size_t v = 0; v < logits.size(); ++v) row[v] = double(logits[v]) - mx - std::log(sum);
    out.push_back(row);
    if (i + 1 == toks.size()) break;
    typename test::TinyModel::DecodeItem item{&st, toks[i], &logits};
    REQUIRE(m.decode(std::span<typename test::TinyModel::DecodeItem>(&item, 1)).ok());
  }
  return out;
}
}  // namespace

TEST_CASE("engine: on_logprobs reports the distribution each token was drawn from", "[engine][logprobs]") {
  const auto& m = test::tiny_ced();
  EngineOptions o;
  o.step_tokens = 32;
  o.max_running = 4;
  auto e = Engine<test::TinyModel>::make(m, o);
  REQUIRE(e.ok());
  Seen seen;
  std::vector<RequestId> ids;
  std::vector<Request> reqs(3);
  for (int i = 0; i < 3; ++i) {
    Request& r = reqs[size_t(i)];
    r.prompt = test::tiny_prompt(6 + 5 * i, 20 + i, 7);
    r.max_tokens = 8;
    if (i == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.seed = 5;
      r.sampling.top_k = 30;
    }
    r.top_logprobs = i == 2 ? 0 : 5;
    r.on_logprobs = on_lp;
    r.on_token = on_tok;
    r.ctx = &seen;
    auto id = e->submit(r);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  e->run_until_idle(300);
  REQUIRE(e->idle());
  CHECK(seen.order_errors == 0);
  for (int i = 0; i < 3; ++i) {
    INFO("request " << i);
    const RequestId id = ids[size_t(i)];
    const auto& toks = seen.tokens[id];
    REQUIRE(toks.size() == 8);
    REQUIRE(seen.lp[id].size() == toks.size());
    const auto ref = reference(m, reqs[size_t(i)].prompt, toks);
    for (size_t k = 0; k < toks.size(); ++k) {
      const std::vector<double>& row = ref[k];
      CHECK(seen.lp[id][k] == Approx(row[size_t(toks[k])]).margin(1e-4));
      const auto& top = seen.top[id][k];
      CHECK(int(top.size()) == (i == 2 ? 0 : 5));
      for (size_t a = 0; a < top.size(); ++a) {
        CHECK(seen.top_lp[id][k][a] == Approx(row[size_t(top[a])]).margin(1e-4));
        if (a > 0) CHECK(seen.top_lp[id][k][a] <= seen.top_lp[id][k][a - 1]);
      }
      // Nothing outside the list beats its last entry.
      if (!top.empty()) {
        double best_other = -1e300;
        for (size_t v = 0; v < row.size(); ++v)
          if (std::find(top.begin(), top.end(), int32_t(v)) == top.end()) best_other = std::max(best_other, row[v]);
        CHECK(best_other <= double(seen.top_lp[id][k].back()) + 1e-6);
      }
      if (i == 0) CHECK(top[0] == toks[k]);  // greedy: the token is the most likely one
    }
  }
  // Refused: more than kMaxTopLogprobs, or with speculative decoding.
  Request bad = reqs[0];
  bad.top_logprobs = kMaxTopLogprobs + 1;
  auto b = e->submit(bad);
  REQUIRE(b.ok());
  e->step();
  auto bi = e->poll(*b);
  REQUIRE(bi.ok());
  CHECK(bi->finish == RequestFinish::error);
  CHECK(bi->status.message().find("top_logprobs") != std::string::npos);
}

namespace {
std::vector<int32_t> greedy_alone(const test::TinyModel& m, const std::vector<int32_t>& prompt, int n) {
  auto st = m.new_sequence(int64_t(prompt.size()) + n + 2);
  GenerateOptions o;
  o.max_tokens = n;
  auto g = generate(m, st, prompt, o);
  REQUIRE(g.ok());
  return g->tokens;
}
}  // namespace

TEST_CASE("engine: a forced continuation is returned in place of samples, then generation continues from it",
          "[engine][forced]") {
  const auto& m = test::tiny_ced();
  const std::vector<int32_t> prompt = test::tiny_prompt(9, 41, 7);
  const std::vector<int32_t> plain = greedy_alone(m, prompt, 10);
  REQUIRE(plain.size() == 10);
  const std::vector<int32_t> forced = {int32_t((plain[0] + 17) % 500), int32_t((plain[1] + 29) % 500), 3};
  EngineOptions o;
  o.step_tokens = 32;
  o.max_running = 4;
  auto e = Engine<test::TinyModel>::make(m, o);
  REQUIRE(e.ok());
  // From the first token; and after the plain run's second token (the trigger), sharing steps.
  Request a;
  a.prompt = prompt;
  a.max_tokens = 9;
  a.forced = forced;
  Request b = a;
  b.force_after = plain[1];
  auto ia = e->submit(a), ib = e->submit(b);
  REQUIRE(ia.ok());
  REQUIRE(ib.ok());
  e->run_until_idle(200);
  REQUIRE(e->idle());
  auto ta = e->take_tokens(*ia), tb = e->take_tokens(*ib);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  // a: the forced tokens, then greedy generation from prompt + forced.
  std::vector<int32_t> pa = prompt;
  pa.insert(pa.end(), forced.begin(), forced.end());
  std::vector<int32_t> want_a = forced;
  for (int32_t t : greedy_alone(m, pa, 6)) want_a.push_back(t);
  CHECK(*ta == want_a);
  // b: plain up to and including the trigger, the forced tokens, then greedy from all of that.
  std::vector<int32_t> want_b = {plain[0], plain[1]};
  want_b.insert(want_b.end(), forced.begin(), forced.end());
  std::vector<int32_t> pb = prompt;
  pb.insert(pb.end(), want_b.begin(), want_b.end());
  for (int32_t t : greedy_alone(m, pb, 4)) want_b.push_back(t);
  CHECK(*tb == want_b);
  // A trigger that never comes forces nothing.
  Request c = a;
  c.force_after = 511;
  c.max_tokens = 6;
  bool seen511 = false;
  for (int k = 0; k < 6; ++k) seen511 |= plain[size_t(k)] == 511;
  auto ic = e->submit(c);
  REQUIRE(ic.ok());
  e->run_until_idle(200);
  auto tc = e->take_tokens(*ic);
  REQUIRE(tc.ok());
  if (!seen511) CHECK(*tc == std::vector<int32_t>(plain.begin(), plain.begin() + 6));
  // Refused with speculative decoding; forced ids outside the vocabulary refused.
  Request d = a;
  d.forced = {int32_t(m.shape().vocab_size)};
  auto id = e->submit(d);
  REQUIRE(id.ok());
  e->step();
  auto di = e->poll(*id);
  REQUIRE(di.ok());
  CHECK(di->finish == RequestFinish::error);
}
