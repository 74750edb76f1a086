// Bit-exact number formats (SPEC §2–3): bf16, FP8 E4M3 (OCP "fn"), UE8M0 scales, FP4 E2M1, and the
// activation-scale helpers of SPEC §3.2–3.3. Pure bit manipulation, usable on host and device.
// Checked against ml_dtypes by tests/unit/test_formats.cpp (tables: tools/gen_format_tables.py).
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

#include <dsv41/core/host_device.hpp>
#include <dsv41/core/unsanitized.hpp>

namespace dsv41::num {

namespace detail {

#if defined(DSV41_UNSANITIZED_HOT_LOOPS) && !defined(__CUDACC__)  // the builtin: std::bit_cast is not inlined there
DSV41_UNSANITIZED constexpr uint32_t f32_bits(float x) { return __builtin_bit_cast(uint32_t, x); }
DSV41_UNSANITIZED constexpr float f32_from_bits(uint32_t b) { return __builtin_bit_cast(float, b); }
#else
DSV41_HD constexpr uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
DSV41_HD constexpr float f32_from_bits(uint32_t b) { return std::bit_cast<float>(b); }
#endif

// m / 2^s rounded to nearest, ties to even.
DSV41_HD constexpr uint32_t rne_shift(uint32_t m, int s) {
  if (s <= 0) return m;
  if (s >= 32) return 0;  // m < 2^24 here, so the quotient is below one half
  const uint32_t q = m >> s;
  const uint32_t rem = m & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  return (rem > half || (rem == half && (q & 1u))) ? q + 1u : q;
}

// Magnitude code (exponent << mbits | mantissa) of a finite |x| given as float bits, for a small
// format with `mbits` mantissa bits and exponent bias `bias`; round to nearest even, no saturation.
DSV41_HD constexpr uint32_t small_float_code(uint32_t abs_bits, int mbits, int bias) {
  const uint32_t e = abs_bits >> 23;
  if (e >= uint32_t(128 - bias)) {  // normal in the target: rebias, round the mantissa
    return rne_shift(abs_bits - (uint32_t(127 - bias) << 23), 23 - mbits);
  }
  // Subnormal in the target: count quanta of 2^(1 - bias - mbits).
  const uint32_t m = e ? ((abs_bits & 0x7FFFFFu) | 0x800000u) : abs_bits;
  const int exp2 = e ? int(e) - 150 : -149;  // |x| = m * 2^exp2
  return rne_shift(m, (1 - bias - mbits) - exp2);
}

}  // namespace detail

// ---- bf16 ----
// Round to nearest even. NaN -> quiet NaN 0x7FC0 with the input's sign (as ml_dtypes does).
DSV41_HD constexpr uint16_t bf16_bits(float x) {
  const uint32_t b = detail::f32_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t(((b >> 16) & 0x8000u) | 0x7FC0u);
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
DSV41_HD DSV41_UNSANITIZED constexpr float bf16_to_f32(uint16_t h) { return detail::f32_from_bits(uint32_t(h) << 16); }
DSV41_HD constexpr float round_bf16(float x) { return bf16_to_f32(bf16_bits(x)); }

// ---- FP8 E4M3 (OCP float8_e4m3fn): bias 7, max 448, S.1111.111 is NaN, no infinity ----
// Round to nearest even; finite overflow and ±inf saturate to ±448 (as CUDA's satfinite casts);
// NaN -> 0x7F with the input's sign (0x7F or 0xFF).
DSV41_HD constexpr uint8_t e4m3_from_f32(float x) {
  const uint32_t b = detail::f32_bits(x);
  const uint8_t sign = uint8_t((b >> 24) & 0x80u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint8_t(sign | 0x7Fu);
  if (a >= 0x43E00000u) return uint8_t(sign | 0x7Eu);  // |x| >= 448
  return uint8_t(sign | detail::small_float_code(a, 3, 7));
}
// Exact for all 256 codes; 0x7F/0xFF decode to a quiet NaN of that sign.
DSV41_HD DSV41_UNSANITIZED constexpr float e4m3_to_f32(uint8_t c) {
  const uint32_t sign = uint32_t(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  if (e == 15 && m == 7) return detail::f32_from_bits(sign | 0x7FC00000u);
  if (e == 0) return detail::f32_from_bits(sign | detail::f32_bits(float(m) * 0.001953125f));  // m * 2^-9
  return detail::f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}
DSV41_HD constexpr float round_e4m3(float x) { return e4m3_to_f32(e4m3_from_f32(x)); }

// ---- UE8M0 (float8_e8m0fnu): value 2^(e-127), 0xFF is NaN, no zero, no sign ----
// Exact; code 0 is 2^-127, an FP32 subnormal.
DSV41_HD DSV41_UNSANITIZED constexpr float ue8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return detail::f32_from_bits(0x7FC00000u);
  if (e == 0) return detail::f32_from_bits(0x00400000u);
  return detail::f32_from_bits(uint32_t(e) << 23);
}
// ml_dtypes' float8_e8m0fnu cast (this rule matches ml_dtypes 0.6.0 on all 2^32 FP32 inputs):
// - NaN, ±inf, zero and every negative input (-0 included) -> 0xFF (NaN);
// - a normal x = 1.f · 2^E rounds in the linear domain with ties up: 2^(E+1) when f >= 0.5, else
//   2^E (so 1.5 -> 2, 3 -> 4, 1.4999 -> 1); a result above 2^127 -> 0xFF;
// - an FP32 subnormal x -> 0x01 (2^-126) when x > 2^-127, else 0x00 (2^-127).
// For a power of two 2^k with -127 <= k <= 127 this is exactly k + 127.
DSV41_HD constexpr uint8_t ue8m0_from_f32(float x) {
  const uint32_t b = detail::f32_bits(x);
  if (b == 0 || b >= 0x7F800000u) return 0xFF;  // +0, ±inf, NaN, any sign bit set
  const uint32_t e = b >> 23, f = b & 0x7FFFFFu;
  if (e == 0) return f > 0x400000u ? 1 : 0;
  const uint32_t r = e + (f >= 0x400000u ? 1u : 0u);
  return r > 0xFEu ? uint8_t(0xFF) : uint8_t(r);
}

// ---- FP4 E2M1: bit 3 sign, bits 0-2 index {0, 0.5, 1, 1.5, 2, 3, 4, 6} ----
// Round to nearest, ties to the even code (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4,
// 5->4); |x| >= 6 and ±inf saturate to ±6 (as ml_dtypes). NaN -> zero with the input's sign
// (0x0 or 0x8), as the torch CPU port of the reference kernels does; ml_dtypes flips the sign.
DSV41_HD constexpr uint8_t e2m1_from_f32(float x) {
  const uint32_t b = detail::f32_bits(x);
  const uint8_t sign = uint8_t((b >> 28) & 0x8u);
  const uint32_t a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign;
  if (a >= 0x40C00000u) return uint8_t(sign | 0x7u);  // |x| >= 6
  return uint8_t(sign | detail::small_float_code(a, 1, 1));
}
DSV41_HD DSV41_UNSANITIZED constexpr float e2m1_to_f32(uint8_t nibble) {
  const uint32_t sign = uint32_t(nibble & 0x8u) << 28;
  const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  const uint32_t mag = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3F000000u : 0u);  // 2^(e-1)·1.m, or m/2
  return detail::f32_from_bits(sign | mag);
}
DSV41_HD constexpr float round_e2m1(float x) { return e2m1_to_f32(e2m1_from_f32(x)); }

// Packed FP4 (SPEC §2): byte b holds element 2b in the low nibble, 2b+1 in the high nibble.
DSV41_HD constexpr uint8_t pack_e2m1(uint8_t lo, uint8_t hi) { return uint8_t((lo & 0xFu) | ((hi & 0xFu) << 4)); }
DSV41_HD constexpr uint8_t e2m1_lo(uint8_t byte) { return uint8_t(byte & 0xFu); }
DSV41_HD constexpr uint8_t e2m1_hi(uint8_t byte) { return uint8_t(byte >> 4); }
// Element i of a packed row.
DSV41_HD constexpr float e2m1_at(const uint8_t* packed, int64_t i) {
  const uint8_t byte = packed[i >> 1];
  return e2m1_to_f32((i & 1) ? e2m1_hi(byte) : e2m1_lo(byte));
}
// Decodes n elements (n/2 bytes, rounded up) of a packed row into out[0..n).
DSV41_HD constexpr void unpack_e2m1_row(const uint8_t* packed, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = e2m1_at(packed, i);
}
// Same, times one scale per `block` consecutive elements: out[i] = e2m1[i] * scales[i / block].
DSV41_HD constexpr void unpack_e2m1_row_scaled(const uint8_t* packed, int64_t n, const float* scales, int block,
                                               float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = e2m1_at(packed, i) * scales[i / block];
}

// ---- quantization scales (SPEC §3.2, §3.3) ----
// 2^ceil(log2(x)) taken on FP32 bits: exponent + 1 when the mantissa is non-zero (the reference's
// fast_round_scale). Used on positive normal x; +inf stays +inf.
DSV41_HD constexpr float pow2_ceil_bits(float x) {
  const uint32_t b = detail::f32_bits(x);
  const uint32_t e = ((b >> 23) & 0xFFu) + ((b & 0x7FFFFFu) ? 1u : 0u);
  return detail::f32_from_bits(e << 23);
}

// FP8 activation scale (§3.2): 2^ceil(log2(max(amax, 1e-4) * fp32(1/448))). NaN amax -> NaN.
DSV41_HD constexpr float fp8_act_scale(float amax) {
  if (amax != amax) return amax;
  const float a = amax > 1e-4f ? amax : 1e-4f;
  return pow2_ceil_bits(a * (1.0f / 448.0f));
}

// FP4 power-of-two scale (§3.3, block 32): 2^ceil(log2(max(amax, 6·2^-126) * fp32(1/6))), as the
// reference multiplies by the FP32 reciprocal. NaN amax -> NaN.
DSV41_HD constexpr float fp4_pow2_scale(float amax) {
  if (amax != amax) return amax;
  constexpr float kFloor = 6.0f * 1.1754943508222875e-38f;  // 6·2^-126
  const float a = amax > kFloor ? amax : kFloor;
  return pow2_ceil_bits(a * (1.0f / 6.0f));
}

// FP4 E4M3 scale (§3.3, block 16): e4m3_rne(max(amax, 6·2^-9) / 6), the quotient an FP32 division,
// saturating at 448; returned decoded. NaN amax -> NaN.
DSV41_HD constexpr float fp4_e4m3_scale(float amax) {
  if (amax != amax) return amax;
  constexpr float kFloor = 6.0f * 0.001953125f;  // 6·2^-9
  const float a = amax > kFloor ? amax : kFloor;
#if defined(__CUDA_ARCH__)
  const float q = std::is_constant_evaluated() ? a / 6.0f : __fdiv_rn(a, 6.0f);  // IEEE even under fast math
#else
  const float q = a / 6.0f;
#endif
  return e4m3_to_f32(e4m3_from_f32(q));
}

}  // namespace dsv41::num
