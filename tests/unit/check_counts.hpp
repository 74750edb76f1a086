// A statistical check shared by the sampling tests: observed counts against cell probabilities.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

namespace dsv41::test {

// Pearson's statistic over cells with expected count > 0; a count in a zero cell fails outright.
// The bound is the chi-square mean df plus 6 standard deviations sqrt(2 df) (normal approximation),
// and each cell must also lie within 6 binomial standard deviations (+1 for the discreteness).
inline void check_counts(const std::vector<int64_t>& count, const std::vector<double>& prob, int64_t n) {
  double x2 = 0;
  int df = -1;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double e = double(n) * prob[i];
    INFO("cell " << i << " count " << count[i] << " expected " << e);
    if (prob[i] <= 0) {
      REQUIRE(count[i] == 0);
      continue;
    }
    ++df;
    x2 += (double(count[i]) - e) * (double(count[i]) - e) / e;
    CHECK(std::fabs(double(count[i]) - e) <= 6.0 * std::sqrt(e * (1 - prob[i])) + 1.0);
  }
  if (df > 0) {
    INFO("chi2 " << x2 << " df " << df);
    CHECK(x2 <= df + 6.0 * std::sqrt(2.0 * df));
  }
}

}  // namespace dsv41::test
