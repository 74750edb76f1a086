// Loads a model directory and its tokenizer for the text commands (generate, chat, serve, perplexity), on
// the CPU or (built with CUDA) the GPU. The commands see a TextEngine: what they need of either backend.
#pragma once
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/runtime/text_engine.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/session/cache_dir.hpp>

#include "session_args.hpp"
#if __has_include(<xxhash.h>)
#define DSV41_CLI_SESSIONS 1
#include <dsv41/session/active_sessions.hpp>
#include <dsv41/session/disk_store.hpp>
#include <dsv41/session/model_identity.hpp>
#include <dsv41/session/session_cache.hpp>
#include <dsv41/session/window_pool.hpp>
#if defined(__CUDACC__)  // the CUDA unit (cmd_cuda.cu): device states' session blocks
#include <dsv41/backend/cuda/session_state.hpp>
#endif
#endif

namespace dsv41::cli {

struct LoadArgs {
  std::string model_dir, tokenizer, device = "cpu";
  bool progress = false;
};

class TextEngine {
 public:
  virtual ~TextEngine() = default;
  virtual const ModelShape& shape() const = 0;
  virtual const text::Tokenizer& tokenizer() const = 0;
  virtual const text::ChatTokens& chat_tokens() const = 0;
  virtual Result<text::PromptText> render(const nlohmann::ordered_json& request) const = 0;
  virtual Result<text::TextResult> complete(std::string_view prompt, const text::TextOptions& o) const = 0;
  virtual Result<text::TextResult> complete(const text::PromptText& prompt, const text::TextOptions& o) const = 0;
  // ids run as one fresh sequence; logits of every row ([rows, V]; with bounded replay only the last W rows).
  virtual Status score(std::span<const int32_t> ids, bool bounded_replay, std::vector<float>& logits) const = 0;
  // Prompts continue a finished request's live state when they extend it (the active tier, in memory), else resume
  // from a session store in cache_dir (global KV on disk, windows in a host pool); both are stored into.
  virtual Status enable_sessions(const std::string& model_dir, const std::string& cache_dir, int block) = 0;
  // A batching engine over the same model, tokenizer and session store (runtime/text_engine.hpp); this must outlive it.
  virtual Result<std::unique_ptr<text::TextEngineBase>> make_batch(const EngineOptions& o) const = 0;
};

// The engine over a model type M (Model<> in cmd_cpu.cpp; Model<Dynamic, Cuda> in cmd_cuda.cu).
template <class M>
class TextEngineOf : public TextEngine {
 public:
  explicit TextEngineOf(std::unique_ptr<M> m) : model_(std::move(m)) {}
  Status init(text::Tokenizer tok) {
    auto tm = text::TextModel<M>::make(*model_, std::move(tok));
    if (!tm.ok()) return tm.status();
    text_ = std::make_unique<text::TextModel<M>>(std::move(tm).value());
    return Status::Ok();
  }
  const ModelShape& shape() const override { return model_->shape(); }
  const text::Tokenizer& tokenizer() const override { return text_->tokenizer(); }
  const text::ChatTokens& chat_tokens() const override { return text_->chat_tokens(); }
  Result<text::PromptText> render(const nlohmann::ordered_json& r) const override { return text_->render(r); }
  Result<text::TextResult> complete(std::string_view p, const text::TextOptions& o) const override {
    return text_->complete(p, o);
  }
  Result<text::TextResult> complete(const text::PromptText& p, const text::TextOptions& o) const override {
    return text_->complete(p, o);
  }
  Result<std::unique_ptr<text::TextEngineBase>> make_batch(const EngineOptions& o) const override {
    auto b = text::TextEngine<M>::make(*text_, o);
    if (!b.ok()) return b.status();
    return Result<std::unique_ptr<text::TextEngineBase>>(std::move(b).value());
  }
  Status score(std::span<const int32_t> ids, bool bounded_replay, std::vector<float>& logits) const override {
    auto st = new_sequence_of(*model_, int64_t(ids.size()));
    if (!st.ok()) return st.status();
    ForwardResult r;
    if constexpr (requires { model_->forward(*st, ids, r, ForwardOptions{}); }) {
      ForwardOptions fo;
      fo.all_logits = true;
      fo.bounded_replay = bounded_replay;
      DSV41_TRY(model_->forward(*st, ids, r, fo));
    } else {
      if (bounded_replay) return error(Code::unsupported, "perplexity with bounded replay: CPU only");
      DSV41_TRY(model_->forward(*st, ids, r, /*all_logits=*/true));
    }
    logits = std::move(r.logits);
    return Status::Ok();
  }

  Status enable_sessions(const std::string& model_dir, const std::string& cache_dir, int block) override {
#if DSV41_CLI_SESSIONS
    {  // either backend: session::StateBlocks<M::State> (the GPU's: backend/cuda/session_state.hpp)
      auto id = session::model_identity(model_dir);
      if (!id.ok()) return id.status();
      auto disk = session::DiskStore::open(cache_dir);
      if (!disk.ok()) return disk.status();
      auto s = std::make_unique<Sessions>(*model_, *id, std::move(disk).value(), block);
      DSV41_TRY(s->cache.check());
      sessions_ = std::move(s);
      text::SessionHooks<typename M::State> h;
      h.ctx = sessions_.get();
      h.block = block;
      h.resume = [](void* c, typename M::State& st, std::span<const int32_t> ids) -> Result<int64_t> {
        auto* s = static_cast<Sessions*>(c);
        auto r = session::resume_or_take(s->active, &s->cache, st, ids);
        if (!r.ok()) return r.status();
        return r->cached_tokens;
      };
      h.finish = [](void* c, typename M::State&& st, std::span<const int32_t> tokens) {
        // A state the tier refuses (over its byte limit, damaged) is dropped: its blocks are in the lower tiers.
        (void)static_cast<Sessions*>(c)->active.put(std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(st));
      };
      h.boundary = [](void* c, const typename M::State& st, std::span<const int32_t> tokens) {
        return static_cast<Sessions*>(c)->cache.at_boundary(st, tokens);
      };
      text_->set_session(h);
      return Status::Ok();
    }
#else
    (void)model_dir, (void)cache_dir, (void)block;
    return error(Code::unsupported, "--cache-dir: built without xxhash.h (libxxhash-dev)");
#endif
  }

 protected:
  std::unique_ptr<M> model_;
  std::unique_ptr<text::TextModel<M>> text_;  // refers to *model_: destroyed first
#if DSV41_CLI_SESSIONS
  // The tiers and the cache over them (the cache refers to the tiers: members in this order). The active tier holds
  // the last 8 finished requests' states (host memory on the CPU, device memory on the GPU), within the window pool's
  // default budget (10% of physical memory), for 10 minutes.
  struct Sessions {
    Sessions(const M& m, session::ModelIdentity id, session::DiskStore d, int block)
        : disk(std::move(d)),
          cache(m, id, disk, pool, session::SessionOptions{block, 600, false}),
          active(session::ActiveOptions{session::default_window_pool_budget(), 8, 600, {}}) {}
    session::DiskStore disk;
    session::WindowPool pool;
    session::SessionCache<M, session::DiskStore, session::Connector> cache;
    session::ActiveSessions<typename M::State> active;
  };
  std::unique_ptr<Sessions> sessions_;
#endif
};

// Turns sessions on for e as s asks; returns the directory used, "" when off. An explicit --cache-dir that cannot
// be used is an error; the default directory that cannot be (no xxhash.h, no HOME, not creatable)
// leaves sessions off with a one-line note on stderr.
inline Result<std::string> start_sessions(TextEngine& e, const LoadArgs& a, const SessionArgs& s, const char* who) {
  if (s.no_cache) return Result<std::string>(std::string());
  if (!s.cache_dir.empty()) {
    DSV41_TRY(e.enable_sessions(a.model_dir, s.cache_dir, s.block));
    return Result<std::string>(s.cache_dir);
  }
  auto off = [who](const std::string& why) {
    std::fprintf(stderr, "%s: note: running without sessions (%s)\n", who, why.c_str());
    return Result<std::string>(std::string());
  };
#if !DSV41_CLI_SESSIONS
  return off("built without xxhash.h");
#else
  auto dir = session::default_cache_dir();
  if (!dir.ok()) return off(dir.status().message());
  if (Status st = e.enable_sessions(a.model_dir, *dir, s.block); !st.ok()) return off(st.to_string());
  return dir;
#endif
}

inline bool print_progress(void*, float f, const char* stage) {
  const int w = 30, n = int(f * w + 0.5f);
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%% %-12s", n, "##############################", w - n, "", int(f * 100), stage);
  if (f >= 1.f) std::fprintf(stderr, "\n");
  return true;
}

inline Result<text::Tokenizer> load_tokenizer(const LoadArgs& a) {
  const std::string tp = a.tokenizer.empty() ? a.model_dir + "/tokenizer.json" : a.tokenizer;
  if (!std::filesystem::exists(tp)) return error(Code::io_error, tp + ": no tokenizer (give --tokenizer)");
  return text::Tokenizer::from_json_file(tp);
}

#if DSV41_CLI_CUDA
Result<std::unique_ptr<TextEngine>> load_cuda_engine(const LoadArgs& a);  // cmd_cuda.cu
#endif

// The engine for a.device (cmd_cpu.cpp: TextEngineOf<Model<>> is instantiated there once, not in every command).
Result<std::unique_ptr<TextEngine>> load_text_model(const LoadArgs& a);

}  // namespace dsv41::cli
