// `dsv41 golden --device cuda`: the golden check on the CUDA model (a .cu unit: no fmt here).
#include <cstdio>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/golden.hpp>

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

}  // namespace dsv41::cli
