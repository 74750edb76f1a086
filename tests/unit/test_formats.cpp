// Number formats against ml_dtypes tables (tools/gen_format_tables.py) and the SPEC §3.2–3.3 scales.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/numeric/formats.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

namespace num = dsv41::num;

namespace {

std::vector<uint8_t> read_table(const std::string& name) {
  const std::string path = std::string(DSV41_TEST_DATA) + "/formats/" + name;
  std::ifstream f(path, std::ios::binary);
  INFO("table " << path);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

uint32_t le32(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
constexpr float kInf = std::numeric_limits<float>::infinity();
bool is_nan_bits(uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }

// Same float32 bits, or both NaN.
bool same_f32(float got, uint32_t want) {
  return is_nan_bits(want) ? std::isnan(got) : bits(got) == want;
}

std::string hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Counts mismatches and keeps the first few for the failure message.
struct Mismatches {
  size_t checked = 0, bad = 0;
  std::string first;
  void check(bool ok, const std::string& what) {
    ++checked;
    if (ok) return;
    if (bad++ < 8) first += what + "\n";
  }
};

template <class Decode>
void check_decode_table(const char* file, size_t n, Decode decode) {
  const auto t = read_table(file);
  REQUIRE(t.size() == 4 * n);
  Mismatches m;
  for (size_t c = 0; c < n; ++c) {
    const uint32_t want = le32(&t[4 * c]);
    const float got = decode(c);
    m.check(same_f32(got, want), "code " + hex(uint32_t(c)) + ": got " + hex(bits(got)) + " want " + hex(want));
  }
  INFO(m.first);
  CHECK(m.bad == 0);
  CHECK(m.checked == n);
}

// Smallest power of two p with mult * p >= a (a > 0 finite), in exact double arithmetic.
double exact_pow2_ceil(double a, double mult) {
  double p = std::ldexp(1.0, std::ilogb(a) - std::ilogb(mult) - 2);
  while (mult * p < a) p *= 2;
  while (mult * p / 2 >= a) p /= 2;
  return p;
}

// Nearest E4M3 value to q >= 0 (ties to the even code), saturating at 448.
double nearest_e4m3(double q) {
  if (q >= 448) return 448;
  int best = 0;
  for (int c = 1; c < 0x7F; ++c) {
    const double d = std::fabs(num::e4m3_to_f32(uint8_t(c)) - q), db = std::fabs(num::e4m3_to_f32(uint8_t(best)) - q);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return num::e4m3_to_f32(uint8_t(best));
}

}  // namespace

// Compile-time use (constexpr-friendly).
static_assert(num::bf16_bits(1.0f) == 0x3F80 && num::bf16_to_f32(0xC000) == -2.0f);
static_assert(num::e4m3_from_f32(448.0f) == 0x7E && num::e4m3_from_f32(-1e9f) == 0xFE);
static_assert(num::e4m3_to_f32(0x01) == 0.001953125f && num::e4m3_to_f32(0x38) == 1.0f);
static_assert(num::ue8m0_from_f32(1.0f) == 127 && num::ue8m0_to_f32(128) == 2.0f);
static_assert(num::e2m1_from_f32(5.0f) == 0x6 && num::e2m1_to_f32(0xF) == -6.0f);
static_assert(num::pack_e2m1(0x3, 0xA) == 0xA3);
static_assert(num::fp8_act_scale(448.0f) == 1.0f && num::fp4_pow2_scale(6.0f) == 1.0f);
static_assert(num::fp4_e4m3_scale(6.0f) == 1.0f);

TEST_CASE("decode tables match ml_dtypes", "[formats]") {
  check_decode_table("bf16_decode.bin", 65536, [](size_t c) { return num::bf16_to_f32(uint16_t(c)); });
  check_decode_table("e4m3_decode.bin", 256, [](size_t c) { return num::e4m3_to_f32(uint8_t(c)); });
  check_decode_table("ue8m0_decode.bin", 256, [](size_t c) { return num::ue8m0_to_f32(uint8_t(c)); });
  check_decode_table("e2m1_decode.bin", 16, [](size_t c) { return num::e2m1_to_f32(uint8_t(c)); });
}

TEST_CASE("E4M3, UE8M0 and E2M1 encoders match ml_dtypes", "[formats]") {
  const auto t = read_table("small_encode.bin");
  REQUIRE(t.size() >= 4);
  const size_t n = le32(t.data());
  REQUIRE(t.size() == 4 + n * 4 + 3 * n);
  const uint8_t* in = t.data() + 4;
  const uint8_t* e4m3 = in + 4 * n;
  const uint8_t* ue8m0 = e4m3 + n;
  const uint8_t* e2m1 = ue8m0 + n;
  Mismatches m;
  for (size_t i = 0; i < n; ++i) {
    const float x = from_bits(le32(in + 4 * i));
    const std::string at = "x=" + hex(bits(x));
    const uint8_t a = num::e4m3_from_f32(x), b = num::ue8m0_from_f32(x), c = num::e2m1_from_f32(x);
    m.check(a == e4m3[i], at + " e4m3 got " + hex(a) + " want " + hex(e4m3[i]));
    m.check(b == ue8m0[i], at + " ue8m0 got " + hex(b) + " want " + hex(ue8m0[i]));
    m.check(c == e2m1[i], at + " e2m1 got " + hex(c) + " want " + hex(e2m1[i]));
    m.check(same_f32(num::round_e4m3(x), bits(num::e4m3_to_f32(e4m3[i]))), at + " round_e4m3");
    m.check(same_f32(num::round_e2m1(x), bits(num::e2m1_to_f32(e2m1[i]))), at + " round_e2m1");
  }
  INFO(m.first);
  CHECK(m.bad == 0);
  CHECK(n > 80000);
}

TEST_CASE("bf16 encoder matches ml_dtypes", "[formats]") {
  const auto t = read_table("bf16_encode.bin");
  REQUIRE(t.size() >= 4);
  const size_t n = le32(t.data());
  REQUIRE(t.size() == 4 + n * 6);
  const uint8_t* in = t.data() + 4;
  const uint8_t* out = in + 4 * n;
  Mismatches m;
  for (size_t i = 0; i < n; ++i) {
    const float x = from_bits(le32(in + 4 * i));
    const uint16_t want = le16(out + 2 * i), got = num::bf16_bits(x);
    m.check(got == want, "x=" + hex(bits(x)) + " got " + hex(got) + " want " + hex(want));
    m.check(same_f32(num::round_bf16(x), uint32_t(want) << 16), "x=" + hex(bits(x)) + " round_bf16");
  }
  INFO(m.first);
  CHECK(m.bad == 0);
  CHECK(n > 130000);
}

TEST_CASE("special values and documented choices", "[formats]") {
  const float inf = from_bits(0x7F800000u), nan = from_bits(0x7FC00000u), nneg = from_bits(0xFFC00000u);
  // bf16: ties to even, NaN quiet with sign.
  CHECK(num::bf16_bits(from_bits(0x3F808000u)) == 0x3F80);  // tie, even kept
  CHECK(num::bf16_bits(from_bits(0x3F818000u)) == 0x3F82);  // tie, odd rounds up
  CHECK(num::bf16_bits(from_bits(0x7F800001u)) == 0x7FC0);
  CHECK(num::bf16_bits(nneg) == 0xFFC0);
  CHECK(num::bf16_bits(from_bits(0x7F7FFFFFu)) == 0x7F80);  // FLT_MAX rounds to inf
  // E4M3: saturation and NaN.
  CHECK(num::e4m3_from_f32(inf) == 0x7E);
  CHECK(num::e4m3_from_f32(-inf) == 0xFE);
  CHECK(num::e4m3_from_f32(464.0f) == 0x7E);
  CHECK(num::e4m3_from_f32(1e30f) == 0x7E);
  CHECK(num::e4m3_from_f32(nan) == 0x7F);
  CHECK(num::e4m3_from_f32(nneg) == 0xFF);
  CHECK(num::e4m3_from_f32(-0.0f) == 0x80);
  CHECK(num::e4m3_from_f32(0.0009765625f) == 0x00);  // 2^-10: tie between 0 and 2^-9, even
  CHECK(num::e4m3_from_f32(0.0029296875f) == 0x02);  // 1.5 * 2^-9: tie, rounds to even code 2
  CHECK(std::isnan(num::e4m3_to_f32(0x7F)));
  CHECK(std::isnan(num::e4m3_to_f32(0xFF)));
  CHECK(num::e4m3_to_f32(0x7E) == 448.0f);
  CHECK(num::e4m3_to_f32(0x08) == 0.015625f);
  // UE8M0.
  CHECK(bits(num::ue8m0_to_f32(0)) == 0x00400000u);  // 2^-127
  CHECK(num::ue8m0_to_f32(254) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(num::ue8m0_to_f32(255)));
  CHECK(num::ue8m0_from_f32(1.5f) == 128);
  CHECK(num::ue8m0_from_f32(from_bits(0x3FBFFFFFu)) == 127);
  CHECK(num::ue8m0_from_f32(3.0f) == 129);
  CHECK(num::ue8m0_from_f32(0.0f) == 0xFF);
  CHECK(num::ue8m0_from_f32(-1.0f) == 0xFF);
  CHECK(num::ue8m0_from_f32(inf) == 0xFF);
  CHECK(num::ue8m0_from_f32(std::ldexp(1.0f, -127)) == 0);
  CHECK(num::ue8m0_from_f32(std::ldexp(1.0f, -140)) == 0);
  for (int k = -127; k <= 127; ++k) CHECK(num::ue8m0_from_f32(std::ldexp(1.0f, k)) == k + 127);
  // E2M1: SPEC §3.3 ties, saturation, NaN -> signed zero.
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 1e30f};
  const float out[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, 6.0f, 6.0f};
  for (int i = 0; i < 10; ++i) {
    CHECK(num::round_e2m1(in[i]) == out[i]);
    CHECK(num::round_e2m1(-in[i]) == -out[i]);
  }
  CHECK(num::e2m1_from_f32(inf) == 0x7);
  CHECK(num::e2m1_from_f32(-inf) == 0xF);
  CHECK(num::e2m1_from_f32(nan) == 0x0);
  CHECK(num::e2m1_from_f32(nneg) == 0x8);
  CHECK(num::e2m1_from_f32(-0.1f) == 0x8);
}

TEST_CASE("E2M1 packing: element 2b low nibble, 2b+1 high nibble", "[formats]") {
  CHECK(num::pack_e2m1(0x3, 0xA) == 0xA3);
  CHECK(num::pack_e2m1(0x13, 0xFA) == 0xA3);  // only the low 4 bits of each argument
  CHECK(num::e2m1_lo(0xA3) == 0x3);
  CHECK(num::e2m1_hi(0xA3) == 0xA);
  const uint8_t row[3] = {num::pack_e2m1(0x3, 0xA), num::pack_e2m1(0x1, 0x7), num::pack_e2m1(0xC, 0x0)};
  const float want[6] = {1.5f, -1.0f, 0.5f, 6.0f, -2.0f, 0.0f};
  float got[6] = {};
  num::unpack_e2m1_row(row, 6, got);
  for (int i = 0; i < 6; ++i) {
    CHECK(got[i] == want[i]);
    CHECK(num::e2m1_at(row, i) == want[i]);
  }
  float odd[5] = {};
  num::unpack_e2m1_row(row, 5, odd);
  for (int i = 0; i < 5; ++i) CHECK(odd[i] == want[i]);
  const float scales[3] = {2.0f, 0.25f, 8.0f};
  float scaled[6] = {};
  num::unpack_e2m1_row_scaled(row, 6, scales, 2, scaled);
  for (int i = 0; i < 6; ++i) CHECK(scaled[i] == want[i] * scales[i / 2]);
  // Round trip of every code pair.
  for (int lo = 0; lo < 16; ++lo)
    for (int hi = 0; hi < 16; ++hi) {
      const uint8_t b = num::pack_e2m1(uint8_t(lo), uint8_t(hi));
      REQUIRE(num::e2m1_lo(b) == lo);
      REQUIRE(num::e2m1_hi(b) == hi);
    }
}

TEST_CASE("FP8 activation scale (SPEC 3.2)", "[formats][scale]") {
  for (int k = -22; k <= 100; ++k) {
    const float a = std::ldexp(448.0f, k), p = std::ldexp(1.0f, k);
    INFO("k=" << k);
    CHECK(num::fp8_act_scale(a) == p);
    CHECK(num::fp8_act_scale(std::nextafter(a, kInf)) == 2 * p);
    CHECK(num::fp8_act_scale(std::nextafter(a, 0.0f)) == p);
  }
  CHECK(num::fp8_act_scale(0.0f) == std::ldexp(1.0f, -22));  // floor 1e-4: 1e-4/448 ~ 2.2e-7
  CHECK(num::fp8_act_scale(1e-30f) == std::ldexp(1.0f, -22));
  CHECK(num::fp8_act_scale(1.0f) == std::ldexp(1.0f, -8));
  CHECK(num::fp8_act_scale(449.0f) == 2.0f);
  CHECK(std::isinf(num::fp8_act_scale(from_bits(0x7F800000u))));
  CHECK(std::isnan(num::fp8_act_scale(from_bits(0x7FC00000u))));
  // amax * fp32(1/448) gives the same ceiling as the exact quotient amax / 448 (sampled).
  size_t bad = 0, n = 0;
  for (uint64_t b = bits(1e-4f); b < 0x7F7FFFFFu; b += 4099, ++n) {
    const float a = from_bits(uint32_t(b));
    if (num::fp8_act_scale(a) != exact_pow2_ceil(a, 448.0)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(n > 280000);
}

TEST_CASE("FP4 power-of-two scale (SPEC 3.3)", "[formats][scale]") {
  for (int k = -126; k <= 125; ++k) {  // 6 * 2^126 overflows FP32
    const float a = std::ldexp(6.0f, k), p = std::ldexp(1.0f, k);
    INFO("k=" << k);
    CHECK(num::fp4_pow2_scale(a) == p);
    CHECK(num::fp4_pow2_scale(std::nextafter(a, kInf)) == 2 * p);
    if (k > -126) CHECK(num::fp4_pow2_scale(std::nextafter(a, 0.0f)) == p);
  }
  CHECK(num::fp4_pow2_scale(0.0f) == std::ldexp(1.0f, -126));
  CHECK(num::fp4_pow2_scale(1.0f) == 0.25f);
  CHECK(num::fp4_pow2_scale(6.5f) == 2.0f);
  CHECK(std::isnan(num::fp4_pow2_scale(from_bits(0x7FC00000u))));
  size_t bad = 0, n = 0;
  for (uint64_t b = 0x01C00000u; b < 0x7F7FFFFFu; b += 4099, ++n) {
    const float a = from_bits(uint32_t(b));
    if (num::fp4_pow2_scale(a) != exact_pow2_ceil(a, 6.0)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(n > 400000);
}

TEST_CASE("FP4 E4M3 scale (SPEC 3.3)", "[formats][scale]") {
  CHECK(num::fp4_e4m3_scale(0.0f) == 0.001953125f);  // floor 6*2^-9 -> 2^-9, the smallest E4M3
  CHECK(num::fp4_e4m3_scale(6.0f) == 1.0f);
  CHECK(num::fp4_e4m3_scale(6.375f) == 1.0f);  // 1.0625: tie, even code
  CHECK(num::fp4_e4m3_scale(std::nextafter(6.375f, 7.0f)) == 1.125f);
  CHECK(num::fp4_e4m3_scale(6.0f * 448.0f) == 448.0f);
  CHECK(num::fp4_e4m3_scale(1e30f) == 448.0f);
  CHECK(num::fp4_e4m3_scale(from_bits(0x7F800000u)) == 448.0f);
  CHECK(std::isnan(num::fp4_e4m3_scale(from_bits(0x7FC00000u))));
  for (int c = 1; c < 0x7F; ++c) {  // amax = 6 * v gives v back
    const float v = num::e4m3_to_f32(uint8_t(c));
    INFO("code " << c);
    CHECK(num::fp4_e4m3_scale(6.0f * v) == v);
  }
  // FP32 quotient then E4M3 rounding equals rounding the exact quotient (sampled).
  size_t bad = 0, n = 0;
  for (uint64_t b = bits(6.0f * 0.001953125f); b < bits(4000.0f); b += 997, ++n) {
    const float a = from_bits(uint32_t(b));
    if (num::fp4_e4m3_scale(a) != nearest_e4m3(double(a) / 6.0)) ++bad;
  }
  CHECK(bad == 0);
  CHECK(n > 20000);
}
