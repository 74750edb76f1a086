// The generation loop: prefill, then sample token by token, or (speculative) draft with DSpark and
// verify each block in one forward of the main model with lossless speculative sampling (SPEC §4.9).
//
// State contract: on return the state holds the prompt and every returned token except the last one
// (the last token has been sampled but not run; pass it first in the next prompt to continue), for
// every finish reason and in both modes: speculative steps roll rejected positions back (rollback.hpp).
// A cancelled prefill leaves the chunks already run (prompt_done says how many tokens).
//
// Speculative greedy returns the tokens of plain greedy, and a speculative run leaves the state byte-identical
// to one that ran the same ids one at a time, as far as the forward is chunk-invariant (a block's rows equal
// the same rows decoded alone, exact candidate-block score ties included).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/rollback.hpp>
#include <dsv41/runtime/sampler.hpp>
#include <dsv41/backend/cpu/sequence.hpp>

namespace dsv41 {

struct GenerateOptions {
  int max_tokens = 256;                 // tokens to return at most (0: prefill only)
  SamplingParams sampling;              // temperature 0 = greedy
  std::vector<int32_t> stop_ids;        // generation ends after returning one of these
  bool (*on_token)(void* ctx, int32_t id) = nullptr;  // each returned token; false cancels after it
  void* ctx = nullptr;                  // for on_token and on_prefill
  bool speculative = false;             // DSpark draft + one-forward verification
  int prefill_chunk = 0;                // tokens per prefill forward; 0 = the whole prompt
  bool (*on_prefill)(void* ctx, int64_t done, int64_t total) = nullptr;  // per chunk; false cancels
  // Speculative mode: drafts from this callback instead of DSpark (n-gram lookup, tests). It writes up to
  // k ids after generated (the tokens returned so far, the last one not yet run) and returns how many.
  // Its drafts are deterministic: the verifier treats p_d as one-hot, which keeps sampling lossless.
  int (*drafter)(void* ctx, std::span<const int32_t> generated, int k, int32_t* out) = nullptr;
};

enum class FinishReason {
  stop,          // returned a stop id (the last token)
  max_tokens,    // returned max_tokens tokens
  cancelled,     // a callback returned false
  context_full,  // the state has no position left for the next token
};

inline const char* finish_name(FinishReason f) {
  switch (f) {
    case FinishReason::stop: return "stop";
    case FinishReason::max_tokens: return "max_tokens";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::context_full: return "context_full";
  }
  return "?";
}

struct GenerateResult {
  std::vector<int32_t> tokens;  // returned ids, a final stop id included
  FinishReason finish = FinishReason::max_tokens;
  int32_t stop_id = -1;         // the stop id when finish == stop
  int64_t prompt_done = 0;      // prompt tokens the state holds
  // Speculative mode: verify forwards that carried drafts, drafts verified, drafts accepted.
  int64_t spec_steps = 0, drafted = 0, accepted = 0;
  double mean_accepted() const { return spec_steps > 0 ? double(accepted) / double(spec_steps) : 0.0; }
};

// The verdict on one block [y, d1..dk]: how many drafts were accepted and the token after them
// (the correction on a rejection, the bonus token when all were accepted).
struct Verdict {
  int accepted = 0;
  int32_t next = 0;
};

// Lossless verification (SPEC §4.9). target: [k+1, V] main-model logits, row i predicting the token after
// the block's i-th id. drafts: d1..dk. draft_probs: [k, V], the distribution each draft was drawn from
// (unused when greedy). Greedy: accept while d_i equals the target argmax, next = the argmax after them.
// Sampling with p_t = probabilities(target row, params): accept d_i with probability min(1, p_t/p_d),
// else draw next from max(0, p_t − p_d) normalized; all accepted: next drawn from the last row.
inline Result<Verdict> verify_drafts(std::span<const float> target, int V, std::span<const int32_t> drafts,
                                     std::span<const double> draft_probs, Sampler& sampler) {
  const int k = int(drafts.size());
  if (V <= 0 || target.size() != size_t(k + 1) * size_t(V) ||
      (!sampler.greedy() && draft_probs.size() != size_t(k) * size_t(V)))
    return error(Code::invalid_argument, "verify_drafts: sizes do not match k drafts over V tokens");
  for (int32_t d : drafts)
    if (d < 0 || d >= V) return error(Code::invalid_argument, "verify_drafts: draft outside the vocabulary");
  auto row = [&](int i) { return target.subspan(size_t(i) * V, size_t(V)); };
  Verdict v;
  if (sampler.greedy()) {
    while (v.accepted < k && drafts[v.accepted] == argmax(row(v.accepted))) ++v.accepted;
    v.next = argmax(row(v.accepted));
    return v;
  }
  std::vector<double> pt;
  for (int i = 0; i < k; ++i) {
    probabilities(row(i), sampler.params(), pt);
    const std::span<const double> pd = draft_probs.subspan(size_t(i) * V, size_t(V));
    const int32_t d = drafts[i];
    const double u = sampler.uniform();
    if (u * pd[d] < pt[d]) {  // u < p_t/p_d without dividing
      ++v.accepted;
      continue;
    }
    double mass = 0;
    for (int t = 0; t < V; ++t) mass += (pt[t] = std::max(0.0, pt[t] - pd[t]));
    if (!(mass > 0)) probabilities(row(i), sampler.params(), pt);  // p_t == p_d up to rounding
    v.next = sampler.draw(pt);
    return v;
  }
  probabilities(row(k), sampler.params(), pt);
  v.next = sampler.draw(pt);
  return v;
}

// Buffers of speculative steps, reused from step to step.
struct SpecScratch {
  DraftResult dr;
  ForwardResult fr;
  std::vector<int32_t> block;  // the last step's [y, d1..dk]
  std::vector<double> qs;      // [k, V] draft distributions
  std::vector<float> adj, bias_greedy, bias_drawn;
};

template <class Snapshot>
struct SpecStep {
  Snapshot snapshot;  // the state before the block
  Verdict verdict;
};

// The first half of a speculative step after y (returned, not yet run): up to k drafts (k <= 0: none) from
// drafter when set (called with ctx and generated, the tokens returned so far) or from DSpark into sc.block =
// [y, drafts], and the snapshot before the block. The state does not advance: the block's verify forward is the
// caller's (one per sequence, or several sequences' blocks in one Model::prefill_batch with all rows).
template <class C, class B>
Result<typename Model<C, B>::Snapshot> speculative_draft(
    const Model<C, B>& m, const typename Model<C, B>::State& st, int32_t y, int k, Sampler& sampler,
    int (*drafter)(void* ctx, std::span<const int32_t> generated, int k, int32_t* out), void* ctx,
    std::span<const int32_t> generated, SpecScratch& sc) {
  const int V = m.shape().vocab_size;
  sc.block.assign(1, y);
  sc.qs.clear();
  if (k > 0 && drafter) {
    sc.block.resize(size_t(k) + 1);
    const int got = std::clamp(drafter(ctx, generated, k, sc.block.data() + 1), 0, k);
    sc.block.resize(size_t(got) + 1);
    for (int i = 1; i <= got; ++i)
      if (sc.block[i] < 0 || sc.block[i] >= V) return error(Code::invalid_argument, "generate: drafter returned an id outside the vocabulary");
    if (!sampler.greedy()) {
      sc.qs.assign(size_t(got) * V, 0.0);
      for (int i = 0; i < got; ++i) sc.qs[size_t(i) * V + sc.block[i + 1]] = 1.0;
    }
  } else if (k > 0) {
    DSV41_TRY(m.draft(st, y, sc.dr));
    if (sampler.greedy()) {
      sc.block.insert(sc.block.end(), sc.dr.ids.begin() + 1, sc.dr.ids.begin() + 1 + k);
    } else {
      // out_{i+1} = sample(logits_i): draft logits_i carry the Markov term of the greedy out_i
      // (dr.ids[i]); once a drawn draft differs, swap that term for the drawn token's.
      sc.qs.resize(size_t(k) * V);
      for (int i = 0; i < k; ++i) {
        std::span<const float> li(sc.dr.logits.data() + size_t(i) * V, size_t(V));
        if (i > 0 && sc.block[i] != sc.dr.ids[i]) {
          DSV41_TRY(m.backend().markov_bias(sc.dr.ids[i], sc.bias_greedy));
          DSV41_TRY(m.backend().markov_bias(sc.block[i], sc.bias_drawn));
          sc.adj.assign(li.begin(), li.end());
          for (int t = 0; t < V; ++t) sc.adj[t] = sc.adj[t] - sc.bias_greedy[t] + sc.bias_drawn[t];
          li = sc.adj;
        }
        std::vector<double> q = probabilities(li, sampler.params());
        std::copy(q.begin(), q.end(), sc.qs.begin() + size_t(i) * V);
        sc.block.push_back(sampler.draw(q));
      }
    }
  }
  return take_snapshot(m, st, sc.block);
}

// The second half: the verdict on the verify forward's logits of every row of sc.block ([block, V]).
inline Result<Verdict> speculative_verdict(std::span<const float> logits, int V, const SpecScratch& sc, Sampler& sampler) {
  return verify_drafts(logits, V, std::span<const int32_t>(sc.block).subspan(1), sc.qs, sampler);
}

// One speculative step after y: speculative_draft, [y, drafts] verified in one forward, speculative_verdict. On
// success sc.block is the block and the state holds all of it: keep the returned prefix with
// rollback(m, st, step.snapshot, returned).
template <class C, class B>
Result<SpecStep<typename Model<C, B>::Snapshot>> speculative_step(
    const Model<C, B>& m, typename Model<C, B>::State& st, int32_t y, int k, Sampler& sampler,
    int (*drafter)(void* ctx, std::span<const int32_t> generated, int k, int32_t* out), void* ctx,
    std::span<const int32_t> generated, SpecScratch& sc) {
  auto taken = speculative_draft(m, st, y, k, sampler, drafter, ctx, generated, sc);
  if (!taken.ok()) return taken.status();
  SpecStep<typename Model<C, B>::Snapshot> out{std::move(*taken), Verdict{}};
  DSV41_TRY(m.forward(st, sc.block, sc.fr, /*all_logits=*/true));
  auto verdict = speculative_verdict(sc.fr.logits, m.shape().vocab_size, sc, sampler);
  if (!verdict.ok()) return verdict.status();
  out.verdict = *verdict;
  return Result<SpecStep<typename Model<C, B>::Snapshot>>(std::move(out));
}

// Runs prompt at the state's next positions, then generates. Errors (nothing run): empty prompt, ids
// outside the vocabulary, a prompt longer than the positions left, bad options, speculative on a model
// without DSpark or drafter.
template <class C, class B>
Result<GenerateResult> generate(const Model<C, B>& m, typename Model<C, B>::State& st, std::span<const int32_t> prompt,
                                const GenerateOptions& o) {
  const ModelShape& s = m.shape();
  const int V = s.vocab_size;
  if (prompt.empty()) return error(Code::invalid_argument, "generate: empty prompt");
  if (o.max_tokens < 0) return error(Code::invalid_argument, "generate: max_tokens < 0");
  DSV41_TRY(validate(o.sampling));
  if (st.layers.size() != m.schedule().size()) return error(Code::invalid_argument, "generate: state made for another model");
  for (int32_t id : prompt)
    if (id < 0 || id >= V) return error(Code::invalid_argument, "generate: token id " + std::to_string(id) + " outside the vocabulary");
  if (int64_t(prompt.size()) > st.max_positions - st.pos)
    return error(Code::out_of_range, "generate: prompt of " + std::to_string(prompt.size()) + " tokens does not fit the " +
                                         std::to_string(st.max_positions - st.pos) + " positions left");
  if (o.speculative && !o.drafter && s.n_dspark() == 0)
    return error(Code::unsupported, "generate: speculative mode needs DSpark stages or a drafter");

  GenerateResult res;
  struct PrefillCtx {
    const GenerateOptions* o;
    int64_t done;
  } pc{&o, 0};
  PrefillOptions po;
  po.chunk = o.prefill_chunk;
  po.ctx = &pc;
  po.on_chunk = [](void* c, int64_t done, int64_t total) {
    auto* p = static_cast<PrefillCtx*>(c);
    p->done = done;
    return !p->o->on_prefill || p->o->on_prefill(p->o->ctx, done, total);
  };
  std::vector<float> logits;
  if (Status ps = m.prefill(st, prompt, &logits, po); !ps.ok()) {
    if (ps.code() != Code::cancelled) return ps;
    res.prompt_done = pc.done;
    res.finish = FinishReason::cancelled;
    return res;
  }
  res.prompt_done = int64_t(prompt.size());
  if (o.max_tokens == 0) return res;

  Sampler sampler(o.sampling);
  // Returns token t; false when generation ends with it. held: the positions the state holds if it does.
  auto emit = [&](int32_t t, int64_t held) {
    res.tokens.push_back(t);
    if (o.on_token && !o.on_token(o.ctx, t)) {
      res.finish = FinishReason::cancelled;
      return false;
    }
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), t) != o.stop_ids.end()) {
      res.finish = FinishReason::stop;
      res.stop_id = t;
      return false;
    }
    if (int(res.tokens.size()) >= o.max_tokens) {
      res.finish = FinishReason::max_tokens;
      return false;
    }
    if (held >= st.max_positions) {
      res.finish = FinishReason::context_full;
      return false;
    }
    return true;
  };

  int32_t y = sampler.sample(logits);
  if (!o.speculative) {
    while (emit(y, st.pos)) {
      typename Model<C, B>::DecodeItem item{&st, y, &logits};
      DSV41_TRY(m.decode(std::span(&item, 1)));
      y = sampler.sample(logits);
    }
    return res;
  }

  // Speculative: the state holds everything before y; y is returned but not yet run.
  SpecScratch sc;
  if (!emit(y, st.pos)) return res;
  for (;;) {
    // Drafts: as many as fit the token budget (the block returns up to k+1 tokens) and the state.
    const int k = int(std::min<int64_t>({int64_t(s.dspark_block_size), int64_t(o.max_tokens) - int64_t(res.tokens.size()) - 1,
                                         st.max_positions - st.pos - 1}));
    auto step = speculative_step(m, st, y, k, sampler, o.drafter, o.ctx, res.tokens, sc);
    if (!step.ok()) return step.status();
    const Verdict v = step->verdict;
    if (sc.block.size() > 1) {
      ++res.spec_steps;
      res.drafted += int64_t(sc.block.size()) - 1;
      res.accepted += v.accepted;
    }
    // Return d1..da and next; the state keeps y and every returned token but the last.
    const int64_t base = step->snapshot.pos;
    int returned = 0;
    bool more = true;
    for (int i = 1; i <= v.accepted && more; ++i) more = emit(sc.block[i], base + ++returned);
    if (more) more = emit(v.next, base + ++returned);
    DSV41_TRY(rollback(m, st, step->snapshot, returned));
    if (!more) break;
    y = v.next;
  }
  return res;
}

}  // namespace dsv41
