// SPEC §3.1 RMSNorm on the GPU: y = bf16(w · (x · rsqrt(mean(x²) + eps))), FP32 inside, one rounding.
// Matches cpu::rmsnorm exactly for rows of at most 256 (the CPU's order), else up to the order of the sum of squares
// (see tests/gpu/check_norm_quant.cuh for the bound).
#pragma once
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/numeric/sum_order.hpp>

namespace dsv41::gpu {

namespace detail {

// 1 / sqrt(mean of squares + eps) of a row from each thread's partial sum of squares (the block's threads).
__device__ __forceinline__ float inv_rms(float ss, int n, float eps) {
  __shared__ float red[32];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
    s = warp_sum(s);
    if (threadIdx.x == 0) red[0] = s;
  }
  __syncthreads();
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(red[0], float(n)), eps)));
}

template <int MAXV>  // 8-element vectors per thread
__global__ void __launch_bounds__(256) rmsnorm_kernel(const bf16_t* __restrict__ x, int64_t ldx,
                                                      const float* __restrict__ w, int n, float eps,
                                                      bf16_t* __restrict__ y, int64_t ldy) {
  const bf16_t* xr = x + int64_t(blockIdx.x) * ldx;
  bf16_t* yr = y + int64_t(blockIdx.x) * ldy;
  uint4 v[MAXV];
  float ss = 0.f;
#pragma unroll
  for (int c = 0; c < MAXV; ++c) {
    const int i = (threadIdx.x + c * blockDim.x) * 8;
    if (i < n) {
      v[c] = *reinterpret_cast<const uint4*>(xr + i);
      const bf16_t* e = reinterpret_cast<const bf16_t*>(&v[c]);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float f = bf2f(e[k]);
        ss = fmaf(f, f, ss);
      }
    }
  }
  const float rs = inv_rms(ss, n, eps);
#pragma unroll
  for (int c = 0; c < MAXV; ++c) {
    const int i = (threadIdx.x + c * blockDim.x) * 8;
    if (i < n) {
      const bf16_t* e = reinterpret_cast<const bf16_t*>(&v[c]);
      const float4 w0 = *reinterpret_cast<const float4*>(w + i), w1 = *reinterpret_cast<const float4*>(w + i + 4);
      const float ww[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      uint4 o;
      uint32_t* op = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        op[k] = pack_bf16x2(__fmul_rn(ww[2 * k], __fmul_rn(bf2f(e[2 * k]), rs)),
                            __fmul_rn(ww[2 * k + 1], __fmul_rn(bf2f(e[2 * k + 1]), rs)));
      *reinterpret_cast<uint4*>(yr + i) = o;
    }
  }
}
// Any n, any row strides: the row is read twice (sum of squares, then the scaled output), 256 threads.
template <int = 0>
__global__ void __launch_bounds__(256) rmsnorm_any_kernel(const bf16_t* __restrict__ x, int64_t ldx,
                                                          const float* __restrict__ w, int n, float eps,
                                                          bf16_t* __restrict__ y, int64_t ldy) {
  const bf16_t* xr = x + int64_t(blockIdx.x) * ldx;
  bf16_t* yr = y + int64_t(blockIdx.x) * ldy;
  float ss = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float f = bf2f(xr[i]);
    ss = fmaf(f, f, ss);
  }
  const float rs = inv_rms(ss, n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __float2bfloat16_rn(__fmul_rn(w[i], __fmul_rn(bf2f(xr[i]), rs)));
}
// Rows of at most kSmallRow: latency-bound anyway, so one thread sums the squares in the CPU's order
// (cpu::sum_squares, torch's cascade) and tiny models' norms round exactly as the reference's.
inline constexpr int kSmallRow = 256;
template <int = 0>
__global__ void __launch_bounds__(256) rmsnorm_small_kernel(const bf16_t* __restrict__ x, int64_t ldx,
                                                            const float* __restrict__ w, int n, float eps,
                                                            bf16_t* __restrict__ y, int64_t ldy) {
  const bf16_t* xr = x + int64_t(blockIdx.x) * ldx;
  bf16_t* yr = y + int64_t(blockIdx.x) * ldy;
  __shared__ float rs_s;
  if (threadIdx.x == 0) {
    const float ss = num::cascade_sum_squares(n, [&](int i) { return bf2f(xr[i]); });
    rs_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(n)), eps)));
  }
  __syncthreads();
  const float rs = rs_s;
  for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __float2bfloat16_rn(__fmul_rn(w[i], __fmul_rn(bf2f(xr[i]), rs)));
}
}  // namespace detail

// rows × n. The vectorized kernel when n % 8 == 0, n ≤ 8192 and rows are 16-byte aligned (ldx, ldy multiples
// of 8; w 16-byte aligned); the row-loop kernel for every other n.
inline Status rmsnorm(const bf16_t* x, int64_t ldx, const float* w, int rows, int n, float eps, bf16_t* y,
                      int64_t ldy, cudaStream_t stream) {
  if (rows < 0 || n <= 0 || ldx < n || ldy < n) return bad_arg("rmsnorm: bad shape");
  if (rows == 0) return Status::Ok();
  const bool aligned = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
  if (n <= detail::kSmallRow) {
    detail::rmsnorm_small_kernel<<<rows, 128, 0, stream>>>(x, ldx, w, n, eps, y, ldy);
  } else if (n % 8 == 0 && n <= 8192 && ldx % 8 == 0 && ldy % 8 == 0 && aligned) {
    const int threads = n >= 2048 ? 256 : ((n / 8 + 31) / 32) * 32;
    detail::rmsnorm_kernel<4><<<rows, threads, 0, stream>>>(x, ldx, w, n, eps, y, ldy);
  } else {
    detail::rmsnorm_any_kernel<<<rows, 256, 0, stream>>>(x, ldx, w, n, eps, y, ldy);
  }
  return launch_status("rmsnorm");
}

}  // namespace dsv41::gpu
