// Continuous batching over a Model, for any host (no HTTP here). Requests wait in a bounded queue, get a
// sequence when admitted (a bound on running requests and on estimated cache bytes), prefill in chunks and
// decode together: each step() runs one batched decode of every decoding request (one token each), then
// prefill chunks of admitted requests in the rest of the step's token budget (one forward for all of them where
// the backend batches sequences: EngineOptions::batch_prefill), so a long prompt delays the
// decodes by at most one budget per step. Each request samples with its own RNG seeded by its options, so
// its tokens do not depend on what it was batched with (as far as batched decode equals single decode and
// prefill is chunk-invariant, as on the CPU backend; on the GPU a batch's row count can pick other kernels, e.g.
// wo_a on cuBLASLt above 64 rows, so a request's bits may differ from its run alone).
//
// Speculative requests draft with DSpark and verify in a forward of their own inside the same step; with a
// session store (set_session) requests resume from stored prefixes and record their block boundaries.
//
// Threads: one thread drives the engine (a CPU decode step may spread its sequences over EngineOptions::threads;
// callbacks still run on the stepping thread); submit, cancel, poll, take_tokens and release are not
// synchronized, so a host calling them from other threads holds a lock around every call (step included):
// SharedEngine (runtime/shared_engine.hpp) is that lock.
// Callbacks run inside step() (or inside cancel() for on_finish); they may call submit() and cancel(), and
// release() of any request (the forgetting is deferred to the end of the step).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <dsv41/config/accounting.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/engine_types.hpp>
#include <dsv41/runtime/generate.hpp>
#include <dsv41/runtime/logprobs.hpp>
#include <dsv41/runtime/sampler.hpp>
#include <dsv41/runtime/session_hooks.hpp>

namespace dsv41 {

template <class M>
class Engine {
 public:
  using State = typename M::State;

  static Result<Engine> make(const M& model, const EngineOptions& o = {}) {
    if (o.max_running < 1) return error(Code::invalid_argument, "engine: max_running must be >= 1");
    if (o.step_tokens <= o.max_running)
      return error(Code::invalid_argument, "engine: step_tokens (" + std::to_string(o.step_tokens) +
                                               ") must exceed max_running (" + std::to_string(o.max_running) +
                                               ") so that prefill always progresses");
    if (o.max_queued < 0 || o.max_cache_bytes < 0 || o.max_positions < 0 || o.prefill_chunk < 0)
      return error(Code::invalid_argument, "engine: negative bound in options");
    if (o.threads < 1) return error(Code::invalid_argument, "engine: threads must be >= 1");
    return Result<Engine>(Engine(model, o));
  }

  Engine(Engine&&) = default;
  Engine& operator=(Engine&&) = default;

  const EngineOptions& options() const { return opt_; }

  // Requests resume from (and record block boundaries into) a session store; its ctx must outlive the engine's
  // use. Prefill chunks then end at block boundaries; a resume runs at admission, outside the step budget.
  void set_session(SessionHooks<State> h) { session_ = h; }

  // Estimated cache bytes of a sequence of max_positions (window rings + compressed caches at capacity).
  int64_t sequence_bytes(int64_t max_positions) const {
    return bytes_.window_per_sequence + int64_t(std::ceil(bytes_.global_per_token * double(max_positions)));
  }

  // Queues a request. Refused (Code::resource_exhausted, no id) when running and queued requests already
  // number max_running + max_queued. A bad request (empty prompt, ids outside the vocabulary, a prompt
  // longer than a sequence may hold, bad options, a cache larger than max_cache_bytes) gets an id and
  // finishes at once with finish == error and its Status (on_finish comes in the next step).
  Result<RequestId> submit(Request r) {
    if (int64_t(queue_.size() + active_.size()) >= int64_t(opt_.max_running) + opt_.max_queued)
      return error(Code::resource_exhausted,
                   "engine: queue full (" + std::to_string(active_.size()) + " running, " +
                       std::to_string(queue_.size()) + " queued; max_running " + std::to_string(opt_.max_running) +
                       " + max_queued " + std::to_string(opt_.max_queued) + "); retry later");
    auto owned = std::make_unique<Slot>(r.sampling);
    Slot* s = owned.get();
    s->id = next_id_++;
    s->req = std::move(r);
    s->info.prompt_tokens = int64_t(s->req.prompt.size());
    slots_.emplace(s->id, std::move(owned));
    if (Status bad = check(*s); !bad.ok()) {
      s->info.phase = RequestPhase::finished;
      s->info.finish = RequestFinish::error;
      store(s->info.status, std::move(bad));
      pending_notify_.push_back(s->id);
      return s->id;
    }
    auto at = std::find_if(queue_.begin(), queue_.end(), [&](Slot* q) { return q->req.priority < s->req.priority; });
    queue_.insert(at, s);
    return s->id;
  }

  // Cancels a queued or admitted request (between prefill chunks included): its sequence is freed at once.
  // A finished request is left as it is.
  Status cancel(RequestId id) {
    Slot* s = find(id);
    if (!s) return unknown(id);
    if (s->info.phase != RequestPhase::finished) finish(*s, RequestFinish::cancelled);
    return Status::Ok();
  }

  Result<RequestInfo> poll(RequestId id) const {
    auto it = slots_.find(id);
    if (it == slots_.end()) return unknown(id);
    RequestInfo i = it->second->info;
    i.unread = it->second->unread.size();
    return i;
  }

  // The tokens returned since the last call (requests without on_token).
  Result<std::vector<int32_t>> take_tokens(RequestId id) {
    Slot* s = find(id);
    if (!s) return unknown(id);
    std::vector<int32_t> out;
    out.swap(s->unread);
    return Result<std::vector<int32_t>>(std::move(out));
  }

  // Forgets a request (cancelling it first if it has not finished).
  Status release(RequestId id) {
    Slot* s = find(id);
    if (!s) return unknown(id);
    if (s->info.phase != RequestPhase::finished) finish(*s, RequestFinish::cancelled);
    forget(id);
    return Status::Ok();
  }

  EngineCounts counts() const {
    EngineCounts c;
    c.queued = int(queue_.size());
    for (const Slot* s : active_) (s->info.phase == RequestPhase::decoding ? c.decoding : c.prefilling)++;
    c.cache_bytes = reserved_;
    c.steps = steps_;
    return c;
  }

  // Nothing queued, admitted or waiting to be notified.
  bool idle() const { return queue_.empty() && active_.empty() && pending_notify_.empty(); }

  // One scheduling step: admission, one batched decode of every decoding request, prefill in the rest of
  // the budget. Errors fail the requests they concern, never the engine.
  StepStats step() {
    StepStats ss;
    in_step_ = true;
    ++steps_;
    const uint64_t finished_before = finished_;
    for (RequestId id : std::exchange(pending_notify_, {}))
      if (Slot* s = find(id)) notify(*s);
    admit(ss);

    // Decode: every decoding request, one token each, in one call.
    std::vector<Slot*> dec;
    for (Slot* s : active_)
      if (s->info.phase == RequestPhase::decoding && !s->req.speculative) dec.push_back(s);
    if (!dec.empty()) {
      std::vector<typename M::DecodeItem> items;
      for (Slot* s : dec) items.push_back({&*s->state, s->next, &s->logits});
      const std::vector<Status> sts = decode_items(items);
      ss.decoded = int(dec.size());
      for (size_t i = 0; i < dec.size(); ++i) {
        Slot* s = dec[i];
        const Status& st = sts[i];
        if (s->info.phase != RequestPhase::decoding) continue;  // cancelled by an earlier callback
        if (!st.ok()) {
          fail(*s, Status(st.code(), "decode: " + st.message()));
          continue;
        }
        record_boundary(*s);
        emit(*s, pick(*s), s->state->pos, &s->logits);
      }
    }
    // Speculative requests: a draft block each, the blocks verified in one forward where the model batches
    // sequences (batch_prefill), else each in its own.
    std::vector<Slot*> spec;
    for (Slot* s : active_)
      if (s->info.phase == RequestPhase::decoding && s->req.speculative) spec.push_back(s);
    if (kBatchesPrefill && opt_.batch_prefill && spec.size() > 1) {
      ss.verified += speculate_batch(spec);
    } else {
      for (Slot* s : spec)
        if (s->info.phase == RequestPhase::decoding) ss.verified += speculate(*s);
    }

    // Prefill in the rest of the budget.
    int budget = opt_.step_tokens - ss.decoded - ss.verified;
    std::vector<Slot*> pre;
    for (Slot* s : active_)
      if (s->info.phase == RequestPhase::prefilling) pre.push_back(s);
    if (opt_.round_robin_prefill && !pre.empty())
      std::rotate(pre.begin(), pre.begin() + int64_t(rr_++ % pre.size()), pre.end());
    // Plan each chunk, run the chunks with images one by one and the rest together (prefill_batch), then
    // account for each in the planned order.
    struct Chunk {
      Slot* s;
      int64_t n;
      bool last;
      Status st = Status::Ok();
    };
    std::vector<Chunk> chunks;
    std::vector<size_t> batched;
    for (Slot* s : pre) {
      if (budget <= 0) break;
      if (s->info.phase != RequestPhase::prefilling) continue;
      const int64_t left = s->info.prompt_tokens - s->info.prompt_done;
      int64_t n = std::min<int64_t>(left, budget);
      if (opt_.prefill_chunk > 0) n = std::min<int64_t>(n, opt_.prefill_chunk);
      if (uses_session(*s)) {  // end chunks at block boundaries, where the store records
        const int64_t pos = s->state->pos;
        n = std::min<int64_t>(n, (pos / session_.block + 1) * session_.block - pos);
      }
      // Images: encoded first; a chunk never cuts a span (it ends before one, or runs through its end).
      std::vector<ImageSpan> spans;
      if (!s->req.images.empty()) {
        if (Status e = encode_images(*s); !e.ok()) {
          fail(*s, Status(e.code(), "image: " + e.message()));
          continue;
        }
        const int64_t done = s->info.prompt_done;
        for (const RequestImage& im : s->req.images) {
          const int64_t a = im.start, b = im.start + int64_t(im.types.size());
          if (a < done + n && done + n < b) n = a > done ? a - done : b - done;
        }
        const int64_t base = s->state->pos - done;  // sequence position of prompt index 0
        for (size_t k = 0; k < s->req.images.size(); ++k) {
          const RequestImage& im = s->req.images[k];
          if (im.start >= done && im.start < done + n)
            spans.push_back({base + im.start, im.types, s->image_embeds[k]});
        }
      }
      const bool last = n == left;
      const auto ids = std::span<const int32_t>(s->req.prompt).subspan(size_t(s->info.prompt_done), size_t(n));
      if (spans.empty() && opt_.batch_prefill && kBatchesPrefill) {
        Status st = model_->check_chunk(*s->state, ids);  // an invalid chunk fails alone, before the batch
        if (st.ok()) batched.push_back(chunks.size());
        chunks.push_back(Chunk{s, n, last, std::move(st)});
      } else {
        PrefillOptions po;
        po.images = spans;
        chunks.push_back(Chunk{s, n, last, model_->prefill(*s->state, ids, last ? &s->logits : nullptr, po)});
      }
      budget -= int(n);
    }
    if (!batched.empty()) {
      std::vector<typename M::PrefillItem> items;
      for (size_t i : batched) {
        Slot* s = chunks[i].s;
        items.push_back({&*s->state,
                         std::span<const int32_t>(s->req.prompt).subspan(size_t(s->info.prompt_done), size_t(chunks[i].n)),
                         chunks[i].last ? &s->logits : nullptr});
      }
      const Status st = model_->prefill_batch(items);
      for (size_t i : batched) (void)(chunks[i].st = st);
    }
    for (Chunk& c : chunks) {
      Slot* s = c.s;
      if (s->info.phase != RequestPhase::prefilling) continue;  // cancelled by an earlier callback
      if (!c.st.ok()) {
        fail(*s, Status(c.st.code(), "prefill: " + c.st.message()));
        continue;
      }
      ss.prefilled += int(c.n);
      s->info.prompt_done += c.n;
      record_boundary(*s);
      if (!c.last) continue;
      if (s->req.max_tokens == 0) {
        finish(*s, RequestFinish::length);
        continue;
      }
      s->info.phase = RequestPhase::decoding;
      emit(*s, pick(*s), s->state->pos, &s->logits);
    }

    in_step_ = false;
    for (RequestId id : std::exchange(deferred_forget_, {})) forget(id);
    ss.finished = int(finished_ - finished_before);
    return ss;
  }

  // Steps until idle; returns the steps run (at most max_steps when it is > 0).
  uint64_t run_until_idle(uint64_t max_steps = 0) {
    uint64_t n = 0;
    while (!idle() && (max_steps == 0 || n < max_steps)) {
      step();
      ++n;
    }
    return n;
  }

 private:
  // Whether the model runs several sequences' chunks in one forward (Model::prefill_batch off the host).
  static constexpr bool kBatchesPrefill = [] {
    if constexpr (requires { typename M::PrefillItem; requires !M::on_host; }) return true;
    else return false;
  }();

  // The decode of items: one call, or where the backend runs sequences one by one (M::on_host and not
  // batches_decode) and opt_.threads > 1, contiguous groups on up to that many threads (the first on this one;
  // a thread that cannot start runs its group here). Each item gets its group's status.
  std::vector<Status> decode_items(std::vector<typename M::DecodeItem>& items) const {
    const size_t n = items.size();
    size_t k = 1;
    if constexpr (requires { requires M::on_host && !M::Ops::batches_decode; })
      k = std::min(n, size_t(opt_.threads));
    std::vector<Status> st(k);
    const auto first = [&](size_t g) { return n * g / k; };
    const auto run = [&](size_t g) {
      store(st[g], model_->decode(std::span<typename M::DecodeItem>(items.data() + first(g), first(g + 1) - first(g))));
    };
    const auto run_caught = [&](size_t g) {  // on another thread an exception would end the process
      try {
        run(g);
      } catch (const std::bad_alloc&) {
        store(st[g], error(Code::resource_exhausted, "decode: out of memory"));
      } catch (const std::exception& e) {
        store(st[g], error(Code::internal, std::string("decode: ") + e.what()));
      }
    };
    std::vector<std::thread> pool;
    pool.reserve(k - 1);
    std::vector<size_t> here{0};
    for (size_t g = 1; g < k; ++g) {
      try {
        pool.emplace_back(run_caught, g);
      } catch (const std::system_error&) {
        here.push_back(g);
      }
    }
    for (size_t g : here) run(g);
    for (auto& t : pool) t.join();
    std::vector<Status> per(n);
    for (size_t g = 0; g < k; ++g)
      for (size_t i = first(g); i < first(g + 1); ++i) store(per[i], st[g]);
    return per;
  }

  struct Slot {
    explicit Slot(const SamplingParams& p) : sampler(p) {}
    RequestId id = 0;
    Request req;
    RequestInfo info;
    Sampler sampler;
    std::optional<State> state;
    int64_t capacity = 0;
    std::vector<float> logits;
    std::vector<std::vector<float>> image_embeds;  // per req.images entry, after encode_images
    std::vector<int32_t> lp_ids;  // the last token's top_logprobs list
    std::vector<float> lp_vals;
    int32_t next = 0;  // the last returned token, not yet run
    size_t forced_at = 0;     // next entry of req.forced
    bool forcing = false;     // req.forced is being returned
    std::vector<int32_t> unread;
    std::vector<int32_t> generated;  // every returned token (requests with a drafter or a session store)
    int64_t last_boundary = 0;
    SpecScratch spec;
  };

  Engine(const M& m, const EngineOptions& o) : model_(&m), opt_(o), bytes_(cache_bytes(m.shape())) {}

  // Status is [[nodiscard]]: its operator= result is dropped on purpose (nvcc warns otherwise).
  static void store(Status& to, Status from) { static_cast<void>(to = std::move(from)); }
  static Status unknown(RequestId id) {
    return error(Code::invalid_argument, "engine: unknown request " + std::to_string(id));
  }
  Slot* find(RequestId id) {
    auto it = slots_.find(id);
    return it == slots_.end() ? nullptr : it->second.get();
  }

  // Validates a request and sets its capacity and cache estimate.
  Status check(Slot& s) {
    const ModelShape& sh = model_->shape();
    const Request& r = s.req;
    if (r.prompt.empty()) return error(Code::invalid_argument, "request: empty prompt");
    if (r.max_tokens < 0) return error(Code::invalid_argument, "request: max_tokens must be >= 0");
    if (r.speculative && !r.drafter && sh.n_dspark() == 0)
      return error(Code::unsupported, "request: speculative decoding needs DSpark stages or a drafter");
    if (r.speculative && int64_t(opt_.step_tokens) <= int64_t(opt_.max_running) * (sh.dspark_block_size + 1))
      return error(Code::invalid_argument, "request: speculative decoding needs step_tokens above max_running × " +
                                               std::to_string(sh.dspark_block_size + 1) + " (the verify block)");
    DSV41_TRY(validate(r.sampling));
    if (r.top_logprobs > kMaxTopLogprobs)
      return error(Code::invalid_argument, "request: top_logprobs must be at most " + std::to_string(kMaxTopLogprobs));
    for (const RequestImage& im : r.images)
      if (im.start < 0 || im.types.size() < 2 || im.start + int64_t(im.types.size()) > int64_t(r.prompt.size()))
        return error(Code::invalid_argument, "request: an image span lies outside the prompt");
    if (!r.forced.empty() && (r.speculative || r.drafter))
      return error(Code::unsupported, "request: a forced continuation does not combine with speculative decoding");
    for (int32_t id : r.forced)
      if (id < 0 || id >= sh.vocab_size) return error(Code::invalid_argument, "request: forced token outside the vocabulary");
    if (r.top_logprobs >= 0 && (r.speculative || r.drafter))
      return error(Code::unsupported, "request: logprobs are not reported with speculative decoding");
    for (int32_t id : r.prompt)
      if (id < 0 || id >= sh.vocab_size)
        return error(Code::invalid_argument, "request: token id " + std::to_string(id) + " outside the vocabulary of " +
                                                 std::to_string(sh.vocab_size));
    int64_t limit = sh.max_position_embeddings > 0 ? sh.max_position_embeddings : int64_t(1) << 40;
    if (opt_.max_positions > 0) limit = std::min(limit, opt_.max_positions);
    const int64_t n = int64_t(r.prompt.size());
    if (n > limit)
      return error(Code::out_of_range, "request: prompt of " + std::to_string(n) + " tokens exceeds the " +
                                           std::to_string(limit) + " positions a sequence may hold");
    // The last returned token is never run: prompt + max_tokens - 1 positions suffice.
    s.capacity = std::min(limit, n + std::max(r.max_tokens - 1, 0));
    s.info.cache_bytes = sequence_bytes(s.capacity);
    if (opt_.max_cache_bytes > 0 && s.info.cache_bytes > opt_.max_cache_bytes)
      return error(Code::resource_exhausted, "request: its sequence needs about " + std::to_string(s.info.cache_bytes) +
                                                 " cache bytes, more than max_cache_bytes " +
                                                 std::to_string(opt_.max_cache_bytes));
    return Status::Ok();
  }

  // Admits queued requests in order while a running slot and the cache budget allow (the head waits,
  // nobody overtakes it).
  void admit(StepStats& ss) {
    while (!queue_.empty() && int(active_.size()) < opt_.max_running) {
      Slot* s = queue_.front();
      if (opt_.max_cache_bytes > 0 && reserved_ + s->info.cache_bytes > opt_.max_cache_bytes) break;
      auto st = new_sequence_of(*model_, s->capacity);
      if (!st.ok()) {  // out of memory, say: this request fails, the next one may fit
        fail(*s, Status(st.status().code(), "admission: " + st.status().message()));
        continue;
      }
      queue_.erase(queue_.begin());
      s->state.emplace(std::move(*st));
      if (uses_session(*s)) {
        if (Status r = resume(*s); !r.ok()) {
          fail(*s, std::move(r));
          continue;
        }
      }
      s->info.phase = RequestPhase::prefilling;
      reserved_ += s->info.cache_bytes;
      active_.push_back(s);
      ++ss.admitted;
    }
  }

  bool uses_session(const Slot& s) const { return session_.block > 0 && s.req.use_session && s.req.images.empty(); }

  // The request's images through the vision tower, once, before its first prefill chunk.
  Status encode_images(Slot& s) {
    if (s.req.images.empty() || !s.image_embeds.empty()) return Status::Ok();
    if constexpr (requires(const M& m, const ImageInput& in, VisionResult& out) { m.encode_image(in, out); }) {
      for (const RequestImage& im : s.req.images) {
        ImageInput in;
        in.patches = im.patches;
        in.n_vit_h = im.n_vit_h;
        in.n_vit_w = im.n_vit_w;
        in.n_llm_h = im.n_llm_h;
        in.n_llm_w = im.n_llm_w;
        VisionResult r;
        DSV41_TRY(model_->encode_image(in, r));
        s.image_embeds.push_back(std::move(r.embeds));
      }
      return Status::Ok();
    } else {
      return error(Code::unsupported, "request: this backend has no vision tower yet");
    }
  }

  // Puts the longest stored prefix of the prompt into the fresh state. A store that fails is a miss (the
  // state starts over); a store that claims an impossible prefix fails the request.
  Status resume(Slot& s) {
    if (!session_.resume) return Status::Ok();
    auto r = session_.resume(session_.ctx, *s.state, s.req.prompt);
    if (r.ok() && *r == 0 && s.state->pos == 0) return Status::Ok();
    if (r.ok() && (*r != s.state->pos || *r < 0 || *r >= s.info.prompt_tokens))
      return error(Code::internal, "session resume: the store returned " + std::to_string(*r) +
                                       " tokens for a state at " + std::to_string(s.state->pos) + " of a " +
                                       std::to_string(s.info.prompt_tokens) + "-token prompt");
    if (!r.ok()) {
      auto fresh = new_sequence_of(*model_, s.capacity);
      if (!fresh.ok()) return Status(fresh.status().code(), "admission: " + fresh.status().message());
      s.state.reset();
      s.state.emplace(std::move(*fresh));
      return Status::Ok();
    }
    s.info.cached_tokens = s.info.prompt_done = *r;
    s.last_boundary = *r;
    return Status::Ok();
  }

  // Records the state at a block boundary it has not recorded yet (every token it holds is known; a failing
  // store is ignored, as a miss later).
  void record_boundary(Slot& s) {
    if (!uses_session(s) || !session_.boundary || s.info.phase == RequestPhase::finished) return;
    const int64_t pos = s.state->pos;
    if (pos == 0 || pos % session_.block || pos <= s.last_boundary) return;
    const int64_t n = s.info.prompt_tokens;
    if (pos > n + int64_t(s.generated.size())) return;
    s.last_boundary = pos;
    std::vector<int32_t> held(s.req.prompt.begin(), s.req.prompt.begin() + std::min(pos, n));
    if (pos > n) held.insert(held.end(), s.generated.begin(), s.generated.begin() + (pos - n));
    static_cast<void>(session_.boundary(session_.ctx, *s.state, held));
  }

  // A request that ended by stop or length holds its prompt and every generated token but the last (not yet run):
  // the session store's finish hook may keep that state. Not mid-way through a speculative block (its sequence
  // then holds drafted positions), nor after an error or a cancel.
  void hand_over(Slot& s, RequestFinish f) {
    if (!uses_session(s) || !session_.finish || (f != RequestFinish::stop && f != RequestFinish::length)) return;
    if (s.req.speculative || s.req.drafter || s.generated.empty()) return;
    const int64_t n = s.info.prompt_tokens;
    if (s.state->pos != n + int64_t(s.generated.size()) - 1) return;
    std::vector<int32_t> held(s.req.prompt.begin(), s.req.prompt.begin() + n);
    held.insert(held.end(), s.generated.begin(), s.generated.end() - 1);
    session_.finish(session_.ctx, std::move(*s.state), held);
  }

  // Drafts a speculative request may make now: the token budget (the block returns up to k+1) and the state.
  int spec_drafts(const Slot& s) const {
    return int(std::min<int64_t>({int64_t(model_->shape().dspark_block_size),
                                  int64_t(s.req.max_tokens) - s.info.completion_tokens - 1,
                                  s.state->max_positions - s.state->pos - 1}));
  }

  // One speculative step of a decoding request (generate()'s rules); returns the tokens it ran.
  int speculate(Slot& s) {
    auto step = speculative_step(*model_, *s.state, s.next, spec_drafts(s), s.sampler, s.req.drafter, s.req.ctx,
                                 std::span<const int32_t>(s.generated), s.spec);
    if (!step.ok()) {
      fail(s, Status(step.status().code(), "speculative step: " + step.status().message()));
      return 0;
    }
    return spec_accept(s, step->snapshot, step->verdict);
  }

  // Several requests' speculative steps: each drafts (and snapshots) alone, the blocks run in one forward with
  // every row's logits (Model::prefill_batch), then each takes its verdict. The same tokens as speculate() one by
  // one where the batched forward gives the single forward's logits. Returns the tokens run.
  int speculate_batch(const std::vector<Slot*>& spec) {
    using Snapshot = typename M::Snapshot;
    std::vector<Slot*> ready;
    std::vector<Snapshot> snaps;
    for (Slot* s : spec) {
      if (s->info.phase != RequestPhase::decoding) continue;
      auto sn = speculative_draft(*model_, *s->state, s->next, spec_drafts(*s), s->sampler, s->req.drafter, s->req.ctx,
                                  std::span<const int32_t>(s->generated), s->spec);
      if (!sn.ok()) {
        fail(*s, Status(sn.status().code(), "speculative step: " + sn.status().message()));
        continue;
      }
      ready.push_back(s);
      snaps.push_back(std::move(*sn));
    }
    if (ready.empty()) return 0;
    std::vector<typename M::PrefillItem> items;
    for (Slot* s : ready) items.push_back({&*s->state, s->spec.block, &s->spec.fr.logits});
    const Status st = model_->prefill_batch(items, /*all_rows=*/true);
    int ran = 0;
    for (size_t i = 0; i < ready.size(); ++i) {
      Slot& s = *ready[i];
      if (s.info.phase != RequestPhase::decoding) continue;  // cancelled by an earlier callback
      if (!st.ok()) {
        fail(s, Status(st.code(), "speculative step: " + st.message()));
        continue;
      }
      auto v = speculative_verdict(s.spec.fr.logits, model_->shape().vocab_size, s.spec, s.sampler);
      if (!v.ok()) {
        fail(s, Status(v.status().code(), "speculative step: " + v.status().message()));
        continue;
      }
      ran += spec_accept(s, snaps[i], *v);
    }
    return ran;
  }

  // After a verified block: counts, returns the accepted drafts and the next token, rolls the state back to what
  // was returned. Returns the block's length.
  int spec_accept(Slot& s, const typename M::Snapshot& snapshot, const Verdict v) {
    State& st = *s.state;
    const std::vector<int32_t>& block = s.spec.block;
    if (block.size() > 1) {
      ++s.info.spec_steps;
      s.info.drafted += int64_t(block.size()) - 1;
      s.info.accepted += v.accepted;
    }
    const int64_t base = snapshot.pos;
    int returned = 0;
    auto alive = [&] { return s.info.phase == RequestPhase::decoding; };
    for (int i = 1; i <= v.accepted && alive(); ++i) emit(s, block[i], base + ++returned);
    if (alive()) emit(s, v.next, base + ++returned);
    if (alive()) {  // a finished request's sequence is gone: nothing to roll back
      if (Status r = rollback(*model_, st, snapshot, returned); !r.ok())
        fail(s, Status(r.code(), "speculative rollback: " + r.message()));
      else
        record_boundary(s);
    }
    return int(block.size());
  }

  // The request's next token: its forced continuation while one runs, else a sample of its logits.
  int32_t pick(Slot& s) {
    if (!s.forcing && s.forced_at == 0 && s.req.force_after < 0 && !s.req.forced.empty()) s.forcing = true;
    if (s.forcing && s.forced_at < s.req.forced.size()) {
      const int32_t t = s.req.forced[s.forced_at++];
      if (s.forced_at == s.req.forced.size()) s.forcing = false;
      return t;
    }
    return s.sampler.sample(s.logits);
  }

  // Returns token t to the request and decides whether it continues (same rules as generate()). held: the
  // positions its sequence holds if it ends with t.
  void emit(Slot& s, int32_t t, int64_t held, const std::vector<float>* logits = nullptr) {
    ++s.info.completion_tokens;
    if (s.req.drafter || uses_session(s)) s.generated.push_back(t);
    if (s.req.top_logprobs >= 0 && s.req.on_logprobs && logits) {
      if (!s.req.on_logprobs(s.req.ctx, s.id, logprobs_of(*logits, t, s.req.top_logprobs, s.lp_ids, s.lp_vals)))
        return finish(s, RequestFinish::cancelled);
      if (s.info.phase == RequestPhase::finished) return;
    }
    if (s.req.on_token) {
      if (!s.req.on_token(s.req.ctx, s.id, t)) return finish(s, RequestFinish::cancelled);
      if (s.info.phase == RequestPhase::finished) return;  // the callback cancelled it
    } else {
      s.unread.push_back(t);
    }
    if (std::find(s.req.stop_ids.begin(), s.req.stop_ids.end(), t) != s.req.stop_ids.end()) {
      s.info.stop_id = t;
      return finish(s, RequestFinish::stop);
    }
    if (s.info.completion_tokens >= s.req.max_tokens || held >= s.state->max_positions)
      return finish(s, RequestFinish::length);
    if (t == s.req.force_after && s.req.force_after >= 0 && s.forced_at == 0 && !s.req.forced.empty()) s.forcing = true;
    s.next = t;
  }

  void fail(Slot& s, Status st) {
    store(s.info.status, std::move(st));
    finish(s, RequestFinish::error);
  }

  // Ends a request: frees its sequence (or hands it to the session store's finish hook, which keeps it for a later
  // request that extends it) and its running slot at once, then tells the host.
  void finish(Slot& s, RequestFinish f) {
    if (s.info.phase == RequestPhase::finished) return;
    if (s.state) {
      hand_over(s, f);
      s.state.reset();
      reserved_ -= s.info.cache_bytes;
    }
    auto a = std::find(active_.begin(), active_.end(), &s);
    if (a != active_.end()) active_.erase(a);
    auto q = std::find(queue_.begin(), queue_.end(), &s);
    if (q != queue_.end()) queue_.erase(q);
    s.info.phase = RequestPhase::finished;
    s.info.finish = f;
    ++finished_;
    notify(s);
  }

  void notify(Slot& s) {
    if (s.req.on_finish) s.req.on_finish(s.req.ctx, s.id);
    if (s.req.release_when_done) forget(s.id);
  }

  void forget(RequestId id) {
    if (in_step_) {
      deferred_forget_.push_back(id);
      return;
    }
    slots_.erase(id);
  }

  const M* model_;
  EngineOptions opt_;
  CacheBytes bytes_;
  SessionHooks<State> session_;
  std::map<RequestId, std::unique_ptr<Slot>> slots_;  // every request not yet forgotten
  std::vector<Slot*> queue_;                           // waiting, in admission order
  std::vector<Slot*> active_;                          // admitted, in admission order
  std::vector<RequestId> pending_notify_, deferred_forget_;
  RequestId next_id_ = 1;
  int64_t reserved_ = 0;
  uint64_t steps_ = 0, finished_ = 0, rr_ = 0;
  bool in_step_ = false;
};

}  // namespace dsv41
