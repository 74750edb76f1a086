// The C API (include/dsv41/c_api.h). Compiled, not header-only: a C program cannot instantiate the C++
// templates behind it, so this unit instantiates them once (Model<> here, Model<Dynamic, Cuda> in
// c_api_cuda.cu) and exports plain functions. Every entry point catches C++ exceptions at the boundary.
#include <dsv41/c_api.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <optional>

#include <nlohmann/json.hpp>

#include <dsv41/runtime/sampler.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/text/chat_parse.hpp>

#include "c_api_backend.hpp"

using namespace dsv41;

struct dsv41_model {
  std::unique_ptr<capi::Backend> backend;  // null after a failed load
  std::string error;
  std::mutex forward_lock;  // one forward at a time on this model (sessions may live on different threads)
};

namespace {

using Clock = std::chrono::steady_clock;

dsv41_status to_c(Code c) { return dsv41_status(int(c)); }

dsv41_status set_error(std::string& where, const Status& s) {
  where = s.message();
  return to_c(s.code());
}

// Runs f, turning an escaping exception into a status and a message in err.
template <class F>
dsv41_status guarded(std::string& err, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    err = "out of memory";
    return DSV41_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    err = std::string("internal error: ") + e.what();
    return DSV41_INTERNAL;
  } catch (...) {
    err = "internal error: unknown exception";
    return DSV41_INTERNAL;
  }
}

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct GenOptions {
  int max_tokens = 256;  // < 0: prefill only
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  int prefill_chunk = 64;
  dsv41_token_fn on_token = nullptr;
  void* ctx = nullptr;
};

Result<GenOptions> gen_options(const dsv41_generate_options* o, int32_t eos) {
  GenOptions g;
  g.stop_ids.push_back(eos);
  if (!o) return g;
  if (o->max_tokens != 0) g.max_tokens = o->max_tokens;
  g.sampling.temperature = o->temperature;
  g.sampling.top_k = o->top_k;
  g.sampling.top_p = o->top_p == 0.f ? 1.f : o->top_p;
  g.sampling.min_p = o->min_p;
  g.sampling.seed = o->seed;
  DSV41_TRY(validate(g.sampling));
  if (o->n_stop_ids > 0 && !o->stop_ids) return error(Code::invalid_argument, "stop_ids is NULL");
  for (size_t i = 0; i < o->n_stop_ids; ++i) g.stop_ids.push_back(o->stop_ids[i]);
  if (o->n_stop_strings > 0 && !o->stop_strings) return error(Code::invalid_argument, "stop_strings is NULL");
  for (size_t i = 0; i < o->n_stop_strings; ++i) {
    if (!o->stop_strings[i] || !*o->stop_strings[i])
      return error(Code::invalid_argument, "stop_strings[" + std::to_string(i) + "] is NULL or empty");
    g.stop_strings.emplace_back(o->stop_strings[i]);
  }
  if (o->prefill_chunk < 0) return error(Code::invalid_argument, "prefill_chunk must be >= 0");
  if (o->prefill_chunk > 0) g.prefill_chunk = o->prefill_chunk;
  g.on_token = o->on_token;
  g.ctx = o->ctx;
  return g;
}

// One begun generation of a session: chunked prefill of the prompt's new tokens, then one decode per token.
struct Generation {
  Generation(const capi::Backend& b, GenOptions o)
      : opt(std::move(o)), sampler(opt.sampling), stream(b.tokenizer(), -1, opt.stop_strings, &Generation::piece, this) {}
  Generation(const Generation&) = delete;  // stream points into this
  // TextStream's output: the caller's on_token (id -1: text released at the end).
  static bool piece(void* c, int32_t id, std::string_view p) {
    auto* g = static_cast<Generation*>(c);
    return !g->opt.on_token || g->opt.on_token(g->opt.ctx, id, p.data(), p.size());
  }
  GenOptions opt;
  Sampler sampler;
  text::TextStream stream;  // UTF-8 safe text, stop strings
  std::vector<int32_t> prompt;
  int64_t cached = 0, prompt_done = 0;
  bool chat = false;
  text::Mode mode = text::Mode::thinking;
  bool decoding = false;
  int32_t next = -1;  // the last generated token, not yet run
  std::vector<int32_t> generated;
  std::vector<float> logits;
  std::string text;
  dsv41_finish finish = DSV41_FINISH_NONE;
  double decode_us = 0, prefill_us_per_token = 0;  // running estimates of a unit's cost
};

}  // namespace

struct dsv41_session {
  dsv41_model* model = nullptr;
  int64_t max_positions = 0;
  std::unique_ptr<capi::Sequence> seq;
  std::vector<int32_t> held;  // the tokens seq holds
  std::optional<Generation> gen;
  std::string error;
};

namespace {

const capi::Backend& backend_of(const dsv41_session* s) { return *s->model->backend; }

// Starts a generation of ids in s, reusing the held sequence when ids extend it.
Status begin_ids(dsv41_session* s, std::vector<int32_t> ids, GenOptions o, bool chat, text::Mode mode) {
  const capi::Backend& b = backend_of(s);
  const ModelShape& sh = b.shape();
  if (ids.empty()) return error(Code::invalid_argument, "empty prompt");
  for (int32_t id : ids)
    if (id < 0 || id >= sh.vocab_size)
      return error(Code::invalid_argument,
                   "token id " + std::to_string(id) + " outside the vocabulary of " + std::to_string(sh.vocab_size));
  const bool extends = s->seq && s->held.size() < ids.size() && std::equal(s->held.begin(), s->held.end(), ids.begin());
  if (!extends) {
    s->seq.reset();
    s->held.clear();
    if (int64_t(ids.size()) >= s->max_positions)
      return error(Code::out_of_range, "prompt of " + std::to_string(ids.size()) +
                                           " tokens leaves no room in the session's " +
                                           std::to_string(s->max_positions) + " positions");
    auto seq = b.new_sequence(s->max_positions);
    if (!seq.ok()) return seq.status();
    s->seq = std::move(seq).value();
  } else if (int64_t(ids.size()) >= s->seq->capacity()) {
    return error(Code::out_of_range, "prompt of " + std::to_string(ids.size()) + " tokens leaves no room in the " +
                                         std::to_string(s->seq->capacity()) + " positions of the session");
  }
  s->gen.emplace(b, std::move(o));
  Generation& g = *s->gen;
  g.prompt = std::move(ids);
  g.cached = g.prompt_done = int64_t(s->held.size());
  g.chat = chat;
  g.mode = mode;
  return Status::Ok();
}

void finish_gen(Generation& g, dsv41_finish f) {
  g.finish = f;
  if (f == DSV41_FINISH_ERROR) return;
  if (!g.stream.stopped_by_string && !g.stream.cancelled) g.stream.finish();  // releases what was held back
  g.text = g.stream.text;
}

// Hands token t to the caller and decides whether generation goes on.
void emit(dsv41_session* s, Generation& g, int32_t t) {
  g.generated.push_back(t);
  const bool stop = std::find(g.opt.stop_ids.begin(), g.opt.stop_ids.end(), t) != g.opt.stop_ids.end();
  if (stop) {  // a stop id adds no text
    if (g.opt.on_token && !g.opt.on_token(g.opt.ctx, t, "", 0)) return finish_gen(g, DSV41_FINISH_CANCELLED);
    return finish_gen(g, DSV41_FINISH_STOP);
  }
  const bool go_on = g.stream.push(t);
  g.text = g.stream.text;
  if (!go_on) return finish_gen(g, g.stream.stopped_by_string ? DSV41_FINISH_STOP : DSV41_FINISH_CANCELLED);
  if (int64_t(g.generated.size()) >= g.opt.max_tokens || s->seq->pos() + 1 > s->seq->capacity())
    return finish_gen(g, DSV41_FINISH_LENGTH);
  g.next = t;
}

// A forward failed: the sequence's contents are unknown, so it is dropped.
dsv41_status fail(dsv41_session* s, const Status& st) {
  s->gen->finish = DSV41_FINISH_ERROR;
  s->seq.reset();
  s->held.clear();
  return set_error(s->error, st);
}

dsv41_status poll_impl(dsv41_session* s, int32_t max_new, int64_t max_us, int32_t* out, size_t capacity,
                       dsv41_poll_result* r) {
  const auto t0 = Clock::now();
  if (!s->gen) return set_error(s->error, error(Code::invalid_argument, "poll: no generation begun"));
  Generation& g = *s->gen;
  if (max_new < 0 || max_us < 0) return set_error(s->error, error(Code::invalid_argument, "poll: negative bound"));
  if (out && capacity > 0 && (max_new == 0 || size_t(max_new) > capacity)) max_new = int32_t(std::min<size_t>(capacity, INT32_MAX));
  size_t produced = 0;
  bool worked = false;
  int32_t units = 0;
  double last_unit_us = 0;
  dsv41_status rc = DSV41_OK;
  std::mutex& lock = s->model->forward_lock;
  while (g.finish == DSV41_FINISH_NONE) {
    if (max_new > 0 && produced >= size_t(max_new)) break;
    const double elapsed = micros(Clock::now() - t0);
    const size_t before = g.generated.size();
    const auto u0 = Clock::now();
    if (!g.decoding) {
      const int64_t left = int64_t(g.prompt.size()) - g.prompt_done;
      int64_t n = std::min<int64_t>(left, g.opt.prefill_chunk);
      if (max_us > 0) {  // a chunk sized to the time left (one token before the cost is known)
        const double room = double(max_us) - elapsed;
        if (worked && room <= 0) break;
        const int64_t fit = g.prefill_us_per_token > 0 ? int64_t(room / g.prefill_us_per_token) : 1;
        if (worked && fit < 1) break;
        n = std::clamp<int64_t>(fit, 1, n);
      }
      const bool last = n == left;
      const auto ids = std::span<const int32_t>(g.prompt).subspan(size_t(g.prompt_done), size_t(n));
      const auto c0 = Clock::now();
      Status st;
      {
        std::lock_guard<std::mutex> hold(lock);
        st = s->seq->prefill(ids, last ? &g.logits : nullptr);
      }
      if (!st.ok()) {
        rc = fail(s, Status(st.code(), "prefill: " + st.message()));
        break;
      }
      const double per = micros(Clock::now() - c0) / double(n);
      g.prefill_us_per_token = g.prefill_us_per_token > 0 ? 0.5 * (g.prefill_us_per_token + per) : per;
      s->held.insert(s->held.end(), ids.begin(), ids.end());
      g.prompt_done += n;
      if (last) {
        if (g.opt.max_tokens < 0) {
          finish_gen(g, DSV41_FINISH_LENGTH);
        } else {
          g.decoding = true;
          emit(s, g, g.sampler.sample(g.logits));
        }
      }
    } else {
      if (worked && max_us > 0 && elapsed + g.decode_us > double(max_us)) break;
      const auto c0 = Clock::now();
      Status st;
      {
        std::lock_guard<std::mutex> hold(lock);
        st = s->seq->decode(g.next, g.logits);
      }
      if (!st.ok()) {
        rc = fail(s, Status(st.code(), "decode: " + st.message()));
        break;
      }
      const double us = micros(Clock::now() - c0);
      g.decode_us = g.decode_us > 0 ? 0.5 * (g.decode_us + us) : us;
      s->held.push_back(g.next);
      emit(s, g, g.sampler.sample(g.logits));
    }
    worked = true;
    ++units;
    last_unit_us = micros(Clock::now() - u0);
    for (size_t i = before; i < g.generated.size(); ++i, ++produced)
      if (out && produced < capacity) out[produced] = g.generated[i];
  }
  if (r) {
    r->n_tokens = out ? std::min(produced, capacity) : 0;
    r->prompt_done = g.prompt_done;
    r->prompt_tokens = int64_t(g.prompt.size());
    r->completion_tokens = int64_t(g.generated.size());
    r->elapsed_us = int64_t(micros(Clock::now() - t0));
    r->units = units;
    r->last_unit_us = int64_t(last_unit_us);
    r->finish = g.finish;
  }
  return rc;
}

void fill_completion(const dsv41_session* s, const Generation& g, dsv41_completion* out) {
  dsv41_completion c{};
  try {
    c.text = dup_string(g.text);
    c.text_len = g.text.size();
    if (g.chat) {
      const bool eos_end = g.finish == DSV41_FINISH_STOP && !g.generated.empty() &&
                           g.generated.back() == backend_of(s).eos_id();
      const text::ChatTokens& toks = backend_of(s).chat_tokens();
      auto parsed = text::parse_completion(g.text + (eos_end ? toks.eos : ""), g.mode, toks);
      nlohmann::ordered_json m = {{"role", "assistant"}};
      if (parsed.ok()) {
        m["content"] = parsed->content;
        if (!parsed->reasoning_content.empty()) m["reasoning_content"] = parsed->reasoning_content;
        if (!parsed->tool_calls.empty()) {
          auto calls = nlohmann::ordered_json::array();
          for (const auto& tc : parsed->tool_calls)
            calls.push_back({{"type", "function"},
                             {"function", {{"name", tc.name}, {"arguments", text::arguments_text(tc)}}}});
          m["tool_calls"] = calls;
        }
        m["finish_reason"] = g.finish == DSV41_FINISH_CANCELLED ? "cancelled" : text::finish_reason(parsed->finish);
      } else {  // unparseable output: the raw text as content
        m["content"] = g.text;
        m["finish_reason"] = g.finish == DSV41_FINISH_STOP ? "stop" : "length";
      }
      c.message_json = dup_string(m.dump());
    }
    if (!g.generated.empty()) {
      c.tokens = static_cast<int32_t*>(std::malloc(g.generated.size() * sizeof(int32_t)));
      if (!c.tokens) throw std::bad_alloc();
      std::memcpy(c.tokens, g.generated.data(), g.generated.size() * sizeof(int32_t));
    }
  } catch (...) {
    dsv41_completion_free(&c);
    throw;
  }
  c.n_tokens = g.generated.size();
  c.prompt_tokens = int64_t(g.prompt.size());
  c.cached_tokens = g.cached;
  c.prefilled_tokens = g.prompt_done - g.cached;
  c.finish = g.finish;
  *out = c;
}

dsv41_status take_impl(dsv41_session* s, dsv41_completion* out) {
  if (!s->gen) return set_error(s->error, error(Code::invalid_argument, "take: no generation begun"));
  if (s->gen->finish == DSV41_FINISH_NONE) finish_gen(*s->gen, DSV41_FINISH_CANCELLED);
  if (out) fill_completion(s, *s->gen, out);
  s->gen.reset();
  return DSV41_OK;
}

Result<std::vector<int32_t>> chat_ids(const dsv41_session* s, const char* request_json, text::Mode& mode) {
  if (!request_json) return error(Code::invalid_argument, "request_json is NULL");
  auto req = nlohmann::ordered_json::parse(request_json, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return error(Code::invalid_argument, "request is not valid JSON");
  mode = text::Mode::thinking;
  if (req.is_object())
    if (auto it = req.find("thinking_mode"); it != req.end() && it->is_string() && *it == "chat") mode = text::Mode::chat;
  auto prompt = backend_of(s).render(req);
  if (!prompt.ok()) return prompt.status();
  return backend_of(s).tokenizer().encode(*prompt);  // content's special-token text stays text
}

dsv41_status begin_impl(dsv41_session* s, const int32_t* prompt, size_t n, const char* request_json,
                        const dsv41_generate_options* opt) {
  if (s->gen) {
    s->error = "a generation is begun: poll it and take it first";
    return DSV41_BUSY;
  }
  auto o = gen_options(opt, backend_of(s).eos_id());
  if (!o.ok()) return set_error(s->error, o.status());
  std::vector<int32_t> ids;
  text::Mode mode = text::Mode::thinking;
  const bool chat = request_json != nullptr;
  if (chat) {
    if (prompt) return set_error(s->error, error(Code::invalid_argument, "give token ids or a request, not both"));
    auto r = chat_ids(s, request_json, mode);
    if (!r.ok()) return set_error(s->error, r.status());
    ids = std::move(r).value();
  } else {
    if (!prompt && n > 0) return set_error(s->error, error(Code::invalid_argument, "prompt is NULL"));
    ids.assign(prompt, prompt + n);
  }
  if (Status st = begin_ids(s, std::move(ids), std::move(o).value(), chat, mode); !st.ok())
    return set_error(s->error, st);
  return DSV41_OK;
}

dsv41_status run_blocking(dsv41_session* s, const int32_t* prompt, size_t n, const char* request_json,
                          const dsv41_generate_options* opt, dsv41_completion* out) {
  if (!out) return set_error(s->error, error(Code::invalid_argument, "out is NULL"));
  *out = dsv41_completion{};
  if (dsv41_status rc = begin_impl(s, prompt, n, request_json, opt); rc != DSV41_OK) return rc;
  dsv41_poll_result r{};
  while (s->gen->finish == DSV41_FINISH_NONE) {
    if (dsv41_status rc = poll_impl(s, 0, 0, nullptr, 0, &r); rc != DSV41_OK) {
      s->gen.reset();
      return rc;
    }
  }
  return take_impl(s, out);
}

// The session's checks shared by every generation call.
#define DSV41_SESSION_GUARD(s)                     \
  if (!s) return DSV41_INVALID_ARGUMENT;           \
  if (!s->model || !s->model->backend) return DSV41_INVALID_ARGUMENT

}  // namespace

extern "C" {

const char* dsv41_status_name(dsv41_status s) {
  if (s == DSV41_BUSY) return "busy";
  if (int(s) >= 0 && int(s) <= int(Code::resource_exhausted)) return code_name(Code(int(s)));
  return "unknown";
}

dsv41_status dsv41_model_load(const char* model_dir, const dsv41_load_options* opt, dsv41_model** out) {
  if (!out) return DSV41_INVALID_ARGUMENT;
  *out = nullptr;
  dsv41_model* m = new (std::nothrow) dsv41_model();
  if (!m) return DSV41_OUT_OF_MEMORY;
  *out = m;
  return guarded(m->error, [&]() -> dsv41_status {
    if (!model_dir) return set_error(m->error, error(Code::invalid_argument, "model_dir is NULL"));
    capi::LoadSpec spec;
    spec.dir = model_dir;
    spec.tokenizer_path = opt && opt->tokenizer_path ? opt->tokenizer_path : spec.dir + "/tokenizer.json";
    if (opt) {
      spec.load.progress = opt->progress;
      spec.load.ctx = opt->progress_ctx;
    }
    const std::string device = opt && opt->device ? opt->device : "";
    if (device == "cuda") {
      auto b = capi::load_cuda_backend(spec);
      if (!b.ok()) return set_error(m->error, b.status());
      m->backend = std::move(b).value();
      return DSV41_OK;
    }
    if (!device.empty() && device != "cpu")
      return set_error(m->error, error(Code::invalid_argument, "device must be \"cpu\" or \"cuda\", got \"" + device + "\""));
    std::error_code ec;
    if (!std::filesystem::is_directory(spec.dir, ec))
      return set_error(m->error, error(Code::io_error, spec.dir + ": not a directory"));
    auto model = Model<>::load(spec.dir, spec.load);
    if (!model.ok()) return set_error(m->error, model.status());
    auto tok = text::Tokenizer::from_json_file(spec.tokenizer_path);
    if (!tok.ok()) return set_error(m->error, Status(tok.status().code(), spec.tokenizer_path + ": " + tok.status().message()));
    auto b = std::make_unique<capi::BackendOf<Model<>>>(std::move(model).value(), "cpu");
    if (Status st = b->init(std::move(tok).value()); !st.ok()) return set_error(m->error, st);
    m->backend = std::move(b);
    return DSV41_OK;
  });
}

void dsv41_model_free(dsv41_model* m) { delete m; }

const char* dsv41_model_last_error(const dsv41_model* m) { return m ? m->error.c_str() : "model is NULL"; }

const char* dsv41_model_device(const dsv41_model* m) { return m && m->backend ? m->backend->device() : nullptr; }

int32_t dsv41_model_vocab_size(const dsv41_model* m) { return m && m->backend ? m->backend->shape().vocab_size : 0; }

int64_t dsv41_model_context_length(const dsv41_model* m) {
  return m && m->backend ? m->backend->shape().max_position_embeddings : 0;
}

int32_t dsv41_model_eos_id(const dsv41_model* m) { return m && m->backend ? m->backend->eos_id() : -1; }

dsv41_status dsv41_model_tokenize(dsv41_model* m, const char* text, int32_t* out, size_t capacity, size_t* n_out) {
  if (!m) return DSV41_INVALID_ARGUMENT;
  return guarded(m->error, [&]() -> dsv41_status {
    if (!m->backend) return set_error(m->error, error(Code::invalid_argument, "the model did not load"));
    if (!text || !n_out || (!out && capacity > 0))
      return set_error(m->error, error(Code::invalid_argument, "tokenize: NULL argument"));
    const std::vector<int32_t> ids = m->backend->tokenizer().encode(text, true);
    *n_out = ids.size();
    std::copy_n(ids.begin(), std::min(capacity, ids.size()), out);
    if (ids.size() > capacity)
      return set_error(m->error, error(Code::out_of_range, "tokenize: " + std::to_string(ids.size()) +
                                                               " tokens, capacity " + std::to_string(capacity)));
    return DSV41_OK;
  });
}

dsv41_status dsv41_session_create(dsv41_model* m, const dsv41_session_options* opt, dsv41_session** out) {
  if (!m) return DSV41_INVALID_ARGUMENT;
  return guarded(m->error, [&]() -> dsv41_status {
    if (!out) return set_error(m->error, error(Code::invalid_argument, "out is NULL"));
    *out = nullptr;
    if (!m->backend) return set_error(m->error, error(Code::invalid_argument, "the model did not load"));
    const int64_t ctx = m->backend->shape().max_position_embeddings;
    int64_t cap = std::min<int64_t>(ctx > 0 ? ctx : 8192, 8192);
    if (opt && opt->max_positions < 0)
      return set_error(m->error, error(Code::invalid_argument, "max_positions must be >= 0"));
    if (opt && opt->max_positions > 0) {
      if (ctx > 0 && opt->max_positions > ctx)
        return set_error(m->error, error(Code::out_of_range, "max_positions " + std::to_string(opt->max_positions) +
                                                                 " exceeds the context length " + std::to_string(ctx)));
      cap = opt->max_positions;
    }
    auto s = std::make_unique<dsv41_session>();
    s->model = m;
    s->max_positions = cap;
    *out = s.release();
    return DSV41_OK;
  });
}

void dsv41_session_free(dsv41_session* s) { delete s; }

void dsv41_session_reset(dsv41_session* s) {
  if (!s) return;
  s->gen.reset();
  s->seq.reset();
  s->held.clear();
}

const char* dsv41_session_last_error(const dsv41_session* s) { return s ? s->error.c_str() : "session is NULL"; }

int64_t dsv41_session_position(const dsv41_session* s) { return s && s->seq ? s->seq->pos() : 0; }

void dsv41_completion_free(dsv41_completion* c) {
  if (!c) return;
  std::free(c->text);
  std::free(c->message_json);
  std::free(c->tokens);
  *c = dsv41_completion{};
}

dsv41_status dsv41_session_chat(dsv41_session* s, const char* request_json, const dsv41_generate_options* opt,
                                dsv41_completion* out) {
  DSV41_SESSION_GUARD(s);
  if (!request_json) return set_error(s->error, error(Code::invalid_argument, "request_json is NULL"));
  return guarded(s->error, [&] { return run_blocking(s, nullptr, 0, request_json, opt, out); });
}

dsv41_status dsv41_session_complete(dsv41_session* s, const int32_t* prompt, size_t n_prompt,
                                    const dsv41_generate_options* opt, dsv41_completion* out) {
  DSV41_SESSION_GUARD(s);
  return guarded(s->error, [&] { return run_blocking(s, prompt, n_prompt, nullptr, opt, out); });
}

dsv41_status dsv41_session_complete_text(dsv41_session* s, const char* prompt, const dsv41_generate_options* opt,
                                         dsv41_completion* out) {
  DSV41_SESSION_GUARD(s);
  if (!prompt) return set_error(s->error, error(Code::invalid_argument, "prompt is NULL"));
  return guarded(s->error, [&] {
    const std::vector<int32_t> ids = backend_of(s).tokenizer().encode(prompt, true);
    return run_blocking(s, ids.data(), ids.size(), nullptr, opt, out);
  });
}

dsv41_status dsv41_session_begin(dsv41_session* s, const int32_t* prompt, size_t n_prompt, const char* request_json,
                                 const dsv41_generate_options* opt) {
  DSV41_SESSION_GUARD(s);
  return guarded(s->error, [&] { return begin_impl(s, prompt, n_prompt, request_json, opt); });
}

dsv41_status dsv41_session_poll(dsv41_session* s, int32_t max_new_tokens, int64_t max_microseconds,
                                int32_t* out_tokens, size_t capacity, dsv41_poll_result* out) {
  DSV41_SESSION_GUARD(s);
  return guarded(s->error, [&] { return poll_impl(s, max_new_tokens, max_microseconds, out_tokens, capacity, out); });
}

dsv41_status dsv41_session_take(dsv41_session* s, dsv41_completion* out) {
  DSV41_SESSION_GUARD(s);
  if (out) *out = dsv41_completion{};
  return guarded(s->error, [&] { return take_impl(s, out); });
}

}  // extern "C"

#if !DSV41_C_HAVE_CUDA
namespace dsv41::capi {
Result<std::unique_ptr<Backend>> load_cuda_backend(const LoadSpec&) {
  return error(Code::unsupported, "device \"cuda\": this dsv41 C library was built without CUDA");
}
}  // namespace dsv41::capi
#endif
