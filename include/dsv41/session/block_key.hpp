// What names a stored block of a session (SPEC §6 caches between requests): a chained 128-bit key over the parent
// block's key, the model's identity (config, weights, cache format) and the block's token ids, so a block is only
// ever found by the same prefix of the same model. Needs xxhash.h (Debian: libxxhash-dev), used header-only.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

namespace dsv41::session {

// Bumped whenever the bytes a block stores change meaning; a block of another version is a miss.
inline constexpr uint32_t kCacheFormatVersion = 1;

struct Key {
  uint64_t hi = 0, lo = 0;
  friend bool operator==(const Key&, const Key&) = default;
  bool empty() const { return hi == 0 && lo == 0; }
  std::string hex() const {
    char b[33];
    std::snprintf(b, sizeof b, "%016llx%016llx", (unsigned long long)hi, (unsigned long long)lo);
    return b;
  }
  static std::optional<Key> from_hex(std::string_view s) {
    if (s.size() != 32) return std::nullopt;
    Key k;
    for (size_t i = 0; i < 32; ++i) {
      const char c = s[i];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (v < 0) return std::nullopt;
      uint64_t& w = i < 16 ? k.hi : k.lo;
      w = (w << 4) | uint64_t(v);
    }
    return k;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return size_t(k.hi ^ (k.lo * 0x9E3779B97F4A7C15ull)); }
};

// The model a block belongs to: digests of its config.json and weights, and the cache format.
struct ModelIdentity {
  uint64_t config_digest = 0, weights_digest = 0;
  uint32_t format_version = kCacheFormatVersion;
  friend bool operator==(const ModelIdentity&, const ModelIdentity&) = default;
};

// The key of a block: XXH3-128 over (parent key, identity, the block's token ids).
inline Key block_key(const Key& parent, const ModelIdentity& id, std::span<const int32_t> tokens) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  const uint64_t head[5] = {parent.hi, parent.lo, id.config_digest, id.weights_digest, id.format_version};
  XXH3_128bits_update(&st, head, sizeof head);
  XXH3_128bits_update(&st, tokens.data(), tokens.size() * sizeof(int32_t));
  const XXH128_hash_t h = XXH3_128bits_digest(&st);
  return Key{h.high64, h.low64};
}

// 64-bit checksum of bytes (block payloads on disk and in pools).
inline uint64_t checksum(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

// An injectable clock: seconds since the epoch. Tests set now to a function of their own to expire things.
struct Clock {
  double (*now)(void* ctx) = nullptr;
  void* ctx = nullptr;
  double operator()() const {
    if (now) return now(ctx);
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
};

}  // namespace dsv41::session
