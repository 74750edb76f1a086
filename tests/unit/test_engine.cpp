// The continuous-batching engine (runtime/engine.hpp) on tiny-ced: each request's tokens equal generate()
// run alone with the same options, the step budget, cancellation, per-request errors and admission bounds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <dsv41/runtime/engine.hpp>
#include <dsv41/runtime/shared_engine.hpp>
#include <dsv41/runtime/generate.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

namespace {

using test::TinyModel;
using TinyEngine = Engine<TinyModel>;

const TinyModel& tiny() { return test::tiny_ced(); }

Request make_request(int n, int seed, int max_tokens, SamplingParams sp = {}) {
  Request r;
  r.prompt = test::tiny_prompt(n, seed, 7);
  r.max_tokens = max_tokens;
  r.sampling = sp;
  return r;
}

SamplingParams sampled(float t, uint64_t seed, int top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams p;
  p.temperature = t;
  p.seed = seed;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// The request run alone through generate() in a sequence of capacity cap (0: room for everything).
GenerateResult alone(const Request& r, int64_t cap = 0) {
  GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop_ids = r.stop_ids;
  o.speculative = r.speculative;
  auto st = tiny().new_sequence(cap > 0 ? cap : int64_t(r.prompt.size()) + r.max_tokens + 4);
  auto g = generate(tiny(), st, r.prompt, o);
  REQUIRE(g.ok());
  return *g;
}

RequestFinish expected_finish(FinishReason f) {
  switch (f) {
    case FinishReason::stop: return RequestFinish::stop;
    case FinishReason::cancelled: return RequestFinish::cancelled;
    default: return RequestFinish::length;
  }
}

TinyEngine make_engine(const EngineOptions& o) {
  auto e = TinyEngine::make(tiny(), o);
  REQUIRE(e.ok());
  return std::move(*e);
}

// Runs the engine until idle, within a bound (a request that never leaves would hang the test).
void drain(TinyEngine& e) {
  e.run_until_idle(500);
  REQUIRE(e.idle());
}

RequestInfo info(const TinyEngine& e, RequestId id) {
  auto i = e.poll(id);
  REQUIRE(i.ok());
  return *i;
}

// Tokens a callback collected, per request.
struct Collected {
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, int> finished;
  int cancel_after = -1;  // on_token returns false at this many tokens
};
bool collect(void* c, RequestId id, int32_t t) {
  auto* k = static_cast<Collected*>(c);
  k->tokens[id].push_back(t);
  return k->cancel_after < 0 || int(k->tokens[id].size()) < k->cancel_after;
}
void count_finish(void* c, RequestId id) { ++static_cast<Collected*>(c)->finished[id]; }

}  // namespace

TEST_CASE("engine: options are checked", "[engine]") {
  EngineOptions o;
  o.max_running = 8;
  o.step_tokens = 8;
  auto e = TinyEngine::make(tiny(), o);
  CHECK(e.status().code() == Code::invalid_argument);
  CHECK(e.status().message().find("step_tokens") != std::string::npos);
  o.step_tokens = 9;
  o.max_running = 0;
  CHECK(TinyEngine::make(tiny(), o).status().code() == Code::invalid_argument);
  o.max_running = 4;
  CHECK(TinyEngine::make(tiny(), o).ok());
  o.threads = 0;
  CHECK(TinyEngine::make(tiny(), o).status().code() == Code::invalid_argument);
}

TEST_CASE("engine: concurrent requests each equal generate() alone", "[engine]") {
  std::vector<Request> reqs;
  reqs.push_back(make_request(5, 1, 12));
  reqs.push_back(make_request(9, 2, 12, sampled(0.8f, 11)));
  reqs.push_back(make_request(13, 3, 12, sampled(1.0f, 12, 40)));
  reqs.push_back(make_request(17, 4, 12));
  reqs.push_back(make_request(21, 5, 12, sampled(1.3f, 13, 0, 0.9f)));
  reqs.push_back(make_request(30, 6, 10, sampled(0.7f, 14, 0, 1.f, 0.05f)));
  reqs.push_back(make_request(11, 7, 12, sampled(1.0f, 12, 40)));  // request 2's options, another prompt
  // A stop id: the fourth greedy token of request 3's prompt.
  {
    const auto full = alone(reqs[3]).tokens;
    REQUIRE(full.size() == 12);
    reqs[3].stop_ids = {full[3], 511};
  }
  std::vector<GenerateResult> want;
  for (const auto& r : reqs) want.push_back(alone(r));
  CHECK(want[3].finish == FinishReason::stop);
  // The sampled requests really sample: with another seed request 1 differs.
  {
    Request other = reqs[1];
    other.sampling.seed = 99;
    CHECK(alone(other).tokens != want[1].tokens);
  }

  // (prefill chunk, decode threads): the CPU decode step spread over 3 threads gives the same tokens.
  for (auto [prefill_chunk, threads] : {std::pair{0, 1}, std::pair{4, 1}, std::pair{0, 3}}) {
    EngineOptions o;
    o.step_tokens = 16;
    o.max_running = 8;
    o.prefill_chunk = prefill_chunk;
    o.threads = threads;
    TinyEngine e = make_engine(o);
    Collected col;
    std::vector<RequestId> ids;
    for (size_t i = 0; i < reqs.size(); ++i) {
      Request r = reqs[i];
      if (i % 2 == 1) {  // half push through the callback, half are pulled
        r.on_token = collect;
        r.ctx = &col;
      }
      r.on_finish = count_finish;
      r.ctx = &col;
      auto id = e.submit(r);
      REQUIRE(id.ok());
      ids.push_back(*id);
    }
    std::map<RequestId, std::vector<int32_t>> pulled;
    int most_decoded = 0, steps = 0;
    while (!e.idle()) {
      const StepStats ss = e.step();
      ++steps;
      REQUIRE(steps < 200);
      CHECK(ss.decoded + ss.prefilled <= o.step_tokens);
      if (prefill_chunk > 0) CHECK(ss.prefilled <= prefill_chunk * int(reqs.size()));
      most_decoded = std::max(most_decoded, ss.decoded);
      for (RequestId id : ids) {
        auto t = e.take_tokens(id);
        REQUIRE(t.ok());
        pulled[id].insert(pulled[id].end(), t->begin(), t->end());
      }
    }
    INFO("prefill_chunk " << prefill_chunk << ", threads " << threads << ", steps " << steps);
    CHECK(most_decoded >= 4);  // the requests really shared decode steps
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      const RequestInfo ri = info(e, ids[i]);
      const auto& got = i % 2 == 1 ? col.tokens[ids[i]] : pulled[ids[i]];
      CHECK(got == want[i].tokens);
      CHECK(ri.phase == RequestPhase::finished);
      CHECK(ri.finish == expected_finish(want[i].finish));
      CHECK(ri.prompt_tokens == int64_t(reqs[i].prompt.size()));
      CHECK(ri.prompt_done == ri.prompt_tokens);
      CHECK(ri.completion_tokens == int64_t(want[i].tokens.size()));
      CHECK(ri.unread == 0);
      CHECK(col.finished[ids[i]] == 1);
      if (i == 3) CHECK(ri.stop_id == want[3].stop_id);
    }
    CHECK(e.counts().cache_bytes == 0);
    // Forgotten requests are unknown.
    REQUIRE(e.release(ids[0]).ok());
    CHECK(e.poll(ids[0]).status().code() == Code::invalid_argument);
  }
}

TEST_CASE("engine: a long prefill leaves a running decode one token per step", "[engine]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 4;
  TinyEngine e = make_engine(o);
  const Request a = make_request(6, 21, 30, sampled(0.9f, 5));
  const Request b = make_request(150, 22, 4);
  auto ia = e.submit(a);
  REQUIRE(ia.ok());
  e.step();
  REQUIRE(info(e, *ia).phase == RequestPhase::decoding);
  auto ib = e.submit(b);
  REQUIRE(ib.ok());
  int prefill_steps = 0;
  while (info(e, *ib).phase != RequestPhase::decoding) {
    const int64_t before_a = info(e, *ia).completion_tokens, before_b = info(e, *ib).prompt_done;
    const StepStats ss = e.step();
    const RequestInfo ra = info(e, *ia), rb = info(e, *ib);
    CHECK(ss.decoded == 1);
    CHECK(ra.completion_tokens == before_a + 1);  // the decode was not held back by the prefill
    // The prefill took the rest of the budget (or what was left of the prompt).
    CHECK(rb.prompt_done - before_b == std::min<int64_t>(15, 150 - before_b));
    CHECK(ss.prefilled == rb.prompt_done - before_b);
    REQUIRE(++prefill_steps <= 10);
  }
  CHECK(prefill_steps == 10);  // ceil(150 / 15)
  drain(e);
  auto ta = e.take_tokens(*ia), tb = e.take_tokens(*ib);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  CHECK(*ta == alone(a).tokens);
  CHECK(*tb == alone(b).tokens);
}

TEST_CASE("engine: prefill order, first admitted first or round robin", "[engine]") {
  for (bool rr : {false, true}) {
    EngineOptions o;
    o.step_tokens = 16;
    o.max_running = 2;
    o.round_robin_prefill = rr;
    TinyEngine e = make_engine(o);
    const Request c1 = make_request(40, 31, 3), c2 = make_request(40, 32, 3, sampled(1.1f, 3));
    auto i1 = e.submit(c1), i2 = e.submit(c2);
    REQUIRE(i1.ok());
    REQUIRE(i2.ok());
    e.step();
    e.step();
    INFO("round robin " << rr);
    if (rr) {
      CHECK(info(e, *i1).prompt_done == 16);
      CHECK(info(e, *i2).prompt_done == 16);
    } else {
      CHECK(info(e, *i1).prompt_done == 32);
      CHECK(info(e, *i2).prompt_done == 0);
    }
    drain(e);
    CHECK(*e.take_tokens(*i1) == alone(c1).tokens);
    CHECK(*e.take_tokens(*i2) == alone(c2).tokens);
  }
}

TEST_CASE("engine: cancel frees the slot at once; the next request starts in the next step", "[engine]") {
  EngineOptions o;
  o.step_tokens = 8;
  o.max_running = 1;
  o.max_queued = 3;
  TinyEngine e = make_engine(o);
  Collected col;
  Request a = make_request(40, 41, 5), b = make_request(6, 42, 5, sampled(0.8f, 8)), c = make_request(7, 43, 5);
  for (Request* r : {&a, &b, &c}) {
    r->on_finish = count_finish;
    r->ctx = &col;
  }
  auto ia = e.submit(a), ib = e.submit(b), ic = e.submit(c);
  REQUIRE(ia.ok());
  REQUIRE(ib.ok());
  REQUIRE(ic.ok());
  e.step();
  REQUIRE(info(e, *ia).phase == RequestPhase::prefilling);
  CHECK(info(e, *ia).prompt_done == 8);
  CHECK(info(e, *ib).phase == RequestPhase::queued);
  CHECK(e.counts().cache_bytes == info(e, *ia).cache_bytes);

  // Between prefill chunks: the slot and its bytes are free before any further step.
  REQUIRE(e.cancel(*ia).ok());
  RequestInfo ra = info(e, *ia);
  CHECK(ra.phase == RequestPhase::finished);
  CHECK(ra.finish == RequestFinish::cancelled);
  CHECK(ra.prompt_done == 8);
  CHECK(ra.completion_tokens == 0);
  CHECK(col.finished[*ia] == 1);
  CHECK(e.counts().prefilling == 0);
  CHECK(e.counts().cache_bytes == 0);

  // A queued request cancelled: never admitted.
  REQUIRE(e.cancel(*ic).ok());
  CHECK(info(e, *ic).finish == RequestFinish::cancelled);
  CHECK(info(e, *ic).prompt_done == 0);
  CHECK(e.counts().queued == 1);

  const StepStats ss = e.step();
  CHECK(ss.admitted == 1);
  CHECK(ss.prefilled == 6);
  CHECK(info(e, *ib).phase == RequestPhase::decoding);  // prefilled and its first token returned
  CHECK(info(e, *ib).completion_tokens == 1);
  drain(e);
  CHECK(*e.take_tokens(*ib) == alone(b).tokens);
  CHECK(e.cancel(*ib).ok());  // finished: stays as it was
  CHECK(info(e, *ib).finish == RequestFinish::length);
  CHECK(col.finished[*ia] == 1);
  CHECK(col.finished[*ib] == 1);
  CHECK(col.finished[*ic] == 1);
  CHECK(e.cancel(12345).code() == Code::invalid_argument);

  // A callback returning false cancels after its token.
  col.cancel_after = 2;
  Request d = make_request(6, 44, 8);
  d.on_token = collect;
  d.ctx = &col;
  auto id = e.submit(d);
  REQUIRE(id.ok());
  drain(e);
  CHECK(info(e, *id).finish == RequestFinish::cancelled);
  CHECK(info(e, *id).completion_tokens == 2);
  const auto full = alone(d).tokens;
  CHECK(col.tokens[*id] == std::vector<int32_t>(full.begin(), full.begin() + 2));
}

TEST_CASE("engine: a bad request fails alone; the others finish", "[engine]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 4;
  o.max_positions = 32;
  TinyEngine e = make_engine(o);
  const Request ok1 = make_request(10, 51, 6), ok2 = make_request(12, 52, 6, sampled(0.9f, 5));
  const Request full = make_request(30, 53, 10);  // runs into the 32 positions after 3 tokens
  Request too_long = make_request(40, 54, 4), bad_p = make_request(5, 55, 4, sampled(1.f, 1, 0, 2.f)),
          bad_id = make_request(5, 56, 4), empty = make_request(5, 57, 4);
  bad_id.prompt[2] = 9999;
  empty.prompt.clear();
  Collected col;
  for (Request* r : {&too_long, &bad_p, &bad_id, &empty}) {
    r->on_finish = count_finish;
    r->ctx = &col;
  }
  auto i1 = e.submit(ok1), il = e.submit(too_long), i2 = e.submit(ok2), ip = e.submit(bad_p), ii = e.submit(bad_id),
       ie = e.submit(empty), ifull = e.submit(full);
  for (auto* r : {&i1, &il, &i2, &ip, &ii, &ie, &ifull}) REQUIRE(r->ok());
  const RequestInfo rl = info(e, *il);
  CHECK(rl.phase == RequestPhase::finished);
  CHECK(rl.finish == RequestFinish::error);
  CHECK(rl.status.code() == Code::out_of_range);
  CHECK(rl.status.message().find("prompt of 40 tokens") != std::string::npos);
  CHECK(info(e, *ip).status.code() == Code::invalid_argument);
  CHECK(info(e, *ip).status.message().find("top_p") != std::string::npos);
  CHECK(info(e, *ii).status.message().find("9999") != std::string::npos);
  CHECK(info(e, *ie).status.message().find("empty prompt") != std::string::npos);
  CHECK(e.counts().queued == 3);  // only the good ones wait
  CHECK(col.finished.empty());    // told in the next step
  drain(e);
  for (auto* r : {&il, &ip, &ii, &ie}) CHECK(col.finished[**r] == 1);
  CHECK(*e.take_tokens(*i1) == alone(ok1).tokens);
  CHECK(*e.take_tokens(*i2) == alone(ok2).tokens);
  const GenerateResult gf = alone(full, 32);
  REQUIRE(gf.finish == FinishReason::context_full);
  CHECK(*e.take_tokens(*ifull) == gf.tokens);
  CHECK(gf.tokens.size() == 3);
  CHECK(info(e, *ifull).finish == RequestFinish::length);
  CHECK(info(e, *i1).finish == RequestFinish::length);

  // A sequence larger than the whole cache budget fails at once.
  EngineOptions small = o;
  small.max_cache_bytes = e.sequence_bytes(16) + 1;
  TinyEngine e2 = make_engine(small);
  auto big = e2.submit(make_request(20, 58, 4));  // 23 positions
  REQUIRE(big.ok());
  CHECK(info(e2, *big).status.code() == Code::resource_exhausted);
  CHECK(info(e2, *big).status.message().find("max_cache_bytes") != std::string::npos);
  auto fits = e2.submit(make_request(10, 59, 4));  // 13 positions
  REQUIRE(fits.ok());
  drain(e2);
  CHECK(info(e2, *fits).finish == RequestFinish::length);
  CHECK(info(e2, *fits).completion_tokens == 4);
}

TEST_CASE("engine: admission bounds, a full queue refuses clearly", "[engine]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 2;
  o.max_queued = 3;
  TinyEngine e = make_engine(o);
  std::vector<Request> reqs;
  std::vector<RequestId> ids;
  for (int i = 0; i < 5; ++i) {
    reqs.push_back(make_request(6 + i, 60 + i, 4, sampled(i % 2 ? 0.9f : 0.f, uint64_t(i))));
    auto id = e.submit(reqs.back());
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  auto refused = e.submit(make_request(6, 70, 4));
  CHECK(refused.status().code() == Code::resource_exhausted);
  CHECK(refused.status().message().find("queue full") != std::string::npos);
  const StepStats ss = e.step();
  CHECK(ss.admitted == 2);
  CHECK(e.counts().queued == 3);
  CHECK(e.submit(make_request(6, 70, 4)).status().code() == Code::resource_exhausted);
  drain(e);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(*e.take_tokens(ids[i]) == alone(reqs[i]).tokens);
  CHECK(e.submit(make_request(6, 70, 4)).ok());  // room again

  // The cache budget admits one sequence at a time although two running slots are free.
  EngineOptions c = o;
  // Capacities are 9..13 positions: any one fits, no two do.
  c.max_cache_bytes = 2 * e.sequence_bytes(9) - 1;
  REQUIRE(e.sequence_bytes(13) <= c.max_cache_bytes);
  TinyEngine e2 = make_engine(c);
  ids.clear();
  for (const auto& r : reqs) ids.push_back(*e2.submit(r));
  int steps = 0;
  while (!e2.idle()) {
    e2.step();
    const EngineCounts k = e2.counts();
    CHECK(k.prefilling + k.decoding <= 1);
    CHECK(k.cache_bytes <= c.max_cache_bytes);
    REQUIRE(++steps < 100);
  }
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(*e2.take_tokens(ids[i]) == alone(reqs[i]).tokens);
}

TEST_CASE("engine: speculative requests share steps and equal generate()'s speculative tokens", "[engine][spec]") {
  EngineOptions o;
  o.step_tokens = 32;
  o.max_running = 4;
  std::vector<Request> reqs;
  reqs.push_back(make_request(8, 81, 14));
  reqs.push_back(make_request(10, 82, 14, sampled(0.9f, 21)));
  reqs.push_back(make_request(12, 83, 14));  // plain decode, in the batched decode
  reqs.push_back(make_request(9, 84, 14, sampled(1.2f, 22, 30)));
  for (int i : {0, 1, 3}) reqs[size_t(i)].speculative = true;
  std::vector<GenerateResult> want;
  for (const auto& r : reqs) want.push_back(alone(r));
  {
    Request plain = reqs[0];
    plain.speculative = false;
    REQUIRE(alone(plain).tokens == want[0].tokens);  // speculative greedy is greedy
  }
  TinyEngine e = make_engine(o);
  std::vector<RequestId> ids;
  for (const auto& r : reqs) ids.push_back(*e.submit(r));
  bool mixed = false;
  int steps = 0;
  while (!e.idle()) {
    const StepStats ss = e.step();
    CHECK(ss.decoded + ss.verified + ss.prefilled <= o.step_tokens);
    mixed = mixed || (ss.decoded > 0 && ss.verified > 0);
    REQUIRE(++steps < 200);
  }
  CHECK(mixed);  // verify blocks ran in the same steps as the batched decode
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    const RequestInfo ri = info(e, ids[i]);
    CHECK(*e.take_tokens(ids[i]) == want[i].tokens);
    CHECK(ri.finish == expected_finish(want[i].finish));
    CHECK(ri.spec_steps == want[i].spec_steps);
    CHECK(ri.drafted == want[i].drafted);
    CHECK(ri.accepted == want[i].accepted);
    if (reqs[i].speculative) CHECK(ri.drafted > 0);
  }
  // Verify blocks that could starve prefill are refused per request.
  EngineOptions tight = o;
  tight.step_tokens = 16;
  TinyEngine e2 = make_engine(tight);
  auto bad = e2.submit(reqs[0]);
  REQUIRE(bad.ok());
  CHECK(info(e2, *bad).status.code() == Code::invalid_argument);
  CHECK(info(e2, *bad).status.message().find("step_tokens") != std::string::npos);
}

namespace {
// Cancels another request from a token callback; the request itself is released when done.
struct CrossCancel {
  TinyEngine* e = nullptr;
  RequestId victim = 0;
  std::vector<int32_t> seen;
};
bool cancel_victim(void* c, RequestId, int32_t t) {
  auto* x = static_cast<CrossCancel*>(c);
  x->seen.push_back(t);
  if (x->seen.size() == 2) REQUIRE(x->e->cancel(x->victim).ok());
  return true;
}
}  // namespace

TEST_CASE("engine: priorities order admission; callbacks may cancel others", "[engine]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 1;
  TinyEngine e = make_engine(o);
  Request lo1 = make_request(5, 91, 2), lo2 = make_request(5, 92, 2), hi = make_request(5, 93, 2);
  hi.priority = 5;
  auto i1 = e.submit(lo1), i2 = e.submit(lo2), ih = e.submit(hi);
  REQUIRE(i1.ok());
  REQUIRE(i2.ok());
  REQUIRE(ih.ok());
  e.step();
  CHECK(info(e, *ih).phase == RequestPhase::decoding);  // admitted first although submitted last
  CHECK(info(e, *i1).phase == RequestPhase::queued);
  e.step();  // hi's second token: finished
  CHECK(info(e, *ih).finish == RequestFinish::length);
  e.step();
  CHECK(info(e, *i1).phase != RequestPhase::queued);  // then arrival order
  CHECK(info(e, *i2).phase == RequestPhase::queued);
  drain(e);

  // In one decode batch, x's callback cancels y after x's second token.
  EngineOptions o2;
  o2.step_tokens = 16;
  o2.max_running = 2;
  TinyEngine e2 = make_engine(o2);
  CrossCancel cc;
  cc.e = &e2;
  Request x = make_request(4, 94, 6), y = make_request(4, 95, 6);
  x.on_token = cancel_victim;
  x.ctx = &cc;
  x.release_when_done = true;
  auto ix = e2.submit(x), iy = e2.submit(y);
  REQUIRE(ix.ok());
  REQUIRE(iy.ok());
  cc.victim = *iy;
  drain(e2);
  CHECK(cc.seen == alone(x).tokens);
  CHECK(e2.poll(*ix).status().code() == Code::invalid_argument);  // released once done
  const RequestInfo ry = info(e2, *iy);
  CHECK(ry.finish == RequestFinish::cancelled);
  // Both got their first token in the prefill step; x comes first in the decode batch, so y is cancelled
  // before its second token is returned.
  CHECK(ry.completion_tokens == 1);
  CHECK(*e2.take_tokens(*iy) == std::vector<int32_t>{alone(y).tokens[0]});
  CHECK(e2.counts().cache_bytes == 0);
}

namespace {
// A session store in memory: the whole state at each recorded boundary, keyed by the tokens it holds.
struct MemoryStore {
  int block = 8;
  std::map<std::vector<int32_t>, SequenceState> states;
  std::vector<int64_t> recorded;  // boundary positions, in order
  bool fail_resume = false;
};
SessionHooks<SequenceState> memory_hooks(MemoryStore& ms) {
  SessionHooks<SequenceState> h;
  h.ctx = &ms;
  h.block = ms.block;
  h.resume = [](void* c, SequenceState& st, std::span<const int32_t> ids) -> Result<int64_t> {
    auto* m = static_cast<MemoryStore*>(c);
    if (m->fail_resume) {
      st.pos = 3;  // a store that fails part-way leaves the state dirty
      return error(Code::io_error, "store offline");
    }
    for (int64_t n = (int64_t(ids.size()) - 1) / m->block * m->block; n > 0; n -= m->block) {
      auto it = m->states.find(std::vector<int32_t>(ids.begin(), ids.begin() + n));
      if (it == m->states.end()) continue;
      const int64_t cap = st.max_positions;
      st = it->second;
      st.max_positions = cap;
      return n;
    }
    return int64_t(0);
  };
  h.boundary = [](void* c, const SequenceState& st, std::span<const int32_t> tokens) {
    auto* m = static_cast<MemoryStore*>(c);
    REQUIRE(int64_t(tokens.size()) == st.pos);
    m->recorded.push_back(st.pos);
    m->states[std::vector<int32_t>(tokens.begin(), tokens.end())] = st;
    return Status::Ok();
  };
  return h;
}
}  // namespace

TEST_CASE("engine: requests resume from a session store and record its boundaries", "[engine][session]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 2;
  TinyEngine e = make_engine(o);
  MemoryStore ms;
  e.set_session(memory_hooks(ms));
  // A: 20 prompt tokens, 6 returned: boundaries at 8 and 16 in prefill, 24 after its fourth decode.
  const Request a = make_request(20, 101, 6, sampled(0.8f, 3));
  auto ia = e.submit(a);
  REQUIRE(ia.ok());
  drain(e);
  const auto ta = *e.take_tokens(*ia);
  CHECK(ta == alone(a).tokens);
  CHECK(ms.recorded == std::vector<int64_t>{8, 16, 24});
  CHECK(info(e, *ia).cached_tokens == 0);

  // B continues A's conversation: its first 24 tokens come back from the store.
  Request b = make_request(3, 102, 5);
  b.prompt.insert(b.prompt.begin(), ta.begin(), ta.begin() + 5);
  b.prompt.insert(b.prompt.begin(), a.prompt.begin(), a.prompt.end());  // 20 + 5 + 3 = 28 tokens
  Request b_cold = b;
  b_cold.use_session = false;
  auto ib = e.submit(b), ic = e.submit(b_cold);
  REQUIRE(ib.ok());
  REQUIRE(ic.ok());
  const StepStats first = e.step();
  CHECK(info(e, *ib).cached_tokens == 24);
  CHECK(info(e, *ib).prompt_done == 28);       // 4 tokens ran
  CHECK(info(e, *ic).prompt_done == 12);       // the rest of the budget
  CHECK(first.prefilled == 16);
  drain(e);
  const auto want = alone(b).tokens;
  CHECK(*e.take_tokens(*ib) == want);
  CHECK(*e.take_tokens(*ic) == want);
  CHECK(info(e, *ic).cached_tokens == 0);

  // A failing store is a miss: the request runs cold from a fresh state.
  ms.fail_resume = true;
  auto id = e.submit(b);
  REQUIRE(id.ok());
  drain(e);
  CHECK(info(e, *id).finish == RequestFinish::length);
  CHECK(info(e, *id).cached_tokens == 0);
  CHECK(*e.take_tokens(*id) == want);
}

TEST_CASE("engine: a decode step over 4 threads equals one thread", "[engine][threads][tsan]") {
  std::vector<Request> reqs;
  for (int i = 0; i < 5; ++i) reqs.push_back(make_request(6 + i, 40 + i, 6, i % 2 ? sampled(0.9f, 70 + i) : SamplingParams{}));
  std::vector<std::vector<int32_t>> got[2];
  for (int threads : {1, 4}) {
    EngineOptions o;
    o.step_tokens = 64;
    o.max_running = 5;
    o.threads = threads;
    TinyEngine e = make_engine(o);
    std::vector<RequestId> ids;
    for (const auto& r : reqs) {
      auto id = e.submit(r);
      REQUIRE(id.ok());
      ids.push_back(*id);
    }
    int most_decoded = 0;
    for (int steps = 0; !e.idle(); ++steps) {
      REQUIRE(steps < 100);
      most_decoded = std::max(most_decoded, e.step().decoded);
    }
    CHECK(most_decoded == 5);  // all five in one step, on 4 threads in groups of 1, 1, 1 and 2
    for (RequestId id : ids) {
      auto t = e.take_tokens(id);
      REQUIRE(t.ok());
      CHECK(t->size() == 6);
      got[threads == 4].push_back(*t);
    }
  }
  CHECK(got[0] == got[1]);
  CHECK(got[0][0] == alone(reqs[0]).tokens);
  CHECK(got[1][3] == alone(reqs[3]).tokens);
}

TEST_CASE("engine: SharedEngine serves client threads while one thread steps", "[engine][threads][tsan]") {
  EngineOptions o;
  o.step_tokens = 16;
  o.max_running = 3;
  o.max_queued = 2;  // fewer slots than clients: some submits are refused and retried
  SharedEngine<TinyModel> se(make_engine(o));
  constexpr int kClients = 6;
  std::vector<Request> reqs;
  for (int i = 0; i < kClients; ++i) reqs.push_back(make_request(5 + 3 * i, 110 + i, 8, sampled(i % 2 ? 0.9f : 0.f, uint64_t(i))));
  struct Outcome {
    std::vector<int32_t> tokens;
    RequestFinish finish = RequestFinish::none;
    int refusals = 0;
    bool errors = false;
    bool cancel_sent = false;
  };
  std::vector<Outcome> out(kClients);
  std::atomic<bool> stop{false};
  std::thread driver([&] {
    while (!(stop.load() && se.idle())) {
      if (se.idle()) std::this_thread::yield();
      else se.step();
    }
  });
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      Outcome& oc = out[size_t(i)];
      Result<RequestId> id = error(Code::internal, "not yet");
      for (;;) {
        id = se.submit(reqs[size_t(i)]);
        if (id.ok()) break;
        if (id.status().code() != Code::resource_exhausted) {
          oc.errors = true;
          return;
        }
        ++oc.refusals;
        std::this_thread::yield();
      }
      for (;;) {
        auto t = se.take_tokens(*id);
        auto p = se.poll(*id);
        if (!t.ok() || !p.ok()) {
          oc.errors = true;
          return;
        }
        oc.tokens.insert(oc.tokens.end(), t->begin(), t->end());
        // Client 5 hangs up after its first token.
        if (i == 5 && !oc.tokens.empty() && p->phase != RequestPhase::finished && !oc.cancel_sent) {
          if (!se.cancel(*id).ok()) oc.errors = true;
          oc.cancel_sent = true;
          continue;
        }
        if (p->phase == RequestPhase::finished && p->unread == 0 && t->empty()) {
          oc.finish = p->finish;
          oc.errors = !se.release(*id).ok();
          return;
        }
        std::this_thread::yield();
      }
    });
  for (auto& c : clients) c.join();
  stop = true;
  driver.join();
  int refusals = 0;
  for (int i = 0; i < kClients; ++i) {
    INFO("client " << i);
    const Outcome& oc = out[size_t(i)];
    CHECK(!oc.errors);
    refusals += oc.refusals;
    const auto want = alone(reqs[size_t(i)]).tokens;
    if (i == 5) {
      // The stepping thread may finish the request between the client's poll and its cancel (a short request on
      // a fast model): then it ends by its length with every token; else the cancel ends it.
      INFO("cancel sent: " << oc.cancel_sent << ", tokens " << oc.tokens.size() << " of " << want.size());
      if (oc.finish != RequestFinish::cancelled) {
        CHECK(oc.finish == RequestFinish::length);
        CHECK(oc.tokens.size() == want.size());
      }
      REQUIRE(!oc.tokens.empty());
      REQUIRE(oc.tokens.size() <= want.size());
      CHECK(oc.tokens == std::vector<int32_t>(want.begin(), want.begin() + std::ptrdiff_t(oc.tokens.size())));
    } else {
      CHECK(oc.finish == RequestFinish::length);
      CHECK(oc.tokens == want);
    }
  }
  INFO("refusals " << refusals);
  CHECK(se.idle());
  CHECK(se.counts().cache_bytes == 0);
}

TEST_CASE("engine: a finished request's state goes to the store's finish hook and the next turn continues it",
          "[engine][session]") {
  struct Kept {
    std::vector<int32_t> tokens;
    std::optional<SequenceState> st;
    int handed = 0;
  } kept;
  SessionHooks<SequenceState> h;
  h.ctx = &kept;
  h.block = 8;
  h.resume = [](void* c, SequenceState& st, std::span<const int32_t> ids) -> Result<int64_t> {
    auto* k = static_cast<Kept*>(c);
    if (!k->st || ids.size() <= k->tokens.size() || !std::equal(k->tokens.begin(), k->tokens.end(), ids.begin()))
      return int64_t(0);
    const int64_t cap = st.max_positions;
    st = std::move(*k->st);
    k->st.reset();
    st.max_positions = std::max(cap, st.max_positions);
    return int64_t(k->tokens.size());
  };
  h.boundary = [](void*, const SequenceState&, std::span<const int32_t>) { return Status::Ok(); };
  h.finish = [](void* c, SequenceState&& st, std::span<const int32_t> tokens) {
    auto* k = static_cast<Kept*>(c);
    REQUIRE(int64_t(tokens.size()) == st.pos);
    k->tokens.assign(tokens.begin(), tokens.end());
    k->st.emplace(std::move(st));
    ++k->handed;
  };
  EngineOptions o;
  o.step_tokens = 16;
  TinyEngine e = make_engine(o);
  e.set_session(h);
  const Request a = make_request(20, 101, 6, sampled(0.8f, 3));
  auto ia = e.submit(a);
  REQUIRE(ia.ok());
  drain(e);
  const auto ta = *e.take_tokens(*ia);
  REQUIRE(ta.size() == 6);
  REQUIRE(kept.handed == 1);
  // The state holds the prompt and the generated tokens but the last (sampled, not yet run).
  std::vector<int32_t> held(a.prompt.begin(), a.prompt.end());
  held.insert(held.end(), ta.begin(), ta.end() - 1);
  CHECK(kept.tokens == held);
  CHECK(kept.st->pos == 25);

  Request b = make_request(3, 102, 5);
  b.prompt.insert(b.prompt.begin(), ta.begin(), ta.end());
  b.prompt.insert(b.prompt.begin(), a.prompt.begin(), a.prompt.end());  // 20 + 6 + 3 = 29 tokens
  auto ib = e.submit(b);
  REQUIRE(ib.ok());
  drain(e);
  CHECK(info(e, *ib).cached_tokens == 25);
  CHECK(*e.take_tokens(*ib) == alone(b).tokens);
  CHECK(kept.handed == 2);  // b's state is kept in turn

  // A cancelled request's state is not handed over.
  Request c = make_request(4, 103, 50);
  auto ic = e.submit(c);
  REQUIRE(ic.ok());
  e.step();
  REQUIRE(e.cancel(*ic).ok());
  drain(e);
  CHECK(kept.handed == 2);
}

TEST_CASE("Model::prefill_batch on the CPU: each chunk as its own prefill; an invalid item fails first") {
  const TinyModel& m = tiny();
  const std::vector<int32_t> a = test::tiny_prompt(11, 40, 7), b = test::tiny_prompt(5, 41, 7);
  auto sa = m.new_sequence(64), sb = m.new_sequence(64), ra = m.new_sequence(64), rb = m.new_sequence(64);
  std::vector<float> la, lb, ea, eb;
  REQUIRE(m.prefill(ra, a, &ea).ok());
  REQUIRE(m.prefill(rb, b, &eb).ok());
  std::vector<TinyModel::PrefillItem> items = {{&sa, a, &la}, {&sb, b, &lb}};
  REQUIRE(m.prefill_batch(items).ok());
  CHECK(sa.pos == 11);
  CHECK(sb.pos == 5);
  CHECK(la == ea);
  CHECK(lb == eb);
  // A chunk past its sequence's capacity: out_of_range, and no item ran.
  auto small = m.new_sequence(4);
  std::vector<TinyModel::PrefillItem> bad = {{&sa, b, nullptr}, {&small, a, nullptr}};
  CHECK(m.prefill_batch(bad).code() == Code::out_of_range);
  CHECK(sa.pos == 11);
  CHECK(small.pos == 0);
  // all_rows: every row's logits, as forward with all_logits.
  auto sc = m.new_sequence(64), rc = m.new_sequence(64);
  std::vector<float> lc;
  ForwardResult fc;
  REQUIRE(m.forward(rc, b, fc, /*all_logits=*/true).ok());
  std::vector<TinyModel::PrefillItem> rows = {{&sc, b, &lc}};
  REQUIRE(m.prefill_batch(rows, /*all_rows=*/true).ok());
  CHECK(lc.size() == b.size() * size_t(m.shape().vocab_size));
  CHECK(lc == fc.logits);
  // The same sequence twice is refused on every backend (the GPU's forward could not run both), nothing run.
  std::vector<TinyModel::PrefillItem> twice = {{&sa, b, nullptr}, {&sa, b, nullptr}};
  CHECK(m.prefill_batch(twice).code() == Code::invalid_argument);
  CHECK(sa.pos == 11);
  // A null state is refused.
  std::vector<TinyModel::PrefillItem> null_item = {{nullptr, a, nullptr}};
  CHECK(m.prefill_batch(null_item).code() == Code::invalid_argument);
}

namespace {
// tiny-ced presented as a backend that batches sequences (on_host false): prefill_batch runs its items one by one on
// the CPU model, so the engine's batched prefill and batched verify run here (CI has no GPU) and must give exactly
// the tokens generate() gives alone. It counts what the engine handed it.
struct BatchingTiny {
  using State = TinyModel::State;
  using Snapshot = TinyModel::Snapshot;
  using DecodeItem = TinyModel::DecodeItem;
  using PrefillItem = TinyModel::PrefillItem;
  static constexpr bool on_host = false;
  const TinyModel* m = nullptr;
  mutable int prefill_calls = 0, most_prefill_items = 0, verify_calls = 0, most_verify_items = 0;

  const ModelShape& shape() const { return m->shape(); }
  State new_sequence(int64_t n) const { return m->new_sequence(n); }
  Status prefill(State& st, std::span<const int32_t> ids, std::vector<float>* last, const PrefillOptions& o = {}) const {
    return m->prefill(st, ids, last, o);
  }
  Status decode(std::span<DecodeItem> batch) const { return m->decode(batch); }
  Status check_chunk(const State& st, std::span<const int32_t> ids) const { return m->check_chunk(st, ids); }
  Status prefill_batch(std::span<PrefillItem> items, bool all_rows = false) const {
    int& calls = all_rows ? verify_calls : prefill_calls;
    int& most = all_rows ? most_verify_items : most_prefill_items;
    ++calls;
    most = std::max(most, int(items.size()));
    return m->prefill_batch(items, all_rows);
  }
  Result<Snapshot> snapshot(const State& st, std::span<const int32_t> ids) const { return m->snapshot(st, ids); }
  Status rollback(State& st, const Snapshot& sn, int keep) const { return m->rollback(st, sn, keep); }
};
using DrafterFn = int (*)(void*, std::span<const int32_t>, int, int32_t*);
Result<SpecStep<BatchingTiny::Snapshot>> speculative_step(const BatchingTiny& b, BatchingTiny::State& st, int32_t y,
                                                          int k, Sampler& s, DrafterFn d, void* ctx,
                                                          std::span<const int32_t> g, SpecScratch& sc) {
  return dsv41::speculative_step(*b.m, st, y, k, s, d, ctx, g, sc);
}
Result<BatchingTiny::Snapshot> speculative_draft(const BatchingTiny& b, const BatchingTiny::State& st, int32_t y, int k,
                                                 Sampler& s, DrafterFn d, void* ctx, std::span<const int32_t> g,
                                                 SpecScratch& sc) {
  return dsv41::speculative_draft(*b.m, st, y, k, s, d, ctx, g, sc);
}
}  // namespace

TEST_CASE("engine: batched prefill and batched verify (a backend that batches) equal generate() alone", "[engine][spec]") {
  BatchingTiny bm{&tiny()};
  for (const bool batch : {true, false}) {
    INFO("batch_prefill " << batch);
    EngineOptions o;
    o.step_tokens = 64;
    o.max_running = 5;
    o.batch_prefill = batch;
    std::vector<Request> reqs;
    reqs.push_back(make_request(8, 91, 12));
    reqs.push_back(make_request(11, 92, 12, sampled(0.9f, 31)));
    reqs.push_back(make_request(5, 93, 12));
    reqs.push_back(make_request(9, 94, 12, sampled(1.1f, 32, 20)));
    reqs.push_back(make_request(13, 95, 12));
    for (int i : {0, 1, 3}) reqs[size_t(i)].speculative = true;
    std::vector<GenerateResult> want;
    for (const auto& r : reqs) want.push_back(alone(r));
    bm.prefill_calls = bm.most_prefill_items = bm.verify_calls = bm.most_verify_items = 0;
    auto made = Engine<BatchingTiny>::make(bm, o);
    REQUIRE(made.ok());
    auto& e = *made;
    std::vector<RequestId> ids;
    for (const auto& r : reqs) ids.push_back(*e.submit(r));
    e.run_until_idle(300);
    REQUIRE(e.idle());
    for (size_t i = 0; i < reqs.size(); ++i) {
      INFO("request " << i);
      auto ri = e.poll(ids[i]);
      REQUIRE(ri.ok());
      CHECK(*e.take_tokens(ids[i]) == want[i].tokens);
      CHECK(ri->accepted == want[i].accepted);
      CHECK(ri->finish == expected_finish(want[i].finish));
    }
    if (batch) {
      CHECK(bm.most_prefill_items == 5);  // all five prompts fit the first step's budget: one batched prefill
      CHECK(bm.most_verify_items >= 2);   // speculative requests' verify blocks shared a forward
    } else {
      CHECK(bm.prefill_calls == 0);
      CHECK(bm.verify_calls == 0);
    }
  }
}
