// `--device cuda` for the text commands (generate, chat, serve, perplexity): the engine over
// Model<Dynamic, Cuda> on a stream of its own (a .cu unit: fmt stays in host-only code).
#include <cuda_runtime.h>

#include <dsv41/model/cuda_model.hpp>

#include "text_loader.hpp"

namespace dsv41::cli {
namespace {

using GpuModel = Model<configs::Dynamic, Cuda>;

class CudaEngine final : public TextEngineOf<GpuModel> {
 public:
  CudaEngine(std::unique_ptr<GpuModel> m, cudaStream_t s) : TextEngineOf<GpuModel>(std::move(m)), stream_(s) {}
  ~CudaEngine() override {
    text_.reset();
    model_.reset();
    cudaStreamDestroy(stream_);
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<TextEngine>> load_cuda_engine(const LoadArgs& a) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return error(Code::unsupported, "--device cuda: no CUDA device");
  }
  cudaStream_t s = nullptr;
  DSV41_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  LoadOptions lo;
  if (a.progress) lo.progress = print_progress;
  auto m = GpuModel::load(a.model_dir, s, lo);
  auto tok = m.ok() ? load_tokenizer(a) : Result<text::Tokenizer>(m.status());
  if (!m.ok() || !tok.ok()) {
    const Status e = m.ok() ? tok.status() : m.status();
    if (m.ok()) (*m).reset();
    cudaStreamDestroy(s);
    return e;
  }
  auto e = std::make_unique<CudaEngine>(std::move(m).value(), s);
  DSV41_TRY(e->init(std::move(tok).value()));
  return Result<std::unique_ptr<TextEngine>>(std::move(e));
}

}  // namespace dsv41::cli
