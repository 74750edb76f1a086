// `--device cuda` for the CLI: the golden check on the CUDA model, and the engine over Model<Dynamic, Cuda> on a
// stream of its own for the text commands (generate, chat, serve, perplexity). One .cu unit, so that the CUDA
// model's kernels are compiled once (fmt stays in host-only code).
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/golden.hpp>

#include "text_loader.hpp"

namespace dsv41::cli {


int golden_on_cuda(const std::string& dir, const std::string& golden_path, const std::string& dump) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "error: no CUDA device\n");
    return 1;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "error: cannot create a CUDA stream\n");
    return 1;
  }
  int rc = 1;
  {
    auto cm = CudaModel<>::load(dir, stream);
    if (!cm.ok()) {
      std::fprintf(stderr, "error: %s\n", cm.status().to_string().c_str());
    } else {
      const auto& gpu_model = **cm;
      std::vector<st::TensorToWrite> tensors;
      auto rep = golden::run(gpu_model, golden_path, dump.empty() ? nullptr : &tensors);
      if (!rep.ok()) {
        std::fprintf(stderr, "error: %s\n", rep.status().to_string().c_str());
      } else {
        std::printf("device: cuda\n%s", rep->summary().c_str());
        rc = rep->pass ? 0 : 1;
        if (!dump.empty()) {
          const Status ws = st::write(dump, tensors);
          if (ws.ok()) std::printf("wrote %zu tensors to %s\n", tensors.size(), dump.c_str());
          else { std::fprintf(stderr, "error: %s\n", ws.to_string().c_str()); rc = 1; }
        }
      }
    }
  }
  cudaStreamDestroy(stream);
  return rc;
}

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
