// Token sampling (dsv41::Sampler, probabilities(), SPEC §4.9): greedy, seeds, temperature, top-k,
// top-p and min-p, and the draws against the distribution they claim.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include <dsv41/runtime/sampler.hpp>

#include "check_counts.hpp"

using namespace dsv41;
using dsv41::test::check_counts;

namespace {


const std::vector<float> kLogits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.2f, -3.0f};

}  // namespace

TEST_CASE("sampler: the same seed gives the same tokens; greedy is the argmax", "[sampler]") {
  SamplingParams p;
  p.temperature = 0.9f;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const int32_t x = a.sample(kLogits), y = b.sample(kLogits), z = c.sample(kLogits);
    REQUIRE(x == y);
    differ += x != z;
  }
  CHECK(differ > 100);

  Sampler g(SamplingParams{});
  CHECK(g.greedy());
  CHECK(g.sample(kLogits) == 4);
  const std::vector<float> tie = {0.f, 3.f, 3.f, std::nanf("")};
  CHECK(g.sample(tie) == 1);
  const auto one = probabilities(tie, SamplingParams{});
  CHECK(one == std::vector<double>{0, 1, 0, 0});
}

TEST_CASE("sampler: draws follow probabilities()", "[sampler]") {
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 7;
  const auto prob = probabilities(kLogits, p);
  double sum = 0;
  for (float l : kLogits) sum += std::exp((l - 2.0) / 0.7);
  for (size_t v = 0; v < prob.size(); ++v) CHECK(prob[v] == Approx(std::exp((kLogits[v] - 2.0) / 0.7) / sum));
  const int64_t n = 200000;
  Sampler s(p);
  std::vector<int64_t> count(kLogits.size(), 0);
  for (int64_t i = 0; i < n; ++i) ++count[size_t(s.sample(kLogits))];
  check_counts(count, prob, n);

  // A filtered distribution draws only from its support, in proportion.
  p.top_k = 3;
  p.seed = 8;
  const auto probk = probabilities(kLogits, p);
  Sampler sk(p);
  std::fill(count.begin(), count.end(), 0);
  for (int64_t i = 0; i < n / 4; ++i) ++count[size_t(sk.sample(kLogits))];
  check_counts(count, probk, n / 4);
}

TEST_CASE("sampler: top-k, top-p and min-p masks", "[sampler]") {
  // T = 1 on log-probabilities reproduces them.
  const std::vector<double> base = {0.05, 0.5, 0.15, 0.3};
  std::vector<float> lg;
  for (double b : base) lg.push_back(float(std::log(b)));
  auto support = [](const std::vector<double>& p) {
    std::vector<int> s;
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] > 0) s.push_back(int(i));
    return s;
  };
  auto sums_to_one = [](const std::vector<double>& p) { return std::accumulate(p.begin(), p.end(), 0.0) == Approx(1.0); };
  SamplingParams p;
  p.temperature = 1.f;
  auto all = probabilities(lg, p);
  for (size_t i = 0; i < base.size(); ++i) CHECK(all[i] == Approx(base[i]).epsilon(1e-6));

  p.top_k = 2;
  auto k2 = probabilities(lg, p);
  CHECK(support(k2) == std::vector<int>{1, 3});
  CHECK(k2[1] == Approx(0.5 / 0.8).epsilon(1e-6));
  CHECK(sums_to_one(k2));
  p.top_k = 4;
  CHECK(support(probabilities(lg, p)) == std::vector<int>{0, 1, 2, 3});
  p.top_k = 0;

  p.top_p = 0.75f;  // 0.5 + 0.3 reaches it
  auto tp = probabilities(lg, p);
  CHECK(support(tp) == std::vector<int>{1, 3});
  CHECK(sums_to_one(tp));
  p.top_p = 0.45f;  // the top token alone
  CHECK(support(probabilities(lg, p)) == std::vector<int>{1});
  p.top_p = 0.85f;
  CHECK(support(probabilities(lg, p)) == std::vector<int>{1, 2, 3});
  p.top_p = 1.f;

  p.min_p = 0.2f;  // threshold 0.1: drops 0.05
  auto mp = probabilities(lg, p);
  CHECK(support(mp) == std::vector<int>{1, 2, 3});
  CHECK(mp[2] == Approx(0.15 / 0.95).epsilon(1e-6));
  p.min_p = 0.7f;  // threshold 0.35
  CHECK(support(probabilities(lg, p)) == std::vector<int>{1});
  p.min_p = 0.f;

  // Applied in order on the renormalized result: top-k 3 → {1, 3, 2}; top-p 0.6 of 0.5/0.95 → {1, 3}.
  p.top_k = 3;
  p.top_p = 0.6f;
  CHECK(support(probabilities(lg, p)) == std::vector<int>{1, 3});
  // top-k ties go to the lower id.
  const std::vector<float> eq = {1.f, 2.f, 2.f, 2.f};
  SamplingParams q;
  q.temperature = 1.f;
  q.top_k = 2;
  CHECK(support(probabilities(eq, q)) == std::vector<int>{1, 2});

  SamplingParams bad;
  bad.top_p = 0.f;
  CHECK(validate(bad).code() == Code::invalid_argument);
  bad = {};
  bad.min_p = 1.5f;
  CHECK(validate(bad).code() == Code::invalid_argument);
  bad = {};
  bad.top_k = -1;
  CHECK(validate(bad).code() == Code::invalid_argument);
  CHECK(validate(SamplingParams{}).ok());
}

TEST_CASE("sampler: temperature <= 0 is greedy and draws no random numbers", "[sampler]") {
  for (float t : {0.f, -1.f, -0.f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 99;
    p.top_p = 0.1f;  // filters do not apply to greedy
    p.min_p = 0.9f;
    Sampler s(p), fresh(p);
    CHECK(s.greedy());
    for (int i = 0; i < 5; ++i) CHECK(s.sample(kLogits) == 4);
    CHECK(s.uniform() == fresh.uniform());  // the generator did not move
    const auto one = probabilities(kLogits, p);
    CHECK(one == std::vector<double>{0, 0, 0, 0, 1, 0, 0, 0});
  }
  // A non-finite maximum gives the argmax one-hot even when sampling.
  SamplingParams p;
  p.temperature = 1.f;
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(probabilities(std::vector<float>{0.f, inf, 1.f}, p) == std::vector<double>{0, 1, 0});
  CHECK(probabilities(std::vector<float>{-inf, -inf}, p) == std::vector<double>{1, 0});
  CHECK(argmax(std::vector<float>{std::nanf(""), std::nanf("")}) == 0);
  CHECK(argmax(std::vector<float>{std::nanf(""), -5.f, -1.f}) == 2);
  CHECK(validate(SamplingParams{.temperature = std::nanf("")}).code() == Code::invalid_argument);
}

TEST_CASE("sampler: top_k = 1 equals greedy for any seed", "[sampler]") {
  const std::vector<std::vector<float>> rows = {kLogits, {0.f, 0.f, 0.1f}, {-3.f, 5.f, 4.99f, 5.f}};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.top_k = 1;
    p.seed = seed;
    Sampler s(p);
    for (const auto& r : rows) CHECK(s.sample(r) == argmax(r));
  }
}

TEST_CASE("sampler: draw() is inverse CDF over positive weights", "[sampler]") {
  SamplingParams p;
  p.temperature = 1.f;
  p.seed = 5;
  Sampler s(p), twin(p);
  const std::vector<double> w = {0.0, 2.0, -1.0, 0.0, 6.0};  // zero and negative weights never drawn
  int n1 = 0, n4 = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t a = s.draw(w);
    CHECK(a == twin.draw(w));  // same seed, same draws
    REQUIRE((a == 1 || a == 4));
    (a == 1 ? n1 : n4)++;
  }
  CHECK(std::fabs(n1 / 4000.0 - 0.25) < 0.05);  // 2 / (2 + 6)
  CHECK(s.draw(std::vector<double>{0.0, -1.0}) == 0);  // no positive weight
  // SplitMix64 from state 0: the published first output.
  SplitMix64 g;
  CHECK(g.next() == 0xe220a8397b1dcdafull);
  for (int i = 0; i < 1000; ++i) {
    const double u = g.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
}
