// The generation loop, rollback and lossless speculative decoding with DSpark (SPEC §4.9); the sampler
// itself is in test_sampler.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <numeric>

#include <dsv41/runtime/generate.hpp>
#include <dsv41/runtime/rollback.hpp>
#include <dsv41/runtime/sampler.hpp>

#include "check_counts.hpp"
#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;
using dsv41::test::check_counts;

namespace {

using test::TinyModel;

const TinyModel& tiny() { return test::tiny_ced(); }
std::vector<int32_t> prompt(int n, int seed) { return test::tiny_prompt(n, seed); }

// Every vector of the state, compared exactly.
void require_same_state(const SequenceState& a, const SequenceState& b) {
  REQUIRE(a.pos == b.pos);
  REQUIRE(a.max_positions == b.max_positions);
  REQUIRE(a.history == b.history);
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    INFO("layer " << l);
    const auto &x = a.layers[l], &y = b.layers[l];
    REQUIRE(x.ring == y.ring);
    REQUIRE(x.comp == y.comp);
    REQUIRE(x.ikeys == y.ikeys);
    REQUIRE(x.pend_kv == y.pend_kv);
    REQUIRE(x.pend_score == y.pend_score);
    REQUIRE(x.n_entries == y.n_entries);
  }
}

// A state that ran ids one position at a time.
SequenceState sequential(const TinyModel& m, std::span<const int32_t> ids, int64_t cap) {
  SequenceState st = m.new_sequence(cap);
  ForwardResult r;
  for (int32_t t : ids) REQUIRE(m.forward(st, std::span<const int32_t>(&t, 1), r).ok());
  return st;
}


}  // namespace

TEST_CASE("verify_drafts: greedy accepts while the draft is the argmax", "[generate][spec]") {
  const int V = 4;
  // Rows' argmax: 2, 0, 3, 1.
  const std::vector<float> target = {0, 1, 5, 2, 9, 1, 1, 1, 0, 0, 0, 4, 0, 7, 0, 0};
  Sampler g(SamplingParams{});
  std::vector<int32_t> d = {2, 0, 3};
  auto v = *verify_drafts(target, V, d, {}, g);
  CHECK(v.accepted == 3);
  CHECK(v.next == 1);
  d = {2, 1, 3};
  v = *verify_drafts(target, V, d, {}, g);
  CHECK(v.accepted == 1);
  CHECK(v.next == 0);
  v = *verify_drafts(std::span(target).first(4), V, {}, {}, g);
  CHECK(v.accepted == 0);
  CHECK(v.next == 2);
  CHECK(verify_drafts(target, V, std::vector<int32_t>{2}, {}, g).status().code() == Code::invalid_argument);
  SamplingParams sp;
  sp.temperature = 1.f;
  Sampler smp(sp);
  CHECK(verify_drafts(target, V, d, {}, smp).status().code() == Code::invalid_argument);
}

// A target Markov chain T and a different draft chain Q over 4 tokens. Speculative steps (drafts drawn
// from Q, verified against T's rows) must give the first two tokens after y the law T[y][a]·T[a][b].
TEST_CASE("verify_drafts: speculative sampling preserves the target distribution", "[generate][spec]") {
  const int V = 4, K = 3;
  const double T[4][4] = {{0.1, 0.4, 0.3, 0.2}, {0.25, 0.25, 0.25, 0.25}, {0.7, 0.1, 0.1, 0.1}, {0.05, 0.05, 0.3, 0.6}};
  const double Q[4][4] = {{0.1, 0.5, 0.2, 0.2}, {0.0, 0.6, 0.4, 0.0}, {0.4, 0.2, 0.2, 0.2}, {1.0, 0.0, 0.0, 0.0}};
  for (float temp : {1.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temp;
    p.top_k = temp == 1.0f ? 0 : 3;
    p.seed = 1234;
    // The target law of one step: probabilities() of log T at these parameters.
    std::vector<std::vector<double>> pt(V);
    std::vector<float> logT(size_t(V) * V);
    for (int a = 0; a < V; ++a) {
      for (int b = 0; b < V; ++b) logT[size_t(a) * V + b] = float(std::log(T[a][b]));
      pt[a] = probabilities(std::span<const float>(logT).subspan(size_t(a) * V, V), p);
    }
    Sampler s(p);
    const int32_t y = 0;
    const int64_t n = 60000;
    std::vector<int64_t> count(size_t(V) * V, 0);
    int64_t acc = 0, drafted = 0;
    for (int64_t trial = 0; trial < n; ++trial) {
      std::vector<int32_t> out;
      int32_t cur = y;
      while (out.size() < 2) {
        std::vector<int32_t> drafts;
        std::vector<double> q;
        std::vector<float> rows(logT.begin() + size_t(cur) * V, logT.begin() + size_t(cur + 1) * V);
        int32_t prev = cur;
        for (int i = 0; i < K; ++i) {
          q.insert(q.end(), Q[prev], Q[prev] + V);
          const int32_t d = s.draw(std::span<const double>(Q[prev], V));
          drafts.push_back(d);
          rows.insert(rows.end(), logT.begin() + size_t(d) * V, logT.begin() + size_t(d + 1) * V);
          prev = d;
        }
        const Verdict v = *verify_drafts(rows, V, drafts, q, s);
        acc += v.accepted;
        drafted += K;
        for (int i = 0; i < v.accepted; ++i) out.push_back(drafts[i]);
        out.push_back(v.next);
        cur = out.back();
      }
      ++count[size_t(out[0]) * V + out[1]];
    }
    std::vector<double> joint(size_t(V) * V);
    for (int a = 0; a < V; ++a)
      for (int b = 0; b < V; ++b) joint[size_t(a) * V + b] = pt[y][a] * pt[a][b];
    INFO("temperature " << temp << ", accepted " << acc << " of " << drafted);
    CHECK(acc > drafted / 10);         // acceptance happens…
    CHECK(acc < drafted - drafted / 10);  // …and so do rejections
    check_counts(count, joint, n);
  }
}

TEST_CASE("generate: stop ids, max tokens, cancellation, errors", "[generate][model]") {
  const auto& m = tiny();
  const auto ids = prompt(12, 1);
  GenerateOptions o;
  o.max_tokens = 6;
  SequenceState st = m.new_sequence(64);
  auto r = generate(m, st, ids, o);
  REQUIRE(r.ok());
  REQUIRE(r->tokens.size() == 6);
  CHECK(r->finish == FinishReason::max_tokens);
  CHECK(r->prompt_done == 12);
  // The state holds the prompt and every token but the last.
  auto held = ids;
  held.insert(held.end(), r->tokens.begin(), r->tokens.end() - 1);
  require_same_state(st, sequential(m, held, 64));
  const auto full = r->tokens;

  // Stop at the third token's id (its first occurrence).
  o.stop_ids = {full[2], 511};
  SequenceState st2 = m.new_sequence(64);
  r = generate(m, st2, ids, o);
  REQUIRE(r.ok());
  const size_t first = size_t(std::find(full.begin(), full.end(), full[2]) - full.begin());
  CHECK(r->finish == FinishReason::stop);
  CHECK(r->stop_id == full[2]);
  CHECK(r->tokens == std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  o.stop_ids.clear();

  // Cancel from the token callback after 3 tokens.
  struct Counter {
    int seen = 0, stop_after = 3;
  } ctr;
  o.ctx = &ctr;
  o.on_token = [](void* c, int32_t) {
    auto* k = static_cast<Counter*>(c);
    return ++k->seen < k->stop_after;
  };
  for (bool spec : {false, true}) {
    ctr.seen = 0;
    o.speculative = spec;
    SequenceState st3 = m.new_sequence(64);
    r = generate(m, st3, ids, o);
    REQUIRE(r.ok());
    CHECK(r->finish == FinishReason::cancelled);
    CHECK(r->tokens == std::vector<int32_t>(full.begin(), full.begin() + 3));
    auto h3 = ids;
    h3.insert(h3.end(), r->tokens.begin(), r->tokens.end() - 1);
    require_same_state(st3, sequential(m, h3, 64));
  }
  o.on_token = nullptr;
  o.speculative = false;

  // Prefill cancellation keeps the chunks already run.
  o.prefill_chunk = 5;
  o.on_prefill = [](void*, int64_t done, int64_t) { return done < 10; };
  SequenceState st4 = m.new_sequence(64);
  r = generate(m, st4, ids, o);
  REQUIRE(r.ok());
  CHECK(r->finish == FinishReason::cancelled);
  CHECK(r->prompt_done == 10);
  CHECK(r->tokens.empty());
  CHECK(st4.pos == 10);
  o.on_prefill = nullptr;
  o.prefill_chunk = 0;

  // The state runs out of positions: the last token is returned but never run.
  SequenceState st5 = m.new_sequence(15);
  r = generate(m, st5, ids, o);
  REQUIRE(r.ok());
  CHECK(r->finish == FinishReason::context_full);
  CHECK(r->tokens == std::vector<int32_t>(full.begin(), full.begin() + 4));
  CHECK(st5.pos == 15);
  o.speculative = true;
  SequenceState st6 = m.new_sequence(15);
  r = generate(m, st6, ids, o);
  REQUIRE(r.ok());
  CHECK(r->finish == FinishReason::context_full);
  CHECK(r->tokens == std::vector<int32_t>(full.begin(), full.begin() + 4));
  require_same_state(st6, st5);
  o.speculative = false;

  // Errors run nothing.
  SequenceState small = m.new_sequence(11);
  const SequenceState before = small;
  r = generate(m, small, ids, o);
  CHECK(r.status().code() == Code::out_of_range);
  require_same_state(small, before);
  r = generate(m, small, std::span<const int32_t>(), o);
  CHECK(r.status().code() == Code::invalid_argument);
  const std::vector<int32_t> bad = {5, 512};
  r = generate(m, small, bad, o);
  CHECK(r.status().code() == Code::invalid_argument);
  o.sampling.top_p = 2.f;
  r = generate(m, small, std::span(ids).first(4), o);
  CHECK(r.status().code() == Code::invalid_argument);
  require_same_state(small, before);
  o.sampling.top_p = 1.f;
  o.max_tokens = 0;
  r = generate(m, small, std::span(ids).first(4), o);
  REQUIRE(r.ok());
  CHECK(r->tokens.empty());
  CHECK(small.pos == 4);
  // The Markov term used to redraw sampled drafts (Model::markov_bias).
  std::vector<float> bias;
  REQUIRE(m.backend().markov_bias(7, bias).ok());
  CHECK(bias.size() == size_t(m.shape().vocab_size));
  CHECK(m.backend().markov_bias(512, bias).code() == Code::invalid_argument);
}

TEST_CASE("generate: speculative greedy returns exactly the greedy tokens", "[generate][spec][model]") {
  const auto& m = tiny();
  int64_t steps = 0, drafted = 0, accepted = 0;
  for (int seed : {1, 2, 3}) {
    const auto ids = prompt(5 + 7 * seed, seed);
    GenerateOptions o;
    o.max_tokens = 20;
    SequenceState plain = m.new_sequence(96), spec = m.new_sequence(96);
    auto a = generate(m, plain, ids, o);
    o.speculative = true;
    auto b = generate(m, spec, ids, o);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    INFO("prompt " << seed);
    CHECK(a->tokens.size() == 20);
    CHECK(b->tokens == a->tokens);
    require_same_state(spec, plain);
    steps += b->spec_steps;
    drafted += b->drafted;
    accepted += b->accepted;
  }
  REQUIRE(steps > 0);
  const double mean = double(accepted) / double(steps);
  WARN("tiny-ced greedy DSpark: " << steps << " verify steps, " << accepted << " of " << drafted
                                  << " drafts accepted, mean accepted length " << mean << " drafts/step ("
                                  << 1.0 + mean << " tokens per verify forward)");
}

// A prompt whose 6th token meets an exact candidate-block score tie (relu-dead zeros): the candidate
// mask must depend on the row alone, so a row inside a verify block [y, d1..dk] equals it decoded alone.
TEST_CASE("generate: speculative greedy equals greedy where a candidate-block tie occurs",
          "[generate][spec][model]") {
  const auto& m = tiny();
  std::vector<int32_t> ids(11);
  uint32_t x = 2654435761u + 1;
  for (auto& t : ids) {
    x = x * 1664525u + 1013904223u;
    t = int32_t(3 + (x >> 8) % 500);
  }
  // The forward itself: row 0 of a 6-token block against the same token alone.
  SequenceState st = m.new_sequence(32);
  std::vector<int32_t> prefix = ids;
  prefix.insert(prefix.end(), {257, 125});
  PrefillOptions one;
  one.chunk = 1;
  REQUIRE(m.prefill(st, prefix, nullptr, one).ok());
  SequenceState alone = st, in_block = st;
  ForwardResult ra, rb;
  const std::vector<int32_t> y = {407}, block = {407, 400, 401, 402, 403, 404};
  REQUIRE(m.forward(alone, y, ra).ok());
  REQUIRE(m.forward(in_block, block, rb, true).ok());
  const bool same_row = std::equal(ra.logits.begin(), ra.logits.end(), rb.logits.begin());
  CHECK(same_row);
  // And generation.
  GenerateOptions o;
  o.max_tokens = 8;
  SequenceState plain = m.new_sequence(32), spec = m.new_sequence(32);
  auto a = generate(m, plain, ids, o);
  o.speculative = true;
  auto b = generate(m, spec, ids, o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(b->tokens == a->tokens);
}

// Drafts that are right for a while: every acceptance length, bonus tokens, and the exact rollback of
// each, on the real model.
TEST_CASE("generate: speculative greedy with a partly right drafter", "[generate][spec][model]") {
  const auto& m = tiny();
  const auto ids = prompt(10, 21);
  GenerateOptions o;
  o.max_tokens = 30;
  SequenceState plain = m.new_sequence(64);
  auto a = generate(m, plain, ids, o);
  REQUIRE(a.ok());
  struct Oracle {
    std::vector<int32_t> ref;
    int right = 0;  // drafts right before the first wrong one; > k: all right
  } orc{a->tokens, 0};
  o.speculative = true;
  o.ctx = &orc;
  o.drafter = [](void* c, std::span<const int32_t> gen, int k, int32_t* out) {
    const auto* q = static_cast<Oracle*>(c);
    for (int i = 0; i < k; ++i) {
      const size_t at = gen.size() + size_t(i);
      const int32_t good = at < q->ref.size() ? q->ref[at] : 0;
      out[i] = i < q->right ? good : (good + 1) % 512;
    }
    return k;
  };
  for (int right : {0, 1, 2, 3, 99}) {
    INFO("right drafts " << right);
    orc.right = right;
    SequenceState spec = m.new_sequence(64);
    auto b = generate(m, spec, ids, o);
    REQUIRE(b.ok());
    CHECK(b->tokens == a->tokens);
    require_same_state(spec, plain);
    if (right == 99) CHECK(b->accepted == b->drafted);
    CHECK(b->accepted <= right * b->spec_steps);
    CHECK((b->accepted > 0) == (right > 0));
  }
}

TEST_CASE("rollback: a rolled-back state equals one that ran only the kept ids", "[generate][spec][model]") {
  const auto& m = tiny();
  const int W = m.shape().sliding_window;
  const auto ids = prompt(40, 9);
  // References: the state after each prefix, run one position at a time.
  std::vector<SequenceState> ref;
  {
    SequenceState st = m.new_sequence(64);
    ForwardResult r;
    ref.push_back(st);
    for (int i = 0; i < 25; ++i) {
      REQUIRE(m.forward(st, std::span(ids).subspan(size_t(i), 1), r).ok());
      ref.push_back(st);
    }
  }
  for (int p0 : {6, 7, 13}) {         // both parities of the ratio-2 groups; p0 < W and > W
    for (int n : {3, 6, W + 3}) {  // n > W: the forward overwrites kept slots → fallback
      for (int keep = 0; keep <= n; ++keep) {
        INFO("p0 " << p0 << " n " << n << " keep " << keep);
        SequenceState st = ref[size_t(p0)];
        // Step ids: the true continuation for the kept part, then junk (rejected drafts).
        std::vector<int32_t> step(ids.begin() + p0, ids.begin() + p0 + n);
        for (int j = keep; j < n; ++j) step[size_t(j)] = int32_t(400 + j);
        const Snapshot sn = *m.snapshot(st, step);
        ForwardResult fr;
        REQUIRE(m.forward(st, step, fr, true).ok());
        auto rerun = restore(st, sn, keep);
        REQUIRE(rerun.ok());
        const bool must_rerun = n > W && keep > 0 && keep < n;
        if (must_rerun) CHECK(*rerun == keep);
        if (keep == 0 || keep == n) CHECK(*rerun == 0);
        if (*rerun > 0) {
          REQUIRE(st.pos == p0);
          REQUIRE(m.forward(st, std::span(step).first(size_t(*rerun)), fr).ok());
        }
        require_same_state(st, ref[size_t(p0 + keep)]);
      }
    }
  }
  // Both paths occur for n <= W: exact (even kept boundary) and re-run (odd, group pooled away).
  SequenceState st = m.new_sequence(64);
  REQUIRE(m.prefill(st, std::span(ids).first(6)).ok());
  const std::vector<int32_t> step(ids.begin() + 6, ids.begin() + 10);
  const SequenceState before = st;
  Snapshot sn = *m.snapshot(st, step);
  ForwardResult fr;
  REQUIRE(m.forward(st, step, fr).ok());
  SequenceState st2 = st;
  CHECK(*restore(st, sn, 2) == 0);
  CHECK(*restore(st2, sn, 1) == 1);
  require_same_state(st2, before);
  CHECK(restore(st, sn, 1).status().code() == Code::invalid_argument);  // state moved since
  // rollback() does the re-run itself.
  REQUIRE(m.forward(st2, step, fr).ok());
  REQUIRE(rollback(m, st2, sn, 1).ok());
  require_same_state(st2, sequential(m, std::span(ids).first(7), 64));
}

TEST_CASE("generate: speculative sampling after rejections keeps the state exact", "[generate][spec][model]") {
  const auto& m = tiny();
  const auto ids = prompt(9, 5);
  GenerateOptions o;
  o.max_tokens = 16;
  o.speculative = true;
  o.sampling.temperature = 1.5f;
  o.sampling.top_k = 8;
  o.sampling.seed = 99;
  SequenceState st = m.new_sequence(64);
  auto r = generate(m, st, ids, o);
  REQUIRE(r.ok());
  CHECK(r->tokens.size() == 16);
  CHECK(r->drafted > r->accepted);  // rejections happened
  auto held = ids;
  held.insert(held.end(), r->tokens.begin(), r->tokens.end() - 1);
  require_same_state(st, sequential(m, held, 64));
  // Same seed, same tokens.
  SequenceState st2 = m.new_sequence(64);
  auto r2 = generate(m, st2, ids, o);
  REQUIRE(r2.ok());
  CHECK(r2->tokens == r->tokens);
  o.speculative = false;
  SequenceState st3 = m.new_sequence(64), st4 = m.new_sequence(64);
  auto r3 = generate(m, st3, ids, o), r4 = generate(m, st4, ids, o);
  REQUIRE(r3.ok());
  REQUIRE(r4.ok());
  CHECK(r3->tokens == r4->tokens);
}

// End to end on tiny-ced: over many seeds, the first two generated tokens (the second comes from a
// speculative step) follow the target law P(a)·P(b | a) computed with plain forwards.
TEST_CASE("generate: speculative sampling is distribution-preserving on tiny-ced", "[generate][spec][model]") {
  const auto& m = tiny();
  const auto ids = prompt(6, 11);
  SamplingParams sp;
  sp.temperature = 2.0f;
  sp.top_k = 3;
  const int V = m.shape().vocab_size;
  // Target law.
  SequenceState base = m.new_sequence(32);
  REQUIRE(m.prefill(base, std::span(ids).first(5)).ok());
  std::vector<float> l0;
  {
    SequenceState s = base;
    REQUIRE(m.prefill(s, std::span(ids).subspan(5), &l0).ok());
  }
  const auto p0 = probabilities(l0, sp);
  std::map<std::pair<int32_t, int32_t>, double> law;
  for (int a = 0; a < V; ++a) {
    if (p0[size_t(a)] <= 0) continue;
    SequenceState s = base;
    std::vector<int32_t> two = {ids[5], a};
    std::vector<float> l1;
    REQUIRE(m.prefill(s, two, &l1).ok());
    const auto p1 = probabilities(l1, sp);
    for (int b = 0; b < V; ++b)
      if (p1[size_t(b)] > 0) law[{a, b}] = p0[size_t(a)] * p1[size_t(b)];
  }
  REQUIRE(law.size() == 9);
  std::vector<std::pair<int32_t, int32_t>> cells;
  std::vector<double> prob;
  for (const auto& [k, v] : law) {
    cells.push_back(k);
    prob.push_back(v);
  }
  cells.push_back({-1, -1});  // anything else
  prob.push_back(0.0);

  // max_tokens 3: the step after the first token carries one draft (the block returns up to 2 tokens);
  // cancelling after the second token ends the run there.
  struct Ctx {
    int seen = 0;
    int32_t guess[512];  // drafter: the most likely second token after each first token
  } ctx;
  std::map<int32_t, double> best;
  for (int a = 0; a < V; ++a) ctx.guess[a] = 0;
  for (const auto& [k, v] : law)
    if (v > best[k.first]) {
      best[k.first] = v;
      ctx.guess[k.first] = k.second;
    }
  using Drafter = int (*)(void*, std::span<const int32_t>, int, int32_t*);
  const Drafter guesser = [](void* c, std::span<const int32_t> gen, int, int32_t* out) {
    out[0] = static_cast<Ctx*>(c)->guess[gen.back()];
    return 1;
  };
  GenerateOptions o;
  o.max_tokens = 3;
  o.speculative = true;
  o.sampling = sp;
  o.ctx = &ctx;
  o.on_token = [](void* c, int32_t) { return ++static_cast<Ctx*>(c)->seen < 2; };
  for (bool dspark : {true, false}) {
    o.drafter = dspark ? nullptr : guesser;
    const int64_t n = dspark ? 80 : 150;  // DSpark's drafts are all rejected here (random weights)
    std::vector<int64_t> count(cells.size(), 0);
    int64_t drafted = 0, accepted = 0;
    for (int64_t seed = 0; seed < n; ++seed) {
      SequenceState s = base;
      ctx.seen = 0;
      o.sampling.seed = uint64_t(seed) * 0x9e3779b97f4a7c15ull + (dspark ? 17 : 18);
      auto r = generate(m, s, std::span(ids).subspan(5), o);
      REQUIRE(r.ok());
      REQUIRE(r->tokens.size() == 2);
      drafted += r->drafted;
      accepted += r->accepted;
      auto it = std::find(cells.begin(), cells.end(), std::make_pair(r->tokens[0], r->tokens[1]));
      ++count[size_t(std::min<ptrdiff_t>(it - cells.begin(), ptrdiff_t(cells.size()) - 1))];
    }
    INFO((dspark ? "DSpark" : "drafter") << ": accepted " << accepted << " of " << drafted);
    CHECK(drafted == n);
    if (!dspark) CHECK(accepted > n / 10);
    check_counts(count, prob, n);
  }
}
