// Glue kernels of the DSpark drafter on the GPU (SPEC §4.9): the Markov bias, argmax, the confidence head.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include <dsv41/backend/cuda/kernels/glue_common.cuh>

namespace dsv41::gpu {

namespace glue {

// ---- DSpark Markov head ----

// logits_i[v] += Σ_r membed[ids[i], r] · mhead[v, r]
template <int = 0>
__global__ void markov_add_kernel(const bf16_t* __restrict__ membed, const bf16_t* __restrict__ mhead,
                                  const int32_t* __restrict__ ids, int i, int V, int R, float* __restrict__ logits) {
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= V) return;
  const bf16_t* e = membed + int64_t(ids[i]) * R;
  const bf16_t* hr = mhead + int64_t(v) * R;
  float acc = 0.f;
  for (int r = 0; r < R; ++r) acc = fmaf(bf2f(e[r]), bf2f(hr[r]), acc);
  logits[v] = __fadd_rn(logits[v], acc);
}

// ids[i + 1] = first index of the largest logit (std::max_element). One CTA of 1024 threads.
template <int = 0>
__global__ void __launch_bounds__(1024) argmax_kernel(const float* __restrict__ logits, int V, int32_t* __restrict__ out) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  float best = -INFINITY;
  int idx = 0x7fffffff;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float x = logits[v];
    if (x > best || idx == 0x7fffffff) { best = x; idx = v; }  // strictly larger: the first of equals stays
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) { best = ob; idx = oi; }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
  __syncthreads();
  if (threadIdx.x == 0) {
    float b = bv[0];
    int i = bi[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (bv[w] > b || (bv[w] == b && bi[w] < i)) { b = bv[w]; i = bi[w]; }
    *out = i;
  }
}

// conf[i] = [xb_i ; membed[ids[i]]] · proj (FP32). One CTA per block row.
template <int = 0>
__global__ void confidence_kernel(const bf16_t* __restrict__ xb, const bf16_t* __restrict__ membed,
                                  const int32_t* __restrict__ ids, const bf16_t* __restrict__ proj, int d, int R,
                                  float* __restrict__ conf) {
  __shared__ float red[32];
  const int i = blockIdx.x;
  const bf16_t* e = membed + int64_t(ids[i]) * R;
  float acc = 0.f;
  for (int c = threadIdx.x; c < d + R; c += blockDim.x) {
    const float xv = c < d ? bf2f(xb[int64_t(i) * d + c]) : bf2f(e[c - d]);
    acc = fmaf(xv, bf2f(proj[c]), acc);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) conf[i] = acc;
}

}  // namespace glue

}  // namespace dsv41::gpu
