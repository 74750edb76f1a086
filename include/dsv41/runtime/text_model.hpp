// Text in, text out on top of a Model: tokenizer, the V4.1 prompt format, generation with stop strings
// and streaming UTF-8 pieces (never half a character), and the parse of the answer. Host-only.
#pragma once
#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/runtime/generate.hpp>
#include <dsv41/runtime/session_hooks.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/text/chat_format.hpp>
#include <dsv41/text/tokenizer.hpp>

namespace dsv41::text {

struct TextOptions {
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;       // stop strings (not included in the text)
  bool speculative = false;            // DSpark drafting, lossless
  int prefill_chunk = 0;
  bool bounded_replay = false;
  int64_t context = 0;                 // prompt + completion at most this many tokens (0: the model's positions)
  // Called once per generated token with its id and the text that became final with it (valid UTF-8;
  // empty while bytes are held back for an incomplete character or a possible stop string), and once
  // more with id −1 for what the end of generation releases. Return false to cancel.
  bool (*on_text)(void* ctx, int32_t id, std::string_view piece) = nullptr;
  bool (*on_prefill)(void* ctx, int64_t done, int64_t total) = nullptr;
  void* ctx = nullptr;
};

enum class TextFinish { stop, length, cancelled, error };  // error: only from TextEngine (runtime/text_engine.hpp)

inline const char* text_finish_name(TextFinish f) {
  return f == TextFinish::stop ? "stop" : f == TextFinish::length ? "length" : f == TextFinish::error ? "error" : "cancelled";
}

struct TextResult {
  std::string text;              // the completion, stop string or EOS excluded
  std::vector<int32_t> ids;      // every generated id
  std::vector<int32_t> prompt_ids;  // the prompt as the model took it (image placeholders expanded to their spans)
  TextFinish finish = TextFinish::length;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens whose caches came back from a session store (not recomputed)
  int64_t drafted = 0, accepted = 0, spec_steps = 0;
};

// The session store hooks (runtime/session_hooks.hpp), also as text::SessionHooks.
using dsv41::SessionHooks;

// Incremental detokenization with stop strings: text is released only once no stop string can still begin
// in it, and never half a UTF-8 character. on_text gets each token's id with the text that became final
// with it (id -1 for what finish() releases); stop, the tokenizer and ctx must outlive the stream.
class TextStream {
 public:
  using OnText = bool (*)(void* ctx, int32_t id, std::string_view piece);
  TextStream(const Tokenizer& tok, int32_t eos, const std::vector<std::string>& stop, OnText on_text, void* ctx)
      : dec_(tok.stream_decoder()), eos_(eos), stop_(&stop), on_text_(on_text), ctx_(ctx) {}

  std::string text;  // everything final so far (released or held)
  bool stopped_by_string = false, cancelled = false;

  // A generated token; false when a stop string ended the text or on_text cancelled. EOS adds no text.
  bool push(int32_t id) {
    cur_ = id;
    if (id == eos_) return !on_text_ || on_text_(ctx_, id, {});
    text += dec_.push(id);
    return scan(false);
  }
  // The end of generation: releases what was held back.
  void finish() {
    cur_ = -1;
    text += dec_.flush();
    scan(true);
  }

 private:
  bool scan(bool final) {
    size_t hold = 0;
    for (const auto& s : *stop_) {
      const size_t at = text.find(s, released_ >= s.size() ? released_ - s.size() + 1 : 0);
      if (at != std::string::npos) {
        text.resize(at);
        stopped_by_string = true;
        release(text.size());
        return false;
      }
      hold = std::max(hold, s.size() - 1);
    }
    size_t upto = final ? text.size() : (text.size() > hold ? text.size() - hold : 0);
    while (upto > released_ && upto < text.size() && (uint8_t(text[upto]) & 0xC0) == 0x80) --upto;  // char boundary
    if (!release(upto)) {
      cancelled = true;
      return false;
    }
    return true;
  }
  bool release(size_t upto) {
    const std::string_view piece(text.data() + released_, upto > released_ ? upto - released_ : 0);
    released_ = std::max(released_, upto);
    return !on_text_ || on_text_(ctx_, cur_, piece);
  }

  Tokenizer::StreamDecoder dec_;
  int32_t eos_;
  const std::vector<std::string>* stop_;
  OnText on_text_;
  void* ctx_;
  size_t released_ = 0;
  int32_t cur_ = -1;  // the token being handled, reported with the text it releases
};

template <class M>
class TextModel {
 public:
  // Prompts resume from (and store into) a session store; the hooks' ctx must outlive the model's use.
  void set_session(SessionHooks<typename M::State> h) { session_ = h; }
  const SessionHooks<typename M::State>& session() const { return session_; }

  // tok must match the model's vocabulary; the chat tokens must exist in it.
  static Result<TextModel> make(const M& model, Tokenizer tok, ChatTokens chat = {}) {
    const ModelShape& s = model.shape();
    if (tok.vocab_size() > size_t(s.vocab_size))
      return error(Code::mismatch, "tokenizer has " + std::to_string(tok.vocab_size()) + " tokens, the model " +
                                       std::to_string(s.vocab_size));
    for (const std::string* t : {&chat.bos, &chat.eos, &chat.user, &chat.assistant, &chat.think_open, &chat.think_close})
      if (!tok.token_to_id(*t)) return error(Code::mismatch, "tokenizer has no token '" + *t + "'");
    return TextModel(model, std::move(tok), std::move(chat));
  }

  const M& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const ChatTokens& chat_tokens() const { return chat_; }
  int32_t eos_id() const { return *tok_.token_to_id(chat_.eos); }

  // The prompt of an OpenAI-style chat request (messages, tools, thinking_mode, reasoning_effort), with the
  // ranges its client wrote: special-token text there stays text (prompt_text.hpp).
  Result<PromptText> render(const nlohmann::ordered_json& request) const { return render_prompt_text(request, chat_); }

  // Completes prompt text (special-token text is recognised) in a fresh sequence.
  Result<TextResult> complete(std::string_view prompt, const TextOptions& o) const {
    const std::vector<int32_t> ids = tok_.encode(prompt, true);
    return complete_ids(ids, o);
  }
  // Completes a rendered prompt (special-token text is recognised outside its literal ranges).
  Result<TextResult> complete(const PromptText& prompt, const TextOptions& o) const {
    const std::vector<int32_t> ids = tok_.encode(prompt);
    return complete_ids(ids, o);
  }

  Result<TextResult> complete_ids(std::span<const int32_t> ids, const TextOptions& o) const {
    const ModelShape& s = model_->shape();
    if (ids.empty()) return error(Code::invalid_argument, "empty prompt");
    if (o.max_tokens < 0) return error(Code::invalid_argument, "max_tokens must be >= 0");
    if (o.context < 0) return error(Code::invalid_argument, "context must be >= 0");
    int64_t limit = s.max_position_embeddings > 0 ? s.max_position_embeddings : int64_t(1) << 40;
    if (o.context > 0) limit = std::min(limit, o.context);
    if (int64_t(ids.size()) + 1 > limit)
      return error(Code::out_of_range, "prompt of " + std::to_string(ids.size()) + " tokens exceeds the context of " +
                                           std::to_string(limit));
    const int64_t cap = std::min<int64_t>(limit, int64_t(ids.size()) + o.max_tokens + s.dspark_block_size + 2);
    auto made = new_sequence_of(*model_, cap);
    if (!made.ok()) return made.status();
    auto& st = *made;
    for (const auto& st_str : o.stop)
      if (st_str.empty()) return error(Code::invalid_argument, "empty stop string");
    Stream stream{&o, TextStream(tok_, eos_id(), o.stop, o.on_text, o.ctx)};
    // With a session store: resume, run the rest in chunks that end at block boundaries, record each boundary.
    int64_t cached = 0;
    if (session_.block > 0 && session_.resume) {
      auto r = session_.resume(session_.ctx, st, ids);
      if (r.ok()) cached = *r;  // a store that fails is a miss: run cold
      stream.session = &session_;
      stream.state = &st;
      stream.tokens.assign(ids.begin(), ids.end());
    }
    GenerateOptions g;
    g.max_tokens = int(std::min<int64_t>(o.max_tokens, limit - int64_t(ids.size())));  // the context ends it: length
    g.sampling = o.sampling;
    g.stop_ids = {eos_id()};
    g.speculative = o.speculative && s.n_dspark() > 0;
    g.prefill_chunk = o.prefill_chunk;
    g.on_prefill = o.on_prefill;
    g.ctx = &stream;
    g.on_token = [](void* c, int32_t id) { return static_cast<Stream*>(c)->push(id); };
    if (o.on_prefill || stream.session) {
      // on_prefill shares ctx with on_token: forward it to the caller's ctx (and record session boundaries).
      g.on_prefill = [](void* c, int64_t done, int64_t total) {
        auto* st2 = static_cast<Stream*>(c);
        st2->at_boundary();
        return !st2->opts->on_prefill || st2->opts->on_prefill(st2->opts->ctx, done, total);
      };
    }
    if (stream.session) g.prefill_chunk = session_.block;
    auto r = generate(*model_, st, std::span<const int32_t>(ids).subspan(size_t(cached)), g);
    if (!r.ok()) return r.status();
    if (stream.session && session_.finish) {
      // generate's contract: st holds the prompt and every returned token but the last.
      std::vector<int32_t> held(ids.begin(), ids.end());
      held.insert(held.end(), r->tokens.begin(), r->tokens.end());
      if (st.pos <= int64_t(held.size())) {
        held.resize(size_t(st.pos));
        session_.finish(session_.ctx, std::move(st), held);
      }
    }
    TextResult out;
    out.ids = r->tokens;
    out.prompt_tokens = int64_t(ids.size());
    out.prompt_ids.assign(ids.begin(), ids.end());
    out.cached_tokens = cached;
    out.completion_tokens = int64_t(r->tokens.size());
    out.drafted = r->drafted;
    out.accepted = r->accepted;
    out.spec_steps = r->spec_steps;
    TextStream& ts = stream.ts;
    if (!ts.stopped_by_string && !ts.cancelled) ts.finish();
    out.text = std::move(ts.text);
    if (ts.stopped_by_string || r->finish == FinishReason::stop) out.finish = TextFinish::stop;
    else if (ts.cancelled) out.finish = TextFinish::cancelled;
    else out.finish = TextFinish::length;
    return out;
  }

 private:
  TextModel(const M& m, Tokenizer t, ChatTokens c) : model_(&m), tok_(std::move(t)), chat_(std::move(c)) {}

  // The text stream of one completion, with the session store's boundary records.
  struct Stream {
    const TextOptions* opts;
    TextStream ts;
    // With a session store: the state, every token known (prompt then generated), the last boundary recorded.
    const SessionHooks<typename M::State>* session = nullptr;
    typename M::State* state = nullptr;
    std::vector<int32_t> tokens{};
    int64_t last_boundary = 0;

    // Records the state's block boundary when it stands at one and holds exactly the known tokens (in speculative
    // steps it may hold drafts not yet accepted: then it waits for the next boundary).
    void at_boundary() {
      if (!session || !state) return;
      const int64_t pos = state->pos;
      if (pos == 0 || pos % session->block || pos <= last_boundary || pos > int64_t(tokens.size())) return;
      last_boundary = pos;
      (void)session->boundary(session->ctx, *state, std::span<const int32_t>(tokens).first(size_t(pos)));
    }

    bool push(int32_t id) {
      if (session) {
        at_boundary();  // the state holds everything before id
        tokens.push_back(id);
      }
      return ts.push(id);
    }
  };

  const M* model_;
  Tokenizer tok_;
  ChatTokens chat_;
  SessionHooks<typename M::State> session_;
};

}  // namespace dsv41::text
