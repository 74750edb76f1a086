// Text requests over the continuous-batching engine (runtime/engine.hpp): prompt text in (e.g. TextModel's
// rendering of a chat request), text deltas out as each step returns tokens (TextStream: UTF-8 safe, stop
// strings honoured), then one on_done with the whole text, the ids, the finish and the usage. Parsing the
// answer (reasoning, tool calls) is left to the host (text::parse_completion), as for TextModel.
//
// Threads: thread-safe. One thread calls step() (callbacks run there, or inside cancel() for on_done);
// submit, cancel, poll and counts may come from any thread and wait at most one step. Callbacks run under
// the engine's lock: they should return quickly (hand the text to a queue) and may call cancel().
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/runtime/engine.hpp>
#include <dsv41/runtime/shared_engine.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/vision/image_processor.hpp>

namespace dsv41::text {

struct TextDone {
  RequestId id = 0;
  Status status;       // why, when result.finish == error
  TextResult result;   // text (stop string or EOS excluded), ids, prompt ids, finish, prompt/completion/cached tokens
};

struct TextRequest {
  std::string prompt;  // prompt text; special-token text is recognised outside `literal`
  std::vector<TextRange> literal;  // ranges of prompt a client wrote (PromptText::literal; render() fills it)
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings (not included in the text)
  bool speculative = false;       // DSpark drafting, lossless (when the model has DSpark stages)
  int priority = 0;               // admission order: higher first
  bool use_session = true;        // resume from and record into the session store, if the model has one
  // The text that became final with token id (as TextStream reports it). false cancels the request.
  bool (*on_text)(void* ctx, RequestId req, int32_t id, std::string_view piece) = nullptr;
  void (*on_done)(void* ctx, const TextDone& d) = nullptr;  // once, however the request ends
  void* ctx = nullptr;
  // With top_logprobs >= 0: each generated token's log-probabilities (Request::on_logprobs), before its text.
  // Forced continuation (Request::forced): after the token whose text is force_after (empty: from the first
  // token) the completion continues with forced_text's tokens (special-token text recognised).
  std::string forced_text, force_after;
  // Images, in the order of the image placeholder tokens in the prompt (one each; the count must match): each
  // placeholder becomes the image's span (SPEC §4.10), so the prompt's token count includes the spans.
  std::vector<vision::ProcessedImage> images;
  int top_logprobs = -1;
  bool (*on_logprobs)(void* ctx, RequestId req, const TokenLogprobs& lp) = nullptr;
};

// What a host needs of the text engine, whatever the model type.
class TextEngineBase {
 public:
  virtual ~TextEngineBase() = default;
  // Queues a request. Refused with its Status (no id, no callbacks) when the queue is full
  // (Code::resource_exhausted) or the request is bad (empty prompt, prompt too long: Code::out_of_range,
  // bad sampling options, empty stop string).
  virtual Result<RequestId> submit(TextRequest r) = 0;
  virtual Status cancel(RequestId id) = 0;  // on_done follows (finish cancelled) unless it came already
  virtual StepStats step() = 0;
  virtual EngineCounts counts() const = 0;
  virtual bool idle() const = 0;
  virtual const EngineOptions& options() const = 0;
};

template <class M>
class TextEngine final : public TextEngineBase {
 public:
  // tm (its model, tokenizer and session store) must outlive the engine. Sessions: tm's store, if set.
  static Result<std::unique_ptr<TextEngine>> make(const TextModel<M>& tm, const EngineOptions& o) {
    auto e = Engine<M>::make(tm.model(), o);
    if (!e.ok()) return e.status();
    std::unique_ptr<TextEngine> t(new TextEngine(tm, std::move(e).value()));
    if (tm.session().block > 0) t->engine_.set_session(tm.session());
    return Result<std::unique_ptr<TextEngine>>(std::move(t));
  }

  Result<RequestId> submit(TextRequest r) override {
    for (const auto& s : r.stop)
      if (s.empty()) return error(Code::invalid_argument, "empty stop string");
    auto job = std::make_unique<Job>(this, std::move(r));
    Request q;
    q.prompt = tm_->tokenizer().encode(job->req.prompt, job->req.literal);
    if (Status e = expand_images(job->req.images, q); !e.ok()) return e;
    job->prompt_ids = q.prompt;  // handed back in TextDone::result (the engine keeps its own)
    q.max_tokens = job->req.max_tokens;
    q.sampling = job->req.sampling;
    q.stop_ids = {tm_->eos_id()};
    q.priority = job->req.priority;
    q.use_session = job->req.use_session;
    q.speculative = job->req.speculative && tm_->model().shape().n_dspark() > 0;
    if (!job->req.forced_text.empty()) {
      q.forced = tm_->tokenizer().encode(job->req.forced_text, true);
      if (!job->req.force_after.empty()) {
        const auto after = tm_->tokenizer().token_to_id(job->req.force_after);
        if (!after)
          return error(Code::unsupported, "a continuation forced after \"" + job->req.force_after +
                                              "\" needs that text to be one token of the tokenizer");
        q.force_after = *after;
      }
    }
    q.on_token = [](void* c, RequestId, int32_t t) { return static_cast<Job*>(c)->token(t); };
    q.on_finish = [](void* c, RequestId id) { static_cast<Job*>(c)->self->done(id); };
    if (job->req.top_logprobs >= 0 && job->req.on_logprobs) {
      q.top_logprobs = job->req.top_logprobs;
      q.on_logprobs = [](void* c, RequestId id, const TokenLogprobs& lp) {
        auto* j = static_cast<Job*>(c);
        return j->req.on_logprobs(j->req.ctx, id, lp);
      };
    }
    q.ctx = job.get();
    q.release_when_done = true;
    return engine_.with([&](Engine<M>& e) -> Result<RequestId> {
      auto id = e.submit(std::move(q));
      if (!id.ok()) return id.status();
      auto info = e.poll(*id);
      if (info.ok() && info->finish == RequestFinish::error) {  // a bad request: refused, no callbacks
        Status why = info->status;
        static_cast<void>(e.release(*id));
        return why;
      }
      job->id = *id;
      jobs_.emplace(*id, std::move(job));
      return *id;
    });
  }

  Status cancel(RequestId id) override { return engine_.cancel(id); }
  StepStats step() override { return engine_.step(); }
  EngineCounts counts() const override { return engine_.counts(); }
  bool idle() const override { return engine_.idle(); }
  const EngineOptions& options() const override { return opts_; }
  Result<RequestInfo> poll(RequestId id) const { return engine_.poll(id); }

 private:
  struct Job {
    Job(TextEngine* s, TextRequest r)
        : self(s), req(std::move(r)),
          stream(s->tm_->tokenizer(), s->tm_->eos_id(), req.stop, &Job::piece, this) {}
    static bool piece(void* c, int32_t id, std::string_view p) {
      auto* j = static_cast<Job*>(c);
      return !j->req.on_text || j->req.on_text(j->req.ctx, j->id, id, p);
    }
    bool token(int32_t t) {
      ids.push_back(t);
      return stream.push(t);
    }
    TextEngine* self;
    TextRequest req;  // before stream: the stream refers to req.stop
    TextStream stream;
    RequestId id = 0;
    std::vector<int32_t> ids, prompt_ids;
  };

  TextEngine(const TextModel<M>& tm, Engine<M>&& e) : tm_(&tm), opts_(e.options()), engine_(std::move(e)) {}

  // on_finish of request id (inside the engine, under its lock): the text's end, then the host's on_done.
  void done(RequestId id) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    std::unique_ptr<Job> job = std::move(it->second);
    jobs_.erase(it);
    TextDone d;
    d.id = id;
    auto info = engine_.poll(id);
    TextResult& r = d.result;
    TextStream& ts = job->stream;
    if (info.ok()) {
      r.prompt_tokens = info->prompt_tokens;
      r.completion_tokens = info->completion_tokens;
      r.cached_tokens = info->cached_tokens;
      r.drafted = info->drafted;
      r.accepted = info->accepted;
      r.spec_steps = info->spec_steps;
      switch (info->finish) {
        case RequestFinish::stop: r.finish = TextFinish::stop; break;
        case RequestFinish::error:
          r.finish = TextFinish::error;
          d.status = info->status;
          break;
        case RequestFinish::cancelled:  // a stop string ends the request through on_token's false
          r.finish = ts.stopped_by_string ? TextFinish::stop : TextFinish::cancelled;
          break;
        default: r.finish = TextFinish::length; break;
      }
    } else {
      r.finish = TextFinish::error;
      d.status = info.status();
    }
    if (r.finish == TextFinish::stop || r.finish == TextFinish::length)
      if (!ts.stopped_by_string && !ts.cancelled) ts.finish();
    r.text = std::move(ts.text);
    r.ids = std::move(job->ids);
    r.prompt_ids = std::move(job->prompt_ids);
    if (job->req.on_done) job->req.on_done(job->req.ctx, d);
  }

  // Each image placeholder id of q.prompt becomes its image's span; the images move into q.
  Status expand_images(std::vector<vision::ProcessedImage>& images, Request& q) const {
    const int32_t image_id = tm_->model().shape().image_token_id;
    size_t found = 0;
    for (int32_t t : q.prompt) found += image_id >= 0 && t == image_id;
    if (found != images.size())
      return error(Code::invalid_argument, "the prompt holds " + std::to_string(found) + " image placeholders for " +
                                               std::to_string(images.size()) + " images");
    if (images.empty()) return Status::Ok();
    std::vector<int32_t> ids;
    size_t k = 0;
    for (int32_t t : q.prompt) {
      if (t != image_id) {
        ids.push_back(t);
        continue;
      }
      vision::ProcessedImage& im = images[k++];
      RequestImage r;
      r.start = int64_t(ids.size());
      r.types = im.span_types();
      r.patches = std::move(im.patches);
      r.n_vit_h = im.n_vit_h;
      r.n_vit_w = im.n_vit_w;
      r.n_llm_h = im.n_llm_h;
      r.n_llm_w = im.n_llm_w;
      ids.insert(ids.end(), r.types.size(), image_id);
      q.images.push_back(std::move(r));
    }
    q.prompt = std::move(ids);
    return Status::Ok();
  }

  const TextModel<M>* tm_;
  EngineOptions opts_;
  SharedEngine<M> engine_;
  std::map<RequestId, std::unique_ptr<Job>> jobs_;  // under the engine's lock
};

}  // namespace dsv41::text
