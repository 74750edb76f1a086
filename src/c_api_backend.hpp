// Private to the C API (src/): what c_api.cpp needs of a loaded model, behind one interface for either backend,
// so that the device is chosen at run time. BackendOf<Model<>> is built in c_api.cpp, BackendOf<Model<Dynamic,
// Cuda>> in c_api_cuda.cu (nvcc).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/text_model.hpp>
#include <dsv41/text/tokenizer.hpp>

namespace dsv41::capi {

// One sequence of the model: chunked prefill and single-token decode, host logits.
class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual int64_t pos() const = 0;
  virtual int64_t capacity() const = 0;
  // last_logits: the last row, when given.
  virtual Status prefill(std::span<const int32_t> ids, std::vector<float>* last_logits) = 0;
  virtual Status decode(int32_t token, std::vector<float>& logits) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* device() const = 0;
  virtual const ModelShape& shape() const = 0;
  virtual const text::Tokenizer& tokenizer() const = 0;
  virtual const text::ChatTokens& chat_tokens() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual Result<text::PromptText> render(const nlohmann::ordered_json& request) const = 0;
  virtual Result<std::unique_ptr<Sequence>> new_sequence(int64_t capacity) const = 0;
};

template <class M>
class SequenceOf final : public Sequence {
 public:
  SequenceOf(const M& m, typename M::State st) : model_(&m), st_(std::move(st)) {}
  int64_t pos() const override { return st_.pos; }
  int64_t capacity() const override { return st_.max_positions; }
  Status prefill(std::span<const int32_t> ids, std::vector<float>* last_logits) override {
    return model_->prefill(st_, ids, last_logits);
  }
  Status decode(int32_t token, std::vector<float>& logits) override {
    typename M::DecodeItem item{&st_, token, &logits};
    return model_->decode(std::span<typename M::DecodeItem>(&item, 1));
  }

 private:
  const M* model_;
  typename M::State st_;
};

template <class M>
class BackendOf : public Backend {
 public:
  BackendOf(std::unique_ptr<M> m, const char* device) : model_(std::move(m)), device_(device) {}
  // After the model loaded: the tokenizer checked against it.
  Status init(text::Tokenizer tok) {
    auto tm = text::TextModel<M>::make(*model_, std::move(tok));
    if (!tm.ok()) return tm.status();
    text_ = std::make_unique<text::TextModel<M>>(std::move(tm).value());
    return Status::Ok();
  }
  const char* device() const override { return device_; }
  const ModelShape& shape() const override { return model_->shape(); }
  const text::Tokenizer& tokenizer() const override { return text_->tokenizer(); }
  const text::ChatTokens& chat_tokens() const override { return text_->chat_tokens(); }
  int32_t eos_id() const override { return text_->eos_id(); }
  Result<text::PromptText> render(const nlohmann::ordered_json& r) const override { return text_->render(r); }
  Result<std::unique_ptr<Sequence>> new_sequence(int64_t capacity) const override {
    auto st = new_sequence_of(*model_, capacity);
    if (!st.ok()) return st.status();
    std::unique_ptr<Sequence> s = std::make_unique<SequenceOf<M>>(*model_, std::move(st).value());
    return Result<std::unique_ptr<Sequence>>(std::move(s));
  }

 protected:
  std::unique_ptr<M> model_;
  std::unique_ptr<text::TextModel<M>> text_;  // refers to *model_: destroyed first
  const char* device_;
};

struct LoadSpec {
  std::string dir, tokenizer_path;
  LoadOptions load;
};

// The GPU's backend (c_api_cuda.cu); built without CUDA, Code::unsupported.
Result<std::unique_ptr<Backend>> load_cuda_backend(const LoadSpec& spec);

}  // namespace dsv41::capi
