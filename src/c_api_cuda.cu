// The C API's GPU backend: Model<Dynamic, Cuda> on a stream of its own (nvcc unit; see c_api.cpp).
#include <cuda_runtime.h>

#include <dsv41/model/cuda_model.hpp>

#include "c_api_backend.hpp"

namespace dsv41::capi {
namespace {

using GpuModel = Model<configs::Dynamic, Cuda>;

class CudaBackend final : public BackendOf<GpuModel> {
 public:
  CudaBackend(std::unique_ptr<GpuModel> m, cudaStream_t s) : BackendOf<GpuModel>(std::move(m), "cuda"), stream_(s) {}
  ~CudaBackend() override {
    text_.reset();
    model_.reset();
    cudaStreamDestroy(stream_);
  }

 private:
  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<Backend>> load_cuda_backend(const LoadSpec& spec) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return error(Code::unsupported, "device \"cuda\": no CUDA device");
  }
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess)
    return error(Code::internal, std::string("cudaStreamCreate: ") + cudaGetErrorString(e));
  auto m = GpuModel::load(spec.dir, s, spec.load);
  auto tok = m.ok() ? text::Tokenizer::from_json_file(spec.tokenizer_path) : Result<text::Tokenizer>(m.status());
  if (!m.ok() || !tok.ok()) {
    const Status e = m.ok() ? tok.status() : m.status();
    if (m.ok()) (*m).reset();
    cudaStreamDestroy(s);
    return e;
  }
  auto b = std::make_unique<CudaBackend>(std::move(m).value(), s);
  DSV41_TRY(b->init(std::move(tok).value()));
  std::unique_ptr<Backend> out = std::move(b);
  return Result<std::unique_ptr<Backend>>(std::move(out));
}

}  // namespace dsv41::capi
