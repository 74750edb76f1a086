// SPEC §3.2–3.3 activation quantizers on the GPU, bit-exact with num::fp8_quant_block32 and
// num::fp4_quant_block32 (same formulas from numeric/formats.hpp, evaluated on the device).
#pragma once
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

namespace detail {
// One thread per 8 values (16-byte loads, coalesced); the 4 threads of a 32-value block share its amax
// through shuffles. rows·K/8 is a multiple of 4, so every 4-lane group is entirely in range or out.
template <int = 0>
__global__ void act_quant_fp8_kernel(const bf16_t* __restrict__ x, int64_t ldx, int rows, int K,
                                     uint8_t* __restrict__ codes, uint8_t* __restrict__ exps,
                                     bf16_t* __restrict__ xq) {
  const int nv = K / 8;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool ok = id < int64_t(rows) * nv;
  const int64_t r = ok ? id / nv : 0;
  const int v = ok ? int(id % nv) : 0;
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (ok) raw = *reinterpret_cast<const uint4*>(x + r * ldx + v * 8);
  const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(bf2f(e[i])));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  if (!ok) return;
  const float s = num::fp8_act_scale(amax);
  uint32_t q[2] = {0, 0}, xo[4];
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const float c0 = fminf(fmaxf(__fdiv_rn(bf2f(e[i]), s), -448.f), 448.f);
    const float c1 = fminf(fmaxf(__fdiv_rn(bf2f(e[i + 1]), s), -448.f), 448.f);
    const uint32_t q0 = num::e4m3_from_f32(c0), q1 = num::e4m3_from_f32(c1);
    q[i / 4] |= (q0 | (q1 << 8)) << (8 * (i & 3));
    xo[i / 2] = pack_bf16x2(num::e4m3_to_f32(uint8_t(q0)) * s, num::e4m3_to_f32(uint8_t(q1)) * s);
  }
  *reinterpret_cast<uint2*>(codes + r * K + v * 8) = make_uint2(q[0], q[1]);
  if ((v & 3) == 0) exps[r * (K / 32) + v / 4] = num::ue8m0_from_f32(s);
  if (xq) *reinterpret_cast<uint4*>(xq + r * K + v * 8) = make_uint4(xo[0], xo[1], xo[2], xo[3]);
}

// FP4 (E2M1) with a power-of-two scale per 32: packed nibbles (low nibble first) + UE8M0 exponents.
template <int = 0>
__global__ void quant_fp4_b32_kernel(const bf16_t* __restrict__ x, int64_t ldx, int rows, int K,
                                     uint8_t* __restrict__ packed, uint8_t* __restrict__ exps) {
  const int nv = K / 8;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool ok = id < int64_t(rows) * nv;
  const int64_t r = ok ? id / nv : 0;
  const int v = ok ? int(id % nv) : 0;
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (ok) raw = *reinterpret_cast<const uint4*>(x + r * ldx + v * 8);
  const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(bf2f(e[i])));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  if (!ok) return;
  const float s = num::fp4_pow2_scale(amax);
  uint32_t pk = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    pk |= uint32_t(num::e2m1_from_f32(fminf(fmaxf(__fdiv_rn(bf2f(e[i]), s), -6.f), 6.f))) << (4 * i);
  *reinterpret_cast<uint32_t*>(packed + r * (K / 2) + v * 4) = pk;
  if ((v & 3) == 0) exps[r * (K / 32) + v / 4] = num::ue8m0_from_f32(s);
}
}  // namespace detail

// FP8 activation quant (§3.2) of x [rows, K] (row stride ldx): codes [rows, K], exps [rows, K/32], and
// optionally xq [rows, K] = q·s in BF16 (exact). K % 32 == 0; rows 16-byte aligned.
inline Status act_quant_fp8(const bf16_t* x, int64_t ldx, int rows, int K, uint8_t* codes, uint8_t* exps,
                            bf16_t* xq, cudaStream_t stream) {
  if (rows < 0 || K <= 0 || K % 32 || ldx % 8) return bad_arg("act_quant_fp8: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * (K / 8);
  detail::act_quant_fp8_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(x, ldx, rows, K, codes, exps, xq);
  return launch_status("act_quant_fp8");
}

// FP4 fake quant with power-of-two scales per 32 (§3.3; indexer queries): packed [rows, K/2], exps [rows, K/32].
inline Status quant_fp4_b32(const bf16_t* x, int64_t ldx, int rows, int K, uint8_t* packed, uint8_t* exps,
                            cudaStream_t stream) {
  if (rows < 0 || K <= 0 || K % 32 || ldx % 8) return bad_arg("quant_fp4_b32: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * (K / 8);
  detail::quant_fp4_b32_kernel<<<unsigned(ceil_div64(n, 256)), 256, 0, stream>>>(x, ldx, rows, K, packed, exps);
  return launch_status("quant_fp4_b32");
}

}  // namespace dsv41::gpu
