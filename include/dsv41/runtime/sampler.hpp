// Token sampling: temperature, top-k, top-p, min-p, with an explicit 64-bit seed. The sampler owns its
// PRNG (SplitMix64); nothing is global, so the same seed and the same logits give the same tokens.
// probabilities() is the exact distribution sample() draws from; the speculative verifier uses it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <dsv41/core/status.hpp>

namespace dsv41 {

struct SamplingParams {
  float temperature = 0.f;  // <= 0: greedy (argmax, lowest index on ties; draws no random numbers)
  int top_k = 0;            // keep the k most likely tokens (ties toward the lower id); 0 = all
  float top_p = 1.f;        // then the smallest most-likely set holding at least top_p of the mass
  float min_p = 0.f;        // then drop tokens below min_p · (largest probability)
  uint64_t seed = 0;
};

inline Status validate(const SamplingParams& p) {
  if (std::isnan(p.temperature) || std::isinf(p.temperature))
    return error(Code::invalid_argument, "sampling: temperature must be finite");
  if (p.top_k < 0) return error(Code::invalid_argument, "sampling: top_k must be >= 0");
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return error(Code::invalid_argument, "sampling: top_p must be in (0, 1]");
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return error(Code::invalid_argument, "sampling: min_p must be in [0, 1]");
  return Status::Ok();
}

// SplitMix64 (Steele, Lea, Flood 2014): 64-bit state, one add and a mix per number.
struct SplitMix64 {
  uint64_t state = 0;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 bits
};

// First index of the largest logit; NaN never wins; 0 when every entry is NaN.
inline int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  bool found = false;
  for (size_t v = 0; v < logits.size(); ++v)
    if (!std::isnan(logits[v]) && (!found || logits[v] > logits[best])) {
      best = int32_t(v);
      found = true;
    }
  return best;
}

namespace detail {
inline void normalize(std::vector<double>& p) {
  double s = 0;
  for (double x : p) s += x;
  if (s > 0)
    for (double& x : p) x /= s;
}
}  // namespace detail

// The distribution sample() draws from, in out [V]. Steps, each on the previous step's renormalized result:
// softmax(logits / T) in FP64 (NaN logits count as −inf), top-k, top-p, min-p. Greedy (T <= 0), or logits
// whose maximum is not finite: one-hot at argmax.
inline void probabilities(std::span<const float> logits, const SamplingParams& p, std::vector<double>& out) {
  const size_t V = logits.size();
  out.assign(V, 0.0);
  if (V == 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (float x : logits)
    if (x > mx) mx = x;
  if (!(p.temperature > 0.f) || !std::isfinite(mx)) {
    out[size_t(argmax(logits))] = 1.0;
    return;
  }
  const double inv_t = 1.0 / double(p.temperature);
  for (size_t v = 0; v < V; ++v) out[v] = std::isnan(logits[v]) ? 0.0 : std::exp((double(logits[v]) - double(mx)) * inv_t);
  auto more_likely = [&](uint32_t a, uint32_t b) { return out[a] > out[b] || (out[a] == out[b] && a < b); };
  std::vector<uint32_t> idx;
  if (p.top_k > 0 && size_t(p.top_k) < V) {
    idx.resize(V);
    for (size_t v = 0; v < V; ++v) idx[v] = uint32_t(v);
    std::nth_element(idx.begin(), idx.begin() + (p.top_k - 1), idx.end(), more_likely);
    for (size_t i = size_t(p.top_k); i < V; ++i) out[idx[i]] = 0.0;
  }
  detail::normalize(out);
  if (p.top_p < 1.f) {
    idx.clear();
    for (size_t v = 0; v < V; ++v)
      if (out[v] > 0) idx.push_back(uint32_t(v));
    std::sort(idx.begin(), idx.end(), more_likely);
    double cum = 0;
    size_t keep = 0;
    while (keep < idx.size()) {
      cum += out[idx[keep++]];
      if (cum >= double(p.top_p)) break;
    }
    for (size_t i = keep; i < idx.size(); ++i) out[idx[i]] = 0.0;
    detail::normalize(out);
  }
  if (p.min_p > 0.f) {
    const double thr = double(p.min_p) * *std::max_element(out.begin(), out.end());
    for (double& x : out)
      if (x < thr) x = 0.0;
    detail::normalize(out);
  }
}

inline std::vector<double> probabilities(std::span<const float> logits, const SamplingParams& p) {
  std::vector<double> out;
  probabilities(logits, p, out);
  return out;
}

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p) { rng_.state = p.seed; }

  const SamplingParams& params() const { return p_; }
  bool greedy() const { return !(p_.temperature > 0.f); }

  // A token drawn from probabilities(logits, params()); greedy takes the argmax and draws nothing.
  int32_t sample(std::span<const float> logits) {
    if (greedy()) return argmax(logits);
    probabilities(logits, p_, buf_);
    return draw(buf_);
  }

  // A token drawn from weights w (need not sum to 1; the total must be > 0, else 0 is returned).
  // Inverse CDF in id order with one uniform number.
  int32_t draw(std::span<const double> w) {
    double total = 0;
    for (double x : w)
      if (x > 0) total += x;
    if (!(total > 0)) return 0;
    const double u = rng_.uniform() * total;
    double c = 0;
    int32_t last = 0;
    for (size_t v = 0; v < w.size(); ++v)
      if (w[v] > 0) {
        c += w[v];
        last = int32_t(v);
        if (u < c) return last;
      }
    return last;
  }

  double uniform() { return rng_.uniform(); }

 private:
  SamplingParams p_;
  SplitMix64 rng_;
  std::vector<double> buf_;
};

}  // namespace dsv41
