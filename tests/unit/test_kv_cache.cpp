// The cache entry types (blocks/kv_cache.hpp): byte sizes, and packing at every width the loader accepts,
// including head dims past 1024 (the packers once staged nibbles in a fixed 1024-entry buffer); the compressor counters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/numeric/quant.hpp>

#include "fixture.hpp"

using namespace dsv41;

namespace {
// Packs a random row of width n, checks the entry's bytes stay inside bytes(n) (guard bytes after it untouched),
// and that unpacking gives exactly the values the packer quantized x to in place.
template <class Entry>
void round_trip(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 2.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  const int nb = Entry::bytes(n);
  std::vector<uint8_t> buf(size_t(nb) + 64, 0xA5);
  Entry::pack(x.data(), n, buf.data());
  for (size_t i = size_t(nb); i < buf.size(); ++i) REQUIRE(buf[i] == 0xA5);
  std::vector<float> y(static_cast<size_t>(n));
  Entry::unpack(buf.data(), n, y.data());
  for (int i = 0; i < n; ++i) REQUIRE(y[size_t(i)] == x[size_t(i)]);
}
}  // namespace

TEST_CASE("cache entry sizes", "[kv_cache]") {
  CHECK(kv::WindowEntry::bytes(512) == 528);
  CHECK(kv::MainKvEntry::bytes(512) == 288);
  CHECK(kv::IndexKey::bytes(128) == 68);
  CHECK(kv::MainKvEntry::bytes(64) == 36);
  CHECK(kv::IndexKey::bytes(32) == 17);
  kv::Entries<kv::MainKvEntry> e{nullptr, 512};
  CHECK(e.stride() == 288);
}

TEST_CASE("cache entries pack and unpack at any width", "[kv_cache]") {
  for (int n : {32, 96, 192, 512, 1024, 2048, 4096}) {
    INFO("n = " << n);
    round_trip<kv::WindowEntry>(n, uint32_t(n));
    round_trip<kv::MainKvEntry>(n, uint32_t(n) + 1);
    round_trip<kv::IndexKey>(n, uint32_t(n) + 2);
  }
}

TEST_CASE("main KV entries: nibbles of every value, then the scales", "[kv_cache]") {
  // Element 2b in the low nibble, 2b + 1 in the high one; scale b at n/2 + b, for n = 2048 as for 512.
  const int n = 2048;
  std::vector<float> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[size_t(i)] = float((i % 13) - 6) * float(1 + i / 512);
  std::vector<uint8_t> buf(size_t(kv::MainKvEntry::bytes(n)));
  std::vector<float> q = x;
  kv::MainKvEntry::pack(q.data(), n, buf.data());
  for (int i = 0; i < n; ++i) {
    const float s = num::e4m3_to_f32(buf[size_t(n / 2 + i / 16)]);
    const float v = num::e2m1_to_f32(num::nibble_at(buf.data(), i)) * s;
    REQUIRE(v == q[size_t(i)]);
  }
}

// The compressor's counters follow from the positions alone (kv::compress_counters): the CPU compressor's entries
// and pending rows after chunks of every length and after single decode steps across every ratio's group boundary
// equal the rule's, from the start and step by step. The GPU backend advances its host counters by the same rule
// (and its decode graph advances them while the device compresses).
TEST_CASE("compressor counters follow kv::compress_counters", "[kv_cache]") {
  const auto& m = test::tiny_ced();
  const ModelShape& s = m.shape();
  int max_ratio = 1, sources = 0;
  for (const LayerRole& r : m.schedule()) {
    if (r.dspark || !r.compresses()) continue;
    max_ratio = std::max(max_ratio, r.ratio);
    ++sources;
  }
  REQUIRE(sources > 0);
  SequenceState st = m.new_sequence(96);
  std::vector<kv::CompressCounters> prev(m.schedule().size());
  auto check = [&](int64_t rows) {
    for (const LayerRole& r : m.schedule()) {
      if (r.dspark || !r.compresses()) continue;
      const LayerState& ls = st.layers[size_t(r.id)];
      const int pend = int(ls.pend_kv.size() / size_t(s.head_dim));
      INFO("layer " << r.id << " ratio " << r.ratio << " pos " << st.pos);
      const kv::CompressCounters from0 = kv::compress_counters(r.ratio, 0, 0, st.pos);
      const kv::CompressCounters step = kv::compress_counters(r.ratio, prev[size_t(r.id)].entries,
                                                              prev[size_t(r.id)].pending, rows);
      CHECK(ls.n_entries == from0.entries);
      CHECK(pend == from0.pending);
      CHECK(step.entries == from0.entries);
      CHECK(step.pending == from0.pending);
      prev[size_t(r.id)] = {ls.n_entries, pend};
    }
  };
  int seed = 1;
  for (int n : {5, 1, 2, 7, 3}) {  // chunks ending at every phase of the groups
    REQUIRE(m.prefill(st, test::tiny_prompt(n, seed++)).ok());
    check(n);
  }
  for (int i = 0; i < 2 * max_ratio + 3; ++i) {
    std::vector<float> logits;
    Model<configs::TinyCed>::DecodeItem item{&st, int32_t(3 + i), &logits};
    REQUIRE(m.decode(std::span(&item, 1)).ok());
    check(1);
  }
}
