// The GPU half of custom_config: the same TinyPy, now Model<TinyPy, Cuda> (a .cu unit, compiled by nvcc).
#include <cstdio>
#include <string>

#include <cuda_runtime.h>

#include <dsv41/model/cuda_model.hpp>

#include "answer.hpp"
#include "tiny_py.hpp"

int run_on_gpu(const std::string& dir, const std::string& prompt) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the error of a machine without a GPU
    std::printf("[gpu] skipped: no CUDA device\n");
    return 0;
  }
  auto model = dsv41::Model<TinyPy, dsv41::Cuda>::load(dir);  // work runs on the default stream
  if (!model.ok()) {
    std::fprintf(stderr, "load %s on the GPU: %s\n", dir.c_str(), model.status().to_string().c_str());
    return 1;
  }
  return answer(**model, dir, prompt, "gpu");
}
