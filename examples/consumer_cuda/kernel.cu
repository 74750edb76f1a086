// Uses the installed package from a .cu file: the library's number formats inside a CUDA kernel (the same
// code the CPU reference runs), and Model<Config, Cuda> on a model directory given as the argument.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include <dsv41/dsv41.hpp>  // the whole host API compiles in a .cu translation unit too
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/numeric/quant.hpp>

__global__ void quantize_rows(float* x, int n, int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) dsv41::num::fp8_quant_block32(x + size_t(r) * n, n);
}

// Two sequences prefilled, then one batched decode step on the GPU.
static int run_model(const char* dir) {
  using GpuModel = dsv41::Model<dsv41::configs::Dynamic, dsv41::Cuda>;
  auto m = GpuModel::load(dir);
  if (!m.ok()) {
    std::printf("load: %s\n", m.status().to_string().c_str());
    return 1;
  }
  auto a = (*m)->new_sequence(64), b = (*m)->new_sequence(64);
  if (!a.ok() || !b.ok()) return 1;
  const std::vector<int32_t> pa{5, 6, 7, 8}, pb{9, 10};
  if (!(*m)->prefill(*a, pa).ok() || !(*m)->prefill(*b, pb).ok()) return 1;
  std::vector<float> la, lb;
  GpuModel::DecodeItem items[] = {{&*a, 11, &la}, {&*b, 12, &lb}};
  const dsv41::Status s = (*m)->decode(items);
  std::printf("batched decode: %s, positions %lld and %lld, %zu logits each\n", s.ok() ? "ok" : s.to_string().c_str(),
              (long long)a->pos, (long long)b->pos, la.size());
  return s.ok() ? 0 : 1;
}

int main(int argc, char** argv) {
  static_assert(dsv41::configs::global_kv_bytes_per_token<dsv41::configs::V41Flash>() == 890.0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: built, not run\n");
    return 0;
  }
  const int n = 64, rows = 4;
  float host[n * rows];
  for (int i = 0; i < n * rows; ++i) host[i] = 0.01f * float(i % 97) - 0.3f;
  float* dev = nullptr;
  if (cudaMalloc(&dev, sizeof host) != cudaSuccess) return 1;
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  quantize_rows<<<1, rows>>>(dev, n, rows);
  cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  std::printf("quantized: %g %g\n", host[0], host[1]);
  if (cudaGetLastError() != cudaSuccess) return 1;
  return argc > 1 ? run_model(argv[1]) : 0;
}
