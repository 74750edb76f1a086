// Log-probabilities of a returned token (OpenAI's logprobs / top_logprobs): log_softmax of the raw logits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <dsv41/runtime/engine_types.hpp>

namespace dsv41 {

// log_softmax(logits)[token] and the top n (n <= kMaxTopLogprobs), in FP64 (NaN counts as −inf; all −inf gives
// −inf everywhere). ids/vals hold the top list the result's spans point to.
inline TokenLogprobs logprobs_of(std::span<const float> logits, int32_t token, int n, std::vector<int32_t>& ids,
                                 std::vector<float>& vals) {
  constexpr double ninf = -std::numeric_limits<double>::infinity();
  auto at = [&](size_t i) { return std::isnan(logits[i]) ? ninf : double(logits[i]); };
  double mx = ninf;
  for (size_t i = 0; i < logits.size(); ++i) mx = std::max(mx, at(i));
  double sum = 0;
  if (mx != ninf)
    for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(at(i) - mx);
  const double lse = mx == ninf ? ninf : mx + std::log(sum);
  auto lp = [&](size_t i) { return mx == ninf ? ninf : at(i) - lse; };
  TokenLogprobs r;
  r.token = token;
  r.logprob = token >= 0 && size_t(token) < logits.size() ? float(lp(size_t(token))) : float(ninf);
  n = std::clamp(n, 0, std::min(kMaxTopLogprobs, int(logits.size())));
  ids.clear();
  vals.clear();
  if (n > 0) {
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      const double x = at(size_t(a)), y = at(size_t(b));
      return x > y || (x == y && a < b);
    });
    for (int k = 0; k < n; ++k) {
      ids.push_back(order[size_t(k)]);
      vals.push_back(float(lp(size_t(order[size_t(k)]))));
    }
  }
  r.top_ids = ids;
  r.top_logprobs = vals;
  return r;
}

}  // namespace dsv41
