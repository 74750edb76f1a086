// Block quantizers of SPEC §3.2–3.3 and the packed cache entries of SPEC §6. Each quantizer writes
// the codes and scales it chose and, in place, the dequantized values (q·s), which are exactly what
// the reference holds; the packed forms store those values losslessly.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include <dsv41/core/host_device.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::num {

// FP8 E4M3 with a power-of-two scale per 32 values (§3.2). codes: n bytes; exps: n/32 UE8M0 bytes.
DSV41_HD inline void fp8_quant_block32(float* x, int n, uint8_t* codes = nullptr, uint8_t* exps = nullptr) {
  for (int b = 0; b < n / 32; ++b) {
    float* v = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float s = fp8_act_scale(amax);
    for (int i = 0; i < 32; ++i) {
      const float c = fminf(fmaxf(v[i] / s, -448.f), 448.f);
      const uint8_t q = e4m3_from_f32(c);
      if (codes) codes[b * 32 + i] = q;
      v[i] = e4m3_to_f32(q) * s;
    }
    if (exps) exps[b] = ue8m0_from_f32(s);
  }
}

// E2M1 with a power-of-two scale per 32 values (§3.3; indexer queries, index keys).
DSV41_HD inline void fp4_quant_block32(float* x, int n, uint8_t* nibbles = nullptr, uint8_t* exps = nullptr) {
  for (int b = 0; b < n / 32; ++b) {
    float* v = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float s = fp4_pow2_scale(amax);
    for (int i = 0; i < 32; ++i) {
      const uint8_t q = e2m1_from_f32(fminf(fmaxf(v[i] / s, -6.f), 6.f));
      if (nibbles) nibbles[b * 32 + i] = q;
      v[i] = e2m1_to_f32(q) * s;
    }
    if (exps) exps[b] = ue8m0_from_f32(s);
  }
}

// E2M1 with an E4M3 scale per 16 values (§3.3; compressed main KV).
DSV41_HD inline void fp4_quant_block16(float* x, int n, uint8_t* nibbles = nullptr, uint8_t* scales = nullptr) {
  for (int b = 0; b < n / 16; ++b) {
    float* v = x + b * 16;
    float amax = 0.f;
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
    const float s = fp4_e4m3_scale(amax);
    for (int i = 0; i < 16; ++i) {
      const uint8_t q = e2m1_from_f32(fminf(fmaxf(v[i] / s, -6.f), 6.f));
      if (nibbles) nibbles[b * 16 + i] = q;
      v[i] = e2m1_to_f32(q) * s;
    }
    if (scales) scales[b] = e4m3_from_f32(s);
  }
}

// ---- packed cache entries (SPEC §6) ----
// Window entry: n E4M3 codes, then n/32 UE8M0 exponents.                            (n=512: 528 B)
// Main KV entry: n/2 bytes of E2M1 pairs (low nibble first), then n/16 E4M3 scales. (n=512: 288 B)
// Index key: n/2 bytes of E2M1 pairs, then n/32 UE8M0 exponents.                    (n=128: 68 B)
DSV41_HD constexpr int window_entry_size(int n) { return n + n / 32; }
DSV41_HD constexpr int main_entry_size(int n) { return n / 2 + n / 16; }
DSV41_HD constexpr int index_entry_size(int n) { return n / 2 + n / 32; }

// Quantizes x in place (FP8 block 32) and writes the packed window entry.
DSV41_HD inline void pack_window_entry(float* x, int n, uint8_t* out) { fp8_quant_block32(x, n, out, out + n); }
DSV41_HD inline void unpack_window_entry(const uint8_t* in, int n, float* x) {
  for (int i = 0; i < n; ++i) x[i] = e4m3_to_f32(in[i]) * ue8m0_to_f32(in[n + i / 32]);
}

DSV41_HD inline void pack_nibbles(const uint8_t* nib, int n, uint8_t* out) {
  for (int i = 0; i < n / 2; ++i) out[i] = pack_e2m1(nib[2 * i], nib[2 * i + 1]);
}
DSV41_HD inline uint8_t nibble_at(const uint8_t* packed, int i) {
  const uint8_t byte = packed[i / 2];
  return (i & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
}

// Block b (16 values at x16) of an n-wide main KV entry: quantized in place, its nibbles and E4M3 scale written.
DSV41_HD inline void pack_main_block(float* x16, int n, int b, uint8_t* out) {
  uint8_t nib[16];
  fp4_quant_block16(x16, 16, nib, out + n / 2 + b);
  pack_nibbles(nib, 16, out + b * 8);
}
// Quantizes x in place (FP4, E4M3 scale per 16) and writes the packed main KV entry (any n, a multiple of 16).
DSV41_HD inline void pack_main_entry(float* x, int n, uint8_t* out) {
  for (int b = 0; b < n / 16; ++b) pack_main_block(x + b * 16, n, b, out);
}
DSV41_HD inline void unpack_main_entry(const uint8_t* in, int n, float* x) {
  for (int i = 0; i < n; ++i) x[i] = e2m1_to_f32(nibble_at(in, i)) * e4m3_to_f32(in[n / 2 + i / 16]);
}

// Block b (32 values at x32) of an n-wide index key: quantized in place, its nibbles and UE8M0 exponent written.
DSV41_HD inline void pack_index_block(float* x32, int n, int b, uint8_t* out) {
  uint8_t nib[32];
  fp4_quant_block32(x32, 32, nib, out + n / 2 + b);
  pack_nibbles(nib, 32, out + b * 16);
}
// Quantizes x in place (FP4, power-of-two scale per 32) and writes the packed index key (any n, a multiple of 32).
DSV41_HD inline void pack_index_entry(float* x, int n, uint8_t* out) {
  for (int b = 0; b < n / 32; ++b) pack_index_block(x + b * 32, n, b, out);
}
DSV41_HD inline void unpack_index_entry(const uint8_t* in, int n, float* x) {
  for (int i = 0; i < n; ++i) x[i] = e2m1_to_f32(nibble_at(in, i)) * ue8m0_to_f32(in[n / 2 + i / 32]);
}

}  // namespace dsv41::num
