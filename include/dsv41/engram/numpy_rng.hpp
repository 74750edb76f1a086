// Bit-exact re-implementation of numpy's `default_rng(seed).integers(low, high, n, dtype=int64)`:
// SeedSequence (O'Neill's seed_seq variant, 4-word pool), PCG64 (128-bit LCG, XSL-RR output,
// numpy's seeding) and numpy's bounded int64 generation (Lemire, with its 32-bit path).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dsv41/core/status.hpp>

namespace dsv41::engram::numpy_rng {

__extension__ typedef unsigned __int128 u128;

// numpy's _int_to_uint32_array: 32-bit words, lowest first; 0 gives one word 0.
inline std::vector<uint32_t> seed_words(uint64_t seed) {
  std::vector<uint32_t> w;
  if (seed == 0) w.push_back(0);
  while (seed > 0) {
    w.push_back(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
    seed >>= 32;
  }
  return w;
}

// numpy.random.SeedSequence(entropy) with no spawn key and the default pool size 4.
class SeedSequence {
 public:
  static constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
  static constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
  static constexpr uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
  static constexpr int kShift = 16;
  static constexpr size_t kPoolSize = 4;

  explicit SeedSequence(uint64_t seed) : SeedSequence(std::span<const uint32_t>(seed_words(seed))) {}

  // Entropy given as 32-bit words, lowest first (a big integer seed split like numpy does).
  explicit SeedSequence(std::span<const uint32_t> entropy) {
    uint32_t hc = kInitA;
    auto hashmix = [&hc](uint32_t v) {
      v ^= hc;
      hc *= kMultA;
      v *= hc;
      v ^= v >> kShift;
      return v;
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t r = kMixMultL * x - kMixMultR * y;
      r ^= r >> kShift;
      return r;
    };
    for (size_t i = 0; i < kPoolSize; ++i) pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0u);
    for (size_t src = 0; src < kPoolSize; ++src)
      for (size_t dst = 0; dst < kPoolSize; ++dst)
        if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src]));
    for (size_t src = kPoolSize; src < entropy.size(); ++src)
      for (size_t dst = 0; dst < kPoolSize; ++dst) pool_[dst] = mix(pool_[dst], hashmix(entropy[src]));
  }

  const std::array<uint32_t, kPoolSize>& pool() const { return pool_; }

  std::vector<uint32_t> generate_state_u32(size_t n_words) const {
    std::vector<uint32_t> out(n_words);
    uint32_t hc = kInitB;
    for (size_t i = 0; i < n_words; ++i) {
      uint32_t v = pool_[i % kPoolSize];
      v ^= hc;
      hc *= kMultB;
      v *= hc;
      v ^= v >> kShift;
      out[i] = v;
    }
    return out;
  }

  // dtype=uint64: twice the 32-bit words, paired little-endian.
  std::vector<uint64_t> generate_state_u64(size_t n_words) const {
    std::vector<uint32_t> w = generate_state_u32(2 * n_words);
    std::vector<uint64_t> out(n_words);
    for (size_t i = 0; i < n_words; ++i) out[i] = uint64_t(w[2 * i]) | (uint64_t(w[2 * i + 1]) << 32);
    return out;
  }

 private:
  std::array<uint32_t, kPoolSize> pool_{};
};

// numpy.random.PCG64: state advances before each output (XSL-RR of the new state);
// next_u32 hands out the low half of a 64-bit draw and keeps the high half for the next call.
class PCG64 {
 public:
  static constexpr u128 kMult = (u128(2549297995355413924ull) << 64) | u128(4865540595714422341ull);

  explicit PCG64(uint64_t seed) : PCG64(SeedSequence(seed)) {}

  explicit PCG64(const SeedSequence& ss) {
    std::vector<uint64_t> v = ss.generate_state_u64(4);
    seed((u128(v[0]) << 64) | v[1], (u128(v[2]) << 64) | v[3]);
  }

  // pcg_setseq_128_srandom_r: inc = seq·2+1; step; state += initstate; step.
  void seed(u128 initstate, u128 initseq) {
    state_ = 0;
    inc_ = (initseq << 1) | 1u;
    step();
    state_ += initstate;
    step();
    has_u32_ = false;
    u32_ = 0;
  }

  uint64_t next_u64() {
    step();
    uint64_t x = uint64_t(state_ >> 64) ^ uint64_t(state_);
    unsigned rot = unsigned(state_ >> 122);
    return (x >> rot) | (x << ((64u - rot) & 63u));
  }

  uint32_t next_u32() {
    if (has_u32_) {
      has_u32_ = false;
      return u32_;
    }
    uint64_t v = next_u64();
    has_u32_ = true;
    u32_ = uint32_t(v >> 32);
    return uint32_t(v & 0xFFFFFFFFu);
  }

  u128 state() const { return state_; }
  u128 inc() const { return inc_; }

 private:
  void step() { state_ = state_ * kMult + inc_; }

  u128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

// numpy's bounded_lemire_uint64 (rng < 2^64-1).
inline uint64_t bounded_lemire_u64(PCG64& g, uint64_t rng) {
  const uint64_t rng_excl = rng + 1;
  u128 m = u128(g.next_u64()) * rng_excl;
  uint64_t leftover = uint64_t(m);
  if (leftover < rng_excl) {
    const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = u128(g.next_u64()) * rng_excl;
      leftover = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

// numpy's buffered_bounded_lemire_uint32 (rng < 2^32-1).
inline uint32_t bounded_lemire_u32(PCG64& g, uint32_t rng) {
  const uint32_t rng_excl = rng + 1;
  uint64_t m = uint64_t(g.next_u32()) * rng_excl;
  uint32_t leftover = uint32_t(m);
  if (leftover < rng_excl) {
    const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
    while (leftover < threshold) {
      m = uint64_t(g.next_u32()) * rng_excl;
      leftover = uint32_t(m);
    }
  }
  return uint32_t(m >> 32);
}

// random_bounded_uint64_fill with use_masked=false: out[i] = off + uniform in [0, rng] (wrapping).
inline void bounded_uint64_fill(PCG64& g, uint64_t off, uint64_t rng, std::span<uint64_t> out) {
  if (rng == 0) {
    for (auto& o : out) o = off;
  } else if (rng <= 0xFFFFFFFFull) {
    if (rng == 0xFFFFFFFFull) {
      for (auto& o : out) o = off + g.next_u32();
    } else {
      for (auto& o : out) o = off + bounded_lemire_u32(g, uint32_t(rng));
    }
  } else if (rng == UINT64_MAX) {
    for (auto& o : out) o = off + g.next_u64();
  } else {
    for (auto& o : out) o = off + bounded_lemire_u64(g, rng);
  }
}

// Generator.integers(low, high, n, dtype=int64) with high exclusive, drawn from g.
inline Result<std::vector<int64_t>> integers(PCG64& g, int64_t low, int64_t high, size_t n) {
  if (low >= high)
    return error(Code::invalid_argument, "numpy_rng::integers: low " + std::to_string(low) +
                                             " >= high " + std::to_string(high));
  const uint64_t rng = uint64_t(high) - 1u - uint64_t(low);
  std::vector<uint64_t> u(n);
  bounded_uint64_fill(g, uint64_t(low), rng, u);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(u[i]);
  return out;
}

// numpy.random.default_rng(seed).integers(low, high, n, dtype=np.int64).
inline Result<std::vector<int64_t>> integers(uint64_t seed, int64_t low, int64_t high, size_t n) {
  PCG64 g(seed);
  return integers(g, low, high, n);
}

}  // namespace dsv41::engram::numpy_rng
