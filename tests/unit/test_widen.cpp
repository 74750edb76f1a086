// Host check of kernels/widen.hpp, the bit-level widening the decode GEMM kernels run on the device: every E2M1 word
// gives the E4M3 codes of numeric/formats.hpp, and every UE8M0 scale byte the FP32 bits of its power of two (and the
// same bits as the formula it replaced in the kernels, (w >> 8i) & 0xFF shifted into the exponent).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>

#include <dsv41/backend/cuda/kernels/widen.hpp>
#include <dsv41/numeric/formats.hpp>

using dsv41::gpu::E2m1Lut;
using dsv41::gpu::e2m1x4_to_e4m3x4;
using dsv41::gpu::prmt_b32;
using dsv41::gpu::ue8m0_byte_bits;

TEST_CASE("prmt_b32 on the host follows the PTX definition", "[widen]") {
  const uint32_t a = 0x44332211u, b = 0x88776655u;
  CHECK(prmt_b32(a, b, 0x3210u) == a);
  CHECK(prmt_b32(a, b, 0x7654u) == b);
  CHECK(prmt_b32(a, b, 0x0123u) == 0x11223344u);
  CHECK(prmt_b32(a, b, 0x4040u) == 0x55115511u);
  // Sign mode: byte 7 (0x88) replicates 1s, byte 0 (0x11) 0s; only the low 16 bits of c are read.
  CHECK(prmt_b32(a, b, 0xFFFF8F8Fu) == 0x00FF00FFu);
}

TEST_CASE("e2m1x4_to_e4m3x4 gives the E4M3 code of every E2M1 value", "[widen]") {
  std::mt19937 rng(11);
  E2m1Lut lut;  // the kernels' make_e2m1_lut holds these same two words in registers
  int wrong = 0;
  for (uint32_t lo = 0; lo < 0x10000u; ++lo) {
    const uint32_t w = lo | (rng() << 16);  // the upper half is ignored
    const uint32_t got = e2m1x4_to_e4m3x4(w, lut);
    for (int i = 0; i < 4; ++i) {
      const uint8_t nib = uint8_t((w >> (4 * i)) & 0xFu);
      const uint8_t want = dsv41::num::e4m3_from_f32(dsv41::num::e2m1_to_f32(nib));  // -0 (code 8) -> 0x80
      wrong += uint8_t(got >> (8 * i)) != want;
    }
  }
  CHECK(wrong == 0);
  CHECK(e2m1x4_to_e4m3x4(0x8F71u) == 0x80CC4C30u);  // 0.5, 6, -6, -0
}

TEST_CASE("ue8m0_byte_bits reads each scale byte as its power of two", "[widen]") {
  std::mt19937 rng(5);
  int wrong = 0, wrong_old = 0;
  for (int i = 0; i < 4; ++i) {
    for (uint32_t e = 0; e < 256; ++e) {
      for (int rep = 0; rep < 64; ++rep) {
        const uint32_t w = (rng() & ~(0xFFu << (8 * i))) | (e << (8 * i));
        const uint32_t got = ue8m0_byte_bits(w, i);
        // 2^(e-127) for e = 1..254 (formats.hpp), the subnormal 2^-127 for 0, +inf for 255 (formats.hpp: NaN).
        uint32_t want = 0x7F800000u;
        if (e < 255) {
          const float f = dsv41::num::ue8m0_to_f32(uint8_t(e));
          std::memcpy(&want, &f, 4);
        }
        wrong += got != want;
        const uint32_t old = ((w >> (8 * i)) & 0xFFu) << 23;  // the kernels' former sbyte: ue8m0_f of the byte
        wrong_old += got != (old > 0x00400000u ? old : 0x00400000u);
      }
    }
  }
  CHECK(wrong == 0);
  CHECK(wrong_old == 0);
}
