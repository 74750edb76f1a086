// SPEC §3.5 RoPE on the GPU, bit-exact with RopeTable::apply: angle p·f_i in FP32, cos/sin in double
// then rounded to FP32, rotation with separate FP32 multiplies and adds (no FMA contraction), BF16 out.
#pragma once
#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

namespace detail {
template <int = 0>
__global__ void rope_kernel(bf16_t* __restrict__ x, int rows, int heads, int dh, int rd,
                            const float* __restrict__ freqs, int64_t p0, const int64_t* __restrict__ pos, bool inverse) {
  const int pairs = rd / 2;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= int64_t(rows) * heads * pairs) return;
  const int i = int(id % pairs);
  const int64_t rh = id / pairs;  // row * heads + head
  const int64_t row = rh / heads;
  const float ang = __fmul_rn(float(pos ? pos[row] : p0 + row), freqs[i]);
  const float c = float(cos(double(ang))), s0 = float(sin(double(ang)));
  const float s = inverse ? -s0 : s0;
  bf16_t* t = x + rh * dh + (dh - rd) + 2 * i;
  const float a = bf2f(t[0]), b = bf2f(t[1]);
  t[0] = __float2bfloat16_rn(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
  t[1] = __float2bfloat16_rn(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
}
}  // namespace detail

// Rotates the trailing rd channels of each head vector of x [rows, heads, dh] in place; row r is at
// position p0 + r. freqs: [rd/2] (RopeTable::freqs).
inline Status rope(bf16_t* x, int rows, int heads, int dh, int rd, const float* freqs, int64_t p0, bool inverse,
                   cudaStream_t stream) {
  if (rows < 0 || heads <= 0 || rd <= 0 || rd % 2 || rd > dh) return bad_arg("rope: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * heads * (rd / 2);
  detail::rope_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(x, rows, heads, dh, rd, freqs, p0, nullptr,
                                                                          inverse);
  return launch_status("rope");
}

// The same with row r at position pos[r] (device array): rows of several sequences in one launch.
inline Status rope_at(bf16_t* x, int rows, int heads, int dh, int rd, const float* freqs, const int64_t* pos,
                      bool inverse, cudaStream_t stream) {
  if (rows < 0 || heads <= 0 || rd <= 0 || rd % 2 || rd > dh || (rows > 0 && !pos)) return bad_arg("rope_at: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * heads * (rd / 2);
  detail::rope_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(x, rows, heads, dh, rd, freqs, 0, pos, inverse);
  return launch_status("rope");
}

}  // namespace dsv41::gpu
