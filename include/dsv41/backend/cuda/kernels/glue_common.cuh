// Shared by the glue kernels (kernels/glue_*.cuh): launch sizes, the block-wide sum, small host inputs as kernel
// parameters. The glue kernels follow their cpu:: counterparts operation for operation: FP32 inside, the same
// BF16 rounding points, separate multiplies and adds where the CPU's order is short and fixed; long sums are
// reordered (SPEC §3 allows it). Launchers take the caller's stream, return Status, never synchronize.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::gpu {

namespace glue {

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n, int t = kThreads) { return unsigned((n + t - 1) / t); }

// Block-wide sum of one value per thread (blockDim.x a multiple of 32, ≤ 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < nw; ++w) s += red[w];
  return s;
}


// ---- small host inputs as kernel parameters (no host→device copy: no staging, no stream wait, capturable) ----
struct ParamBytes {
  static constexpr int kBytes = 3072;
  uint8_t b[kBytes];
  int n = 0;
};
template <int = 0>
__global__ void param_bytes_kernel(const ParamBytes v, uint8_t* __restrict__ dst) {
  for (int i = threadIdx.x; i < v.n; i += blockDim.x) dst[i] = v.b[i];
}

}  // namespace glue

}  // namespace dsv41::gpu
