// SPEC §6 cache entry types: what one position (window) or one compressed group (main KV, index key) stores,
// its byte size for a width n, and its packing. The caches of both backends hold exactly these bytes.
#pragma once
#include <cstdint>

#include <dsv41/core/host_device.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::kv {

// A window ring entry: n E4M3 codes, then n/32 UE8M0 exponents (FP8 with a power-of-two scale per 32).
struct WindowEntry {
  DSV41_HD static constexpr int bytes(int n) { return n + n / 32; }
  // Quantizes x in place and writes the entry.
  DSV41_HD static void pack(float* x, int n, uint8_t* out) { num::pack_window_entry(x, n, out); }
  DSV41_HD static void unpack(const uint8_t* in, int n, float* x) { num::unpack_window_entry(in, n, x); }
};

// A compressed main KV entry: n/2 bytes of E2M1 pairs (low nibble first), then n/16 E4M3 scales.
struct MainKvEntry {
  DSV41_HD static constexpr int bytes(int n) { return n / 2 + n / 16; }
  DSV41_HD static void pack(float* x, int n, uint8_t* out) { num::pack_main_entry(x, n, out); }
  DSV41_HD static void unpack(const uint8_t* in, int n, float* x) { num::unpack_main_entry(in, n, x); }
};

// An index key: n/2 bytes of E2M1 pairs, then n/32 UE8M0 exponents.
struct IndexKey {
  DSV41_HD static constexpr int bytes(int n) { return n / 2 + n / 32; }
  DSV41_HD static void pack(float* x, int n, uint8_t* out) { num::pack_index_entry(x, n, out); }
  DSV41_HD static void unpack(const uint8_t* in, int n, float* x) { num::unpack_index_entry(in, n, x); }
};

// Entries of one type in a byte array (host or device memory): entry i at data + i·bytes(width).
template <class Entry, class Byte = uint8_t>
struct Entries {
  Byte* data = nullptr;
  int width = 0;
  DSV41_HD constexpr int stride() const { return Entry::bytes(width); }
  DSV41_HD Byte* at(int64_t i) const { return data + i * stride(); }
};

// A KV source's counters after `rows` more rows (SPEC §4.3): ratio 1 makes one entry per row; ratio r pools whole
// groups of r rows of [pending ; new rows], and the rest stay pending. Both backends' compressors follow it, and so
// does the GPU's decode graph (which advances the counters on the host while the device compresses).
struct CompressCounters {
  int64_t entries = 0;
  int pending = 0;
};
DSV41_HD constexpr CompressCounters compress_counters(int ratio, int64_t entries, int pending, int64_t rows) {
  if (ratio <= 1) return {entries + rows, 0};
  const int64_t all = pending + rows;
  return {entries + all / ratio, int(all % ratio)};
}
static_assert(compress_counters(1, 5, 0, 3).entries == 8 && compress_counters(4, 2, 3, 1).entries == 3 &&
              compress_counters(4, 2, 3, 1).pending == 0 && compress_counters(4, 2, 1, 6).pending == 3);

// The release's widths (head dim 512, index head dim 128): 528 + 288 + 68 bytes.
static_assert(WindowEntry::bytes(512) == 528 && MainKvEntry::bytes(512) == 288 && IndexKey::bytes(128) == 68);

}  // namespace dsv41::kv
