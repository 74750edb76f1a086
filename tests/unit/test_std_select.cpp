// Host check: the GPU's restatement of libstdc++'s nth_element / partial_sort (cuda/std_select.hpp), which
// the candidate mask needs to break exact ties as cpu::candidate_mask does, matches the real std::
// functions element for element on tie-heavy rows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <dsv41/backend/cuda/kernels/std_select.hpp>

TEST_CASE("std_select reproduces std::nth_element and std::partial_sort", "[select]") {
  using dsv41::gpu::stdsel::Pair;
  std::mt19937_64 rng(7);
  auto greater = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  int differ = 0;
  for (int it = 0; it < 20000; ++it) {
    const int nb = 1 + int(rng() % (it < 10000 ? 40 : 3000));
    const int topk = 1 + int(rng() % (it % 3 == 0 ? 4 : 200));
    const int levels = 1 + int(rng() % 6);
    std::vector<std::pair<float, int>> a(static_cast<size_t>(nb));
    std::vector<Pair> b(static_cast<size_t>(nb));
    for (int i = 0; i < nb; ++i) {
      float v = float(rng() % levels);
      if (rng() % 17 == 0) v = -std::numeric_limits<float>::infinity();
      a[i] = {v, i};
    }
    if (rng() % 2) a[rng() % nb].first = std::numeric_limits<float>::infinity();
    for (int i = 0; i < nb; ++i) b[i] = {a[i].first, a[i].second};
    const int k = std::min(topk, nb);
    if (int64_t(k) * 64 <= nb) std::partial_sort(a.begin(), a.begin() + k, a.end(), greater);
    else std::nth_element(a.begin(), a.begin() + (k - 1), a.end(), greater);
    dsv41::gpu::stdsel::select_blocks(b.data(), nb, topk);
    for (int i = 0; i < nb; ++i)
      if (a[i].second != b[i].second) { ++differ; break; }
  }
  CHECK(differ == 0);
}
