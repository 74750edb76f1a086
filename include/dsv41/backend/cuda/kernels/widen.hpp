// Bit-level widening of packed operands for the mma kernels: prmt.b32, 4 E2M1 codes -> 4 E4M3 codes, a UE8M0
// scale byte -> its FP32 bits. Plain C++ too (prmt emulated from the PTX ISA's definition on the host), so
// tests/unit/test_widen.cpp checks each against the number formats of numeric/formats.hpp on every input.
#pragma once
#include <cstdint>

#include <dsv41/core/host_device.hpp>

namespace dsv41::gpu {

// prmt.b32 in its generic form: byte n of the result is byte c[4n+2:4n] of {b, a} (a: bytes 0-3, b: bytes 4-7),
// or, where c[4n+3] is set, that byte's sign bit replicated over all 8 bits.
DSV41_HD inline uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  const uint64_t x = (uint64_t(b) << 32) | a;
  uint32_t d = 0;
  for (int n = 0; n < 4; ++n) {
    const uint32_t s = (c >> (4 * n)) & 0xFu;
    uint32_t byte = uint32_t(x >> (8 * (s & 7u))) & 0xFFu;
    if (s & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    d |= byte << (8 * n);
  }
  return d;
#endif
}

// The two table words of e2m1x4_to_e4m3x4 that must sit in registers (prmt's first operand). A hot loop that
// widens many words takes one made before it (make_e2m1_lut in common.cuh, which the compiler keeps in
// registers instead of copying the constants in before every prmt); the defaults are the plain constants.
struct E2m1Lut {
  uint32_t mag_lo = 0x3C383000u;  // E4M3 codes of the magnitudes 0, 0.5, 1, 1.5
  uint32_t pos = 0x7F7F7F7Fu;     // the sign table
};

// 4 E2M1 nibbles (bits 4i..4i+3 of w, i = 0..3; the upper 16 bits are ignored) -> 4 E4M3 bytes (exact: every E2M1
// value is an E4M3 value, -0 included). Five integer instructions: the magnitude from a table, the sign through
// prmt's sign mode (a negative code's nibble has bit 3 set, which turns the selected 0x7F into 0x00), shifted into
// bit 7.
DSV41_HD inline uint32_t e2m1x4_to_e4m3x4(uint32_t w, const E2m1Lut& lut = E2m1Lut{}) {
  // E4M3 codes of the magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}: 0x00 0x30 0x38 0x3C 0x40 0x44 0x48 0x4C.
  const uint32_t mag = prmt_b32(lut.mag_lo, 0x4C484440u, w & 0x7777u);
  const uint32_t pos = prmt_b32(lut.pos, 0x7F7F7F7Fu, w);  // 0x7F where the code is positive, 0x00 where negative
  return mag | (~(pos << 1) & 0x80808080u);
}

// FP32 bits of the UE8M0 scale in byte i (0..3) of w, as the kernels read it: 2^(e-127) for e = 1..254, 2^-127 (the
// subnormal 0x00400000) for e = 0, +inf for e = 255. The byte is shifted straight into the exponent field and
// masked there: three instructions with the select of e = 0 (four through (w >> 8i) & 0xFF first).
DSV41_HD inline uint32_t ue8m0_byte_bits(uint32_t w, int i) {
  const uint32_t e = (i == 3 ? w >> 1 : w << (23 - 8 * i)) & 0x7F800000u;
  return e > 0x00400000u ? e : 0x00400000u;
}

}  // namespace dsv41::gpu
