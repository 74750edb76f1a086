// Uses the library's number formats inside a CUDA kernel (the same code the CPU reference runs).
#include <cstdio>

#include <cuda_runtime.h>

#include <dsv41/dsv41.hpp>  // the whole host API compiles in a .cu translation unit too
#include <dsv41/numeric/quant.hpp>

__global__ void quantize_rows(float* x, int n, int rows) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) dsv41::num::fp8_quant_block32(x + size_t(r) * n, n);
}

int main() {
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
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
