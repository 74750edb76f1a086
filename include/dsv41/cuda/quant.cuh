// SPEC §3.2–3.3 activation quantizers on the GPU, bit-exact with num::fp8_quant_block32 and
// num::fp4_quant_block32 (same formulas from numeric/formats.hpp, evaluated on the device).
#pragma once
#include <dsv41/cuda/common.cuh>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

namespace detail {
// One thread per block of 32 values of a row.
__global__ void act_quant_fp8_kernel(const bf16_t* __restrict__ x, int64_t ldx, int rows, int K,
                                     uint8_t* __restrict__ codes, uint8_t* __restrict__ exps,
                                     bf16_t* __restrict__ xq) {
  const int nkb = K / 32;
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= int64_t(rows) * nkb) return;
  const int64_t r = b / nkb;
  const int kb = int(b % nkb);
  const bf16_t* src = x + r * ldx + kb * 32;
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = reinterpret_cast<const uint4*>(src)[i];
  const bf16_t* e = reinterpret_cast<const bf16_t*>(v);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(bf2f(e[i])));
  const float s = num::fp8_act_scale(amax);
  uint32_t q[8];
  uint32_t xo[16];
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const float c0 = fminf(fmaxf(__fdiv_rn(bf2f(e[i]), s), -448.f), 448.f);
    const float c1 = fminf(fmaxf(__fdiv_rn(bf2f(e[i + 1]), s), -448.f), 448.f);
    const uint32_t q0 = num::e4m3_from_f32(c0), q1 = num::e4m3_from_f32(c1);
    if ((i & 3) == 0) q[i / 4] = 0;
    q[i / 4] |= (q0 | (q1 << 8)) << (8 * (i & 3));
    xo[i / 2] = pack_bf16x2(num::e4m3_to_f32(uint8_t(q0)) * s, num::e4m3_to_f32(uint8_t(q1)) * s);
  }
  uint4* cd = reinterpret_cast<uint4*>(codes + r * K + kb * 32);
  cd[0] = make_uint4(q[0], q[1], q[2], q[3]);
  cd[1] = make_uint4(q[4], q[5], q[6], q[7]);
  exps[r * nkb + kb] = num::ue8m0_from_f32(s);
  if (xq) {
    uint4* o = reinterpret_cast<uint4*>(xq + r * K + kb * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) o[i] = make_uint4(xo[4 * i], xo[4 * i + 1], xo[4 * i + 2], xo[4 * i + 3]);
  }
}

// FP4 (E2M1) with a power-of-two scale per 32: packed nibbles (low nibble first) + UE8M0 exponents.
__global__ void quant_fp4_b32_kernel(const bf16_t* __restrict__ x, int64_t ldx, int rows, int K,
                                     uint8_t* __restrict__ packed, uint8_t* __restrict__ exps) {
  const int nkb = K / 32;
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= int64_t(rows) * nkb) return;
  const int64_t r = b / nkb;
  const int kb = int(b % nkb);
  const bf16_t* src = x + r * ldx + kb * 32;
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = reinterpret_cast<const uint4*>(src)[i];
  const bf16_t* e = reinterpret_cast<const bf16_t*>(v);
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(bf2f(e[i])));
  const float s = num::fp4_pow2_scale(amax);
  uint32_t p[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const uint32_t q = num::e2m1_from_f32(fminf(fmaxf(__fdiv_rn(bf2f(e[i]), s), -6.f), 6.f));
    p[i / 8] |= q << (4 * (i % 8));
  }
  *reinterpret_cast<uint4*>(packed + r * (K / 2) + kb * 16) = make_uint4(p[0], p[1], p[2], p[3]);
  exps[r * nkb + kb] = num::ue8m0_from_f32(s);
}
}  // namespace detail

// FP8 activation quant (§3.2) of x [rows, K] (row stride ldx): codes [rows, K], exps [rows, K/32], and
// optionally xq [rows, K] = q·s in BF16 (exact). K % 32 == 0; rows 16-byte aligned.
inline Status act_quant_fp8(const bf16_t* x, int64_t ldx, int rows, int K, uint8_t* codes, uint8_t* exps,
                            bf16_t* xq, cudaStream_t stream) {
  if (rows < 0 || K <= 0 || K % 32 || ldx % 8) return bad_arg("act_quant_fp8: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * (K / 32);
  detail::act_quant_fp8_kernel<<<unsigned(ceil_div64(n, 128)), 128, 0, stream>>>(x, ldx, rows, K, codes, exps, xq);
  return launch_status("act_quant_fp8");
}

// FP4 fake quant with power-of-two scales per 32 (§3.3; indexer queries): packed [rows, K/2], exps [rows, K/32].
inline Status quant_fp4_b32(const bf16_t* x, int64_t ldx, int rows, int K, uint8_t* packed, uint8_t* exps,
                            cudaStream_t stream) {
  if (rows < 0 || K <= 0 || K % 32 || ldx % 8) return bad_arg("quant_fp4_b32: bad shape");
  if (rows == 0) return Status::Ok();
  const int64_t n = int64_t(rows) * (K / 32);
  detail::quant_fp4_b32_kernel<<<unsigned(ceil_div64(n, 128)), 128, 0, stream>>>(x, ldx, rows, K, packed, exps);
  return launch_status("quant_fp4_b32");
}

}  // namespace dsv41::gpu
