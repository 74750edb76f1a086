// The active tier (session/active_sessions.hpp): live states kept between requests. take returns the longest kept
// proper prefix of a prompt and removes it; the count and byte limits drop the least recently put; the TTL drops
// idle states through an injected clock; 4 threads putting and taking lose and duplicate nothing; on the tiny-ced
// fixture a taken state continued by the rest of the prompt gives the cold prefill's logits exactly.
#include <catch2/catch.hpp>

#if __has_include(<xxhash.h>)  // the session headers use xxhash (Debian: libxxhash-dev)
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/runtime/generate.hpp>
#include <dsv41/session/active_sessions.hpp>
#include <dsv41/session/session_cache.hpp>

#include "fixture.hpp"

using namespace dsv41;
using namespace dsv41::session;

namespace {

// A stand-in state: what ActiveSessions needs (pos, max_positions, the byte accounting) and a payload that tells
// states apart and shows whether a refused put moved it away.
struct Fake {
  int64_t pos = 0, max_positions = 0;
  std::vector<int32_t> history;
  std::vector<int> payload;
  size_t size = 0;
  size_t global_cache_bytes() const { return size; }
  size_t window_bytes() const { return 0; }
};
Fake fake(int64_t pos, int tag, size_t size = 1) { return Fake{pos, pos + 16, {}, {tag}, size}; }
size_t fake_bytes(const Fake& f) { return f.size; }
std::vector<int32_t> ids(std::initializer_list<int32_t> l) { return std::vector<int32_t>(l); }

struct FakeClock {
  double t = 0;
  static double now(void* c) { return static_cast<FakeClock*>(c)->t; }
  Clock clock() { return Clock{&FakeClock::now, this}; }
};

}  // namespace

TEST_CASE("take returns the longest kept proper prefix and removes it", "[session][active]") {
  ActiveSessions<Fake> a(ActiveOptions{0, 0, 600, {}});
  REQUIRE(a.put(ids({1, 2, 3}), fake(3, 10)).ok());
  REQUIRE(a.put(ids({1, 2, 3, 4, 5}), fake(5, 11)).ok());
  REQUIRE(a.put(ids({1, 9}), fake(2, 12)).ok());
  const auto p = ids({1, 2, 3, 4, 5, 6});
  auto t = a.take(p);
  REQUIRE(t);
  CHECK(t->tokens == 5);
  CHECK(t->state.payload == std::vector<int>{11});
  t = a.take(p);  // the longest is gone: the next longest
  REQUIRE(t);
  CHECK(t->tokens == 3);
  CHECK(t->state.payload == std::vector<int>{10});
  CHECK_FALSE(a.take(p));
  CHECK(a.stats().entries == 1);  // {1, 9} is no prefix of p
  CHECK(a.stats().hits == 2);
  CHECK(a.stats().misses == 1);
}

TEST_CASE("no match for a non-prefix, an equal or a shorter prompt", "[session][active]") {
  ActiveSessions<Fake> a;
  REQUIRE(a.put(ids({1, 2, 3}), fake(3, 1)).ok());
  CHECK_FALSE(a.take(ids({1, 2, 3})));        // extends it by nothing
  CHECK_FALSE(a.take(ids({1, 2})));           // shorter
  CHECK_FALSE(a.take(ids({1, 2, 4, 5})));     // differs at the third token
  CHECK_FALSE(a.take(ids({0, 1, 2, 3, 4})));  // contains it, not as a prefix
  CHECK_FALSE(a.take(std::vector<int32_t>{}));
  auto t = a.take(ids({1, 2, 3, 0}));
  REQUIRE(t);
  CHECK(t->tokens == 3);
}

TEST_CASE("put refuses a state that does not match its tokens and leaves it with the caller", "[session][active]") {
  ActiveSessions<Fake> a;
  Fake f = fake(4, 7);
  CHECK(a.put(ids({1, 2, 3}), std::move(f)).code() == Code::invalid_argument);
  CHECK(f.payload == std::vector<int>{7});
  CHECK(a.stats().entries == 0);
}

TEST_CASE("the same tokens or the same session id put again replace the kept state", "[session][active]") {
  ActiveSessions<Fake> a;
  REQUIRE(a.put(ids({1, 2}), fake(2, 1)).ok());
  REQUIRE(a.put(ids({1, 2}), fake(2, 2)).ok());
  CHECK(a.stats().entries == 1);
  REQUIRE(a.put(ids({5, 6}), fake(2, 3), "s").ok());
  REQUIRE(a.put(ids({5, 6, 7}), fake(3, 4), "s").ok());
  CHECK(a.stats().entries == 2);
  CHECK(a.stats().replaced == 2);
  auto t = a.take(ids({1, 2, 0}));
  REQUIRE(t);
  CHECK(t->state.payload == std::vector<int>{2});
  // By id: only that id's states; the other id's longer match is not taken.
  REQUIRE(a.put(ids({5, 6, 7, 8}), fake(4, 5), "other").ok());
  t = a.take(std::string("s"), ids({5, 6, 7, 8, 9}));
  REQUIRE(t);
  CHECK(t->state.payload == std::vector<int>{4});
  CHECK_FALSE(a.take(std::string("s"), ids({5, 6, 7, 8, 9})));
  t = a.take(ids({5, 6, 7, 8, 9}));
  REQUIRE(t);
  CHECK(t->state.payload == std::vector<int>{5});
}

TEST_CASE("the count limit drops the least recently put", "[session][active]") {
  ActiveSessions<Fake> a(ActiveOptions{0, 2, 600, {}});
  REQUIRE(a.put(ids({1}), fake(1, 1)).ok());
  REQUIRE(a.put(ids({2}), fake(1, 2)).ok());
  REQUIRE(a.put(ids({3}), fake(1, 3)).ok());
  CHECK(a.stats().entries == 2);
  CHECK(a.stats().evicted == 1);
  CHECK_FALSE(a.take(ids({1, 0})));
  CHECK(a.take(ids({2, 0})));
  CHECK(a.take(ids({3, 0})));
}

TEST_CASE("the byte limit drops the least recently put and refuses a state larger than it", "[session][active]") {
  ActiveSessions<Fake> a(ActiveOptions{100, 0, 600, {}}, &fake_bytes);
  REQUIRE(a.put(ids({1}), fake(1, 1, 40)).ok());
  REQUIRE(a.put(ids({2}), fake(1, 2, 40)).ok());
  CHECK(a.stats().bytes == 80);
  REQUIRE(a.put(ids({3}), fake(1, 3, 30)).ok());  // 110 > 100: {1} goes
  CHECK(a.stats().bytes == 70);
  CHECK(a.stats().evicted == 1);
  Fake big = fake(1, 4, 101);
  CHECK(a.put(ids({4}), std::move(big)).code() == Code::out_of_range);
  CHECK(big.payload == std::vector<int>{4});
  CHECK(a.stats().entries == 2);
  CHECK_FALSE(a.take(ids({1, 0})));
  auto t = a.take(ids({2, 0}));
  REQUIRE(t);
  CHECK(a.stats().bytes == 30);
}

TEST_CASE("state_bytes counts a CPU state's caches, pending rows and history", "[session][active]") {
  const auto& m = test::tiny_ced();
  SequenceState st = m.new_sequence(64);
  REQUIRE(m.prefill(st, test::tiny_prompt(21, 5)).ok());
  size_t pend = 0;
  for (const auto& l : st.layers) pend += (l.pend_kv.size() + l.pend_score.size()) * sizeof(float);
  CHECK(pend > 0);  // 21 is not a multiple of the ratios: groups are open
  CHECK(st.global_cache_bytes() > 0);
  CHECK(state_bytes(st) == st.global_cache_bytes() + st.window_bytes() + pend + st.history.size() * 4);
}

TEST_CASE("an idle state expires after the TTL (injected clock)", "[session][active]") {
  FakeClock c;
  ActiveSessions<Fake> a(ActiveOptions{0, 0, 10, c.clock()});
  REQUIRE(a.put(ids({1}), fake(1, 1)).ok());
  c.t = 5;
  REQUIRE(a.put(ids({2}), fake(1, 2)).ok());
  c.t = 9.5;
  CHECK(a.stats().entries == 2);
  c.t = 10.5;  // {1} was put at 0: expired; {2} at 5: still kept
  CHECK_FALSE(a.take(ids({1, 0})));
  CHECK(a.stats().expired == 1);
  CHECK(a.take(ids({2, 0})));
  REQUIRE(a.put(ids({3}), fake(1, 3)).ok());
  c.t = 30;
  CHECK(a.reclaim_expired() == 1);
  CHECK(a.stats().entries == 0);
}

TEST_CASE("4 threads putting and taking: every state taken once, none lost", "[session][active][tsan]") {
  ActiveSessions<Fake> a(ActiveOptions{0, 0, 1e9, {}});
  constexpr int kThreads = 4, kEach = 300;
  std::vector<std::vector<int>> got(kThreads);
  std::atomic<int> refused{0};  // Catch2 assertions are not thread-safe: count in the threads, check after
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        if (!a.put(ids({t, i}), fake(2, t * kEach + i)).ok()) ++refused;
        // Take a neighbour's state (it may not be there yet) and, by a prompt both match, any of t's.
        if (auto x = a.take(ids({(t + 1) % kThreads, i, 0}))) got[size_t(t)].push_back(x->state.payload[0]);
        if (auto x = a.take(ids({t, i / 2, 0}))) got[size_t(t)].push_back(x->state.payload[0]);
      }
    });
  for (auto& x : th) x.join();
  CHECK(refused == 0);
  std::vector<int> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kEach; ++i)
      if (auto x = a.take(ids({t, i, 0}))) all.push_back(x->state.payload[0]);
  std::sort(all.begin(), all.end());
  CHECK(all.size() == size_t(kThreads * kEach));
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  CHECK(a.stats().entries == 0);
  CHECK(a.stats().bytes == 0);
}

namespace {
struct CountingCache {  // stands for SessionCache: records that it was asked
  int calls = 0;
  Result<ResumeInfo> resume(SequenceState&, std::span<const int32_t>) {
    ++calls;
    return ResumeInfo{};
  }
};
}  // namespace

TEST_CASE("a taken state continued by the rest of the prompt is the cold prefill exactly", "[session][active]") {
  const auto& m = test::tiny_ced();
  ActiveSessions<SequenceState> a;
  CountingCache lower;
  const auto turn1 = test::tiny_prompt(37, 11);
  SequenceState s1 = m.new_sequence(40);  // less than turn 2 needs: a CPU state's limit is raised on take
  REQUIRE(m.prefill(s1, turn1).ok());
  REQUIRE(a.put(turn1, std::move(s1)).ok());
  auto turn2 = turn1;
  for (int i = 0; i < 20; ++i) turn2.push_back(int32_t(5 + 13 * i));

  SequenceState s2 = m.new_sequence(96);
  auto r = resume_or_take(a, &lower, s2, turn2);
  REQUIRE(r.ok());
  CHECK(r->active_hit);
  CHECK(r->cached_tokens == 37);
  CHECK(lower.calls == 0);
  CHECK(s2.pos == 37);
  CHECK(s2.max_positions == 96);
  std::vector<float> got, want;
  REQUIRE(m.prefill(s2, std::span(turn2).subspan(37), &got).ok());
  SequenceState cold = m.new_sequence(96);
  REQUIRE(m.prefill(cold, turn2, &want).ok());
  REQUIRE(got.size() == size_t(m.shape().vocab_size));
  CHECK(got == want);
  CHECK(s2.history == cold.history);

  // The tier is empty now: the next prompt goes to the lower tier.
  SequenceState s3 = m.new_sequence(96);
  r = resume_or_take(a, &lower, s3, turn2);
  REQUIRE(r.ok());
  CHECK_FALSE(r->active_hit);
  CHECK(lower.calls == 1);
}

TEST_CASE("after generate the state holds all but the last token: kept so, the next turn continues it exactly",
          "[session][active]") {
  const auto& m = test::tiny_ced();
  ActiveSessions<SequenceState> a;
  const auto prompt = test::tiny_prompt(30, 4);
  SequenceState s1 = m.new_sequence(64);
  GenerateOptions g;
  g.max_tokens = 6;
  auto gen = generate(m, s1, prompt, g);
  REQUIRE(gen.ok());
  REQUIRE(gen->tokens.size() == 6);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen->tokens.begin(), gen->tokens.end());
  REQUIRE(s1.pos == int64_t(all.size()) - 1);
  REQUIRE(a.put(std::vector<int32_t>(all.begin(), all.begin() + s1.pos), std::move(s1)).ok());
  // Turn 2: the whole conversation (the last sampled token included) and a new message.
  auto turn2 = all;
  for (int i = 0; i < 9; ++i) turn2.push_back(int32_t(40 + 3 * i));
  SequenceState s2 = m.new_sequence(64);
  auto r = resume_or_take(a, static_cast<CountingCache*>(nullptr), s2, turn2);
  REQUIRE(r.ok());
  CHECK(r->active_hit);
  CHECK(r->cached_tokens == int64_t(all.size()) - 1);
  std::vector<float> got, want;
  REQUIRE(m.prefill(s2, std::span(turn2).subspan(size_t(r->cached_tokens)), &got).ok());
  SequenceState cold = m.new_sequence(64);
  REQUIRE(m.prefill(cold, turn2, &want).ok());
  CHECK(got == want);
}
#else
TEST_CASE("active sessions need xxhash.h", "[session][active]") { WARN("xxhash.h not found: active session tests not built"); }
#endif
