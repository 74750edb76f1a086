// Engram n-gram hashing (SPEC §4.8): per-layer multipliers from numpy's RNG, prime bucket sizes,
// and the table row ids of every position.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/engram/numpy_rng.hpp>

namespace dsv41::engram {

namespace detail {
inline uint64_t mulmod_u64(uint64_t a, uint64_t b, uint64_t m) {
  return uint64_t((numpy_rng::u128(a) * b) % m);
}
inline uint64_t powmod_u64(uint64_t b, uint64_t e, uint64_t m) {
  uint64_t r = 1 % m;
  b %= m;
  while (e) {
    if (e & 1) r = mulmod_u64(r, b, m);
    b = mulmod_u64(b, b, m);
    e >>= 1;
  }
  return r;
}
}  // namespace detail

// Deterministic Miller-Rabin: the first 12 prime bases are exact for every n < 3.3e24.
inline bool is_prime_u64(uint64_t n) {
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  if (n < 2) return false;
  for (uint64_t p : kBases) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int r = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++r;
  }
  for (uint64_t a : kBases) {
    uint64_t x = detail::powmod_u64(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < r; ++i) {
      x = detail::mulmod_u64(x, x, n);
      if (x == n - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

// Config values the plan is built from (config.json keys in comments).
struct HashParams {
  std::vector<int64_t> layer_ids;        // engram_layer_ids
  int64_t max_ngram_size = 0;            // engram_max_ngram_size, N >= 2 (n-grams 2..N)
  int64_t n_heads = 0;                   // engram_n_heads
  int64_t vocab_start = 0;               // engram_vocab_size: primes are searched from here
  int64_t compressed_vocab_size = 0;     // engram_compressed_vocab_size
  int64_t pad_compressed_id = 0;         // token_map[engram_pad_token_id]
  std::vector<int64_t> num_embeddings;   // engram_num_embeddings, checked against the primes
};

struct LayerHash {
  int64_t layer_id = 0;
  std::vector<int64_t> multipliers;  // [N]: m_s for look-back s
  std::vector<int64_t> primes;       // [(N-1)·heads]: index (n-2)·heads + j
  std::vector<int64_t> offsets;      // [(N-1)·heads]: exclusive prefix sum of primes
  int64_t rows = 0;                  // sum of primes = table rows
  int64_t prime(int64_t n, int64_t head, int64_t heads) const { return primes[size_t((n - 2) * heads + head)]; }
};

struct HashPlan {
  int64_t max_ngram_size = 0;
  int64_t n_heads = 0;
  int64_t compressed_vocab_size = 0;
  int64_t pad_id = 0;  // compressed id used where there is no (usable) history
  std::vector<LayerHash> layers;
  int64_t cols() const { return (max_ngram_size - 1) * n_heads; }
  int64_t n_layers() const { return int64_t(layers.size()); }
  int64_t history_size() const { return max_ngram_size - 1; }  // raw ids decode must keep
};

// m_s = 2·x_s + 1, x = default_rng(10007·layer_id).integers(0, bound, N), bound from the vocab.
inline Result<std::vector<int64_t>> hash_multipliers(int64_t layer_id, int64_t max_ngram_size,
                                                     int64_t compressed_vocab_size) {
  if (layer_id < 0 || layer_id > std::numeric_limits<int64_t>::max() / 10007)
    return error(Code::invalid_argument, "engram: layer id " + std::to_string(layer_id) + " out of range");
  if (compressed_vocab_size <= 0 || max_ngram_size < 1)
    return error(Code::invalid_argument, "engram: compressed vocab size and N must be positive");
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
  auto x = numpy_rng::integers(uint64_t(10007 * layer_id), 0, bound, size_t(max_ngram_size));
  if (!x) return x.status();
  std::vector<int64_t> m = std::move(x).value();
  for (auto& v : m) v = 2 * v + 1;  // v < bound <= INT64_MAX/2: no overflow
  return m;
}

inline Result<HashPlan> make_plan(const HashParams& p) {
  if (p.max_ngram_size < 2)
    return error(Code::invalid_argument, "engram: max_ngram_size must be >= 2, got " + std::to_string(p.max_ngram_size));
  if (p.n_heads < 1) return error(Code::invalid_argument, "engram: n_heads must be >= 1");
  if (p.vocab_start < 0 || p.vocab_start > (int64_t(1) << 62))
    return error(Code::invalid_argument, "engram: engram_vocab_size out of range: " + std::to_string(p.vocab_start));
  if (p.compressed_vocab_size <= 0)
    return error(Code::invalid_argument, "engram: engram_compressed_vocab_size must be positive");
  if (p.pad_compressed_id < 0 || p.pad_compressed_id >= p.compressed_vocab_size)
    return error(Code::invalid_argument, "engram: pad compressed id " + std::to_string(p.pad_compressed_id) +
                                             " outside [0, " + std::to_string(p.compressed_vocab_size) + ")");
  if (p.num_embeddings.size() != p.layer_ids.size())
    return error(Code::mismatch, "engram: " + std::to_string(p.num_embeddings.size()) +
                                     " engram_num_embeddings for " + std::to_string(p.layer_ids.size()) + " layers");
  HashPlan plan;
  plan.max_ngram_size = p.max_ngram_size;
  plan.n_heads = p.n_heads;
  plan.compressed_vocab_size = p.compressed_vocab_size;
  plan.pad_id = p.pad_compressed_id;
  std::unordered_set<int64_t> seen;  // primes are never reused, across all layers
  for (size_t li = 0; li < p.layer_ids.size(); ++li) {
    LayerHash L;
    L.layer_id = p.layer_ids[li];
    auto m = hash_multipliers(L.layer_id, p.max_ngram_size, p.compressed_vocab_size);
    if (!m) return m.status();
    L.multipliers = std::move(m).value();
    for (int64_t n = 2; n <= p.max_ngram_size; ++n) {
      int64_t cur = p.vocab_start - 1;
      for (int64_t j = 0; j < p.n_heads; ++j) {
        int64_t c = cur + 1;
        while (!is_prime_u64(uint64_t(c)) || seen.count(c)) ++c;
        seen.insert(c);
        cur = c;
        L.offsets.push_back(L.rows);
        L.primes.push_back(c);
        L.rows += c;
      }
    }
    if (L.rows != p.num_embeddings[li])
      return error(Code::mismatch, "engram: layer " + std::to_string(L.layer_id) + " hashes into " +
                                       std::to_string(L.rows) + " rows but engram_num_embeddings[" +
                                       std::to_string(li) + "] is " + std::to_string(p.num_embeddings[li]));
    plan.layers.push_back(std::move(L));
  }
  return plan;
}

// Every token_map value lies in [0, compressed_vocab_size) and every compressed id is used.
inline Status check_token_map(const HashPlan& plan, std::span<const int32_t> token_map) {
  std::vector<char> used(size_t(plan.compressed_vocab_size), 0);
  for (size_t i = 0; i < token_map.size(); ++i) {
    const int32_t c = token_map[i];
    if (c < 0 || c >= plan.compressed_vocab_size)
      return error(Code::format_error, "engram: token_map[" + std::to_string(i) + "] = " + std::to_string(c) +
                                           " outside [0, " + std::to_string(plan.compressed_vocab_size) + ")");
    used[size_t(c)] = 1;
  }
  const auto n_used = std::count(used.begin(), used.end(), char(1));
  if (n_used != plan.compressed_vocab_size)
    return error(Code::mismatch, "engram: token_map uses " + std::to_string(n_used) +
                                     " compressed ids, engram_compressed_vocab_size is " +
                                     std::to_string(plan.compressed_vocab_size));
  return Status::Ok();
}

// Row ids for T positions: out[t][layer][(n-2)·heads + j], offsets included (int64, T·n_layers·cols).
// `ids` are raw token ids; `history` holds up to N-1 raw ids immediately before ids[0], oldest first
// (fewer means the sequence starts right before the history). Look-back stops at the sequence start
// and at an image token (image_token_id; negative = none), the image position included: those
// slots and every farther one take the pad's compressed id. Products and XOR wrap as int64; the
// modulo is floored (torch's %), so the bucket is always in [0, prime).
inline Status hash_ids(const HashPlan& plan, std::span<const int32_t> token_map, int32_t image_token_id,
                       std::span<const int32_t> ids, std::span<const int32_t> history, std::span<int64_t> out) {
  const int64_t N = plan.max_ngram_size, H = plan.n_heads, C = plan.cols(), L = plan.n_layers();
  const size_t T = ids.size();
  if (history.size() > size_t(N - 1))
    return error(Code::invalid_argument, "engram: history of " + std::to_string(history.size()) +
                                             " ids, at most " + std::to_string(N - 1) + " are used");
  if (out.size() != T * size_t(L * C))
    return error(Code::invalid_argument, "engram: output holds " + std::to_string(out.size()) + " ids, need " +
                                             std::to_string(T * size_t(L * C)));
  // Compressed ids of history then ids; -1 marks an image token.
  const size_t Hn = history.size();
  std::vector<int64_t> comp(Hn + T);
  for (size_t i = 0; i < Hn + T; ++i) {
    const int32_t raw = i < Hn ? history[i] : ids[i - Hn];
    if (image_token_id >= 0 && raw == image_token_id) {
      comp[i] = -1;
      continue;
    }
    if (raw < 0 || size_t(raw) >= token_map.size())
      return error(Code::out_of_range, "engram: token id " + std::to_string(raw) + " outside the token map of " +
                                           std::to_string(token_map.size()));
    const int32_t c = token_map[size_t(raw)];
    if (c < 0 || c >= plan.compressed_vocab_size)
      return error(Code::format_error, "engram: token_map[" + std::to_string(raw) + "] = " + std::to_string(c) +
                                           " outside the compressed vocab");
    comp[i] = c;
  }
  std::vector<int64_t> c(static_cast<size_t>(N));
  for (size_t t = 0; t < T; ++t) {
    const size_t pos = Hn + t;  // index into comp
    bool blocked = false;
    for (int64_t s = 0; s < N; ++s) {
      if (!blocked && (size_t(s) > pos || comp[pos - size_t(s)] < 0)) blocked = true;
      c[size_t(s)] = blocked ? plan.pad_id : comp[pos - size_t(s)];
    }
    int64_t* row = out.data() + t * size_t(L * C);
    for (int64_t l = 0; l < L; ++l) {
      const LayerHash& lh = plan.layers[size_t(l)];
      auto wrap_mul = [](int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); };
      int64_t h = wrap_mul(c[0], lh.multipliers[0]);
      for (int64_t n = 2; n <= N; ++n) {
        h ^= wrap_mul(c[size_t(n - 1)], lh.multipliers[size_t(n - 1)]);
        for (int64_t j = 0; j < H; ++j) {
          const size_t k = size_t((n - 2) * H + j);
          const int64_t p = lh.primes[k];
          int64_t r = h % p;
          if (r < 0) r += p;
          row[l * C + int64_t(k)] = r + lh.offsets[k];
        }
      }
    }
  }
  return Status::Ok();
}

inline Result<std::vector<int64_t>> hash_ids(const HashPlan& plan, std::span<const int32_t> token_map,
                                             int32_t image_token_id, std::span<const int32_t> ids,
                                             std::span<const int32_t> history = {}) {
  std::vector<int64_t> out(ids.size() * size_t(plan.n_layers() * plan.cols()));
  Status s = hash_ids(plan, token_map, image_token_id, ids, history, out);
  if (!s.ok()) return s;
  return out;
}

// What a model's Engram layers need besides weights: the token map (token id -> compressed id) and the hash plan
// (empty when the model has no Engram layers).
struct Setup {
  std::vector<int32_t> token_map;
  HashPlan plan;
};

}  // namespace dsv41::engram
