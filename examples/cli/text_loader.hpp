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
#include <dsv41/runtime/text_model.hpp>

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
  virtual Result<std::string> render(const nlohmann::ordered_json& request) const = 0;
  virtual Result<text::TextResult> complete(std::string_view prompt, const text::TextOptions& o) const = 0;
  // ids run as one fresh sequence; logits of every row ([rows, V]; with bounded replay only the last W rows).
  virtual Status score(std::span<const int32_t> ids, bool bounded_replay, std::vector<float>& logits) const = 0;
};

// The engine over a model type M (Model<> here; Model<Dynamic, Cuda> in text_cuda.cu).
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
  Result<std::string> render(const nlohmann::ordered_json& r) const override { return text_->render(r); }
  Result<text::TextResult> complete(std::string_view p, const text::TextOptions& o) const override {
    return text_->complete(p, o);
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

 protected:
  std::unique_ptr<M> model_;
  std::unique_ptr<text::TextModel<M>> text_;  // refers to *model_: destroyed first
};

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
Result<std::unique_ptr<TextEngine>> load_cuda_engine(const LoadArgs& a);  // text_cuda.cu
#endif

inline Result<std::unique_ptr<TextEngine>> load_text_model(const LoadArgs& a) {
  if (a.device == "cuda") {
#if DSV41_CLI_CUDA
    return load_cuda_engine(a);
#else
    return error(Code::unsupported, "this dsv41 was built without CUDA");
#endif
  }
  LoadOptions lo;
  if (a.progress) lo.progress = print_progress;
  auto m = Model<>::load(a.model_dir, lo);
  if (!m.ok()) return m.status();
  auto tok = load_tokenizer(a);
  if (!tok.ok()) return tok.status();
  auto e = std::make_unique<TextEngineOf<Model<>>>(std::move(m).value());
  DSV41_TRY(e->init(std::move(tok).value()));
  return Result<std::unique_ptr<TextEngine>>(std::move(e));
}

}  // namespace dsv41::cli
