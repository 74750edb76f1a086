// CPU building blocks against direct evaluations of SPEC §3–4 (double precision where it matters).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include <dsv41/backend/cpu/csa2_ops.hpp>
#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/numeric/quant.hpp>

using namespace dsv41;
using namespace dsv41::cpu;

namespace {
std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = num::round_bf16(d(g));
  return v;
}
}  // namespace

TEST_CASE("RMSNorm rounds once, after the weight", "[ops]") {
  const int n = 64;
  auto x = randn(n, 1), w = randn(n, 2);
  std::vector<float> y(n);
  rmsnorm(x.data(), w.data(), 1, n, 1e-20f, y.data());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double rs = 1.0 / std::sqrt(ss / n + 1e-20);
  for (int i = 0; i < n; ++i) {
    const double exact = double(w[i]) * (double(x[i]) * rs);
    CHECK(y[i] == num::round_bf16(y[i]));                                  // a BF16 value
    CHECK(std::fabs(y[i] - exact) <= std::ldexp(std::fabs(exact), -8) + 1e-30);  // within half a BF16 ulp (+fp32 noise)
  }
}

TEST_CASE("sum_squares: the reference CPU run's summation order, close to the exact sum", "[ops]") {
  // 8 lanes: x[1]² and x[9]² meet in lane 1 first (1 + 1 = 2), then 2^24 + 2 is exact; a sequential sum
  // would lose both ones against 2^24.
  std::vector<float> x(16, 0.f);
  x[0] = 4096.f, x[1] = 1.f, x[9] = 1.f;
  CHECK(sum_squares(x.data(), 16) == 16777218.f);
  float seq = 0.f;
  for (float v : x) seq += v * v;
  CHECK(seq == 16777216.f);
  for (int n : {1, 7, 8, 64, 100, 512, 1000, 4096, 16384}) {  // tails, one level, several levels
    auto r = randn(size_t(n), uint32_t(n));
    double exact = 0;
    for (float v : r) exact += double(v) * v;
    CHECK(std::fabs(sum_squares(r.data(), n) - exact) <= 1e-6 * exact);
  }
}

TEST_CASE("RoPE: YaRN frequencies and rotation", "[ops]") {
  // Without YaRN: f_i = θ^(−2i/r).
  auto t = RopeTable::make(16, 10000.0, false, 4, 32, 1, 32);
  for (int i = 0; i < 8; ++i) CHECK(t.freqs[i] == Approx(std::pow(10000.0, -2.0 * i / 16)).epsilon(1e-6));
  // With YaRN (tiny-ced: θ 40000, factor 4, original 32): low = max(floor(corr(32)),0), high = min(ceil(corr(1)), 15).
  auto y = RopeTable::make(16, 40000.0, true, 4, 32, 1, 32);
  auto corr = [](double rot) { return 16 * std::log(32 / (rot * 2 * M_PI)) / (2 * std::log(40000.0)); };
  const double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), 15.0);
  for (int i = 0; i < 8; ++i) {
    const double f = std::pow(40000.0, -2.0 * i / 16);
    const double ramp = std::clamp((i - low) / std::max(high - low, 1e-3), 0.0, 1.0);
    CHECK(y.freqs[i] == Approx(f / 4 * ramp + f * (1 - ramp)).epsilon(1e-6));
  }
  // Rotation then inverse rotation returns the vector (up to BF16 rounding of each step).
  auto v = randn(64, 3);
  auto w = v;
  y.apply(w.data(), 64, 1234);
  for (int i = 0; i < 48; ++i) CHECK(w[i] == v[i]);  // only the trailing 16 channels rotate
  y.apply(w.data(), 64, 1234, true);
  for (int i = 48; i < 64; ++i) CHECK(w[i] == Approx(v[i]).margin(0.02));
}

TEST_CASE("FP8 activation quant: power-of-two scale per 32, values on the E4M3 grid", "[ops]") {
  auto x = randn(128, 4, 3.f);
  x[5] = 0.f;
  auto q = x;
  uint8_t codes[128], exps[4];
  num::fp8_quant_block32(q.data(), 128, codes, exps);
  for (int b = 0; b < 4; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float s = num::ue8m0_to_f32(exps[b]);
    CHECK(s == std::exp2(std::ceil(std::log2(std::max(amax, 1e-4f) / 448.f))));
    for (int i = 0; i < 32; ++i) {
      CHECK(q[b * 32 + i] == num::e4m3_to_f32(codes[b * 32 + i]) * s);
      CHECK(std::fabs(q[b * 32 + i] - x[b * 32 + i]) <= s * 32.f);  // within one E4M3 step at the top binade
    }
  }
  CHECK(q[5] == 0.f);
}

TEST_CASE("cache entries pack losslessly at SPEC §6 sizes", "[ops]") {
  STATIC_REQUIRE(num::main_entry_size(512) == 288);
  STATIC_REQUIRE(num::index_entry_size(128) == 68);
  STATIC_REQUIRE(num::window_entry_size(512) == 528);
  auto x = randn(512, 5, 2.f);
  std::vector<uint8_t> buf(528);
  std::vector<float> back(512);
  auto a = x;
  num::pack_window_entry(a.data(), 512, buf.data());
  num::unpack_window_entry(buf.data(), 512, back.data());
  CHECK(back == a);
  auto b = x;
  num::pack_main_entry(b.data(), 512, buf.data());
  num::unpack_main_entry(buf.data(), 512, back.data());
  CHECK(back == b);
  auto k = randn(128, 6);
  std::vector<float> kb(128);
  num::pack_index_entry(k.data(), 128, buf.data());
  num::unpack_index_entry(buf.data(), 128, kb.data());
  CHECK(kb == k);
  // E2M1 ties go to the even code (SPEC §3.3).
  std::vector<float> ties = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, 6.f};
  ties.resize(32, 0.f);
  ties[31] = 6.f;  // amax 6 → scale 1
  num::fp4_quant_block32(ties.data(), 32);
  CHECK(ties[0] == 0.f);
  CHECK(ties[1] == 1.f);
  CHECK(ties[2] == 1.f);
  CHECK(ties[3] == 2.f);
  CHECK(ties[4] == 2.f);
  CHECK(ties[5] == 4.f);
  CHECK(ties[6] == 4.f);
}

TEST_CASE("sparse attention with sink equals the direct formula", "[ops]") {
  const int H = 3, D = 32, n = 5;
  auto q = randn(size_t(H) * D, 7, 0.5f);
  std::vector<std::vector<float>> e;
  std::vector<const float*> ptrs;
  for (int j = 0; j < n; ++j) e.push_back(randn(D, 10 + j));
  for (auto& v : e) ptrs.push_back(v.data());
  std::vector<float> sink = {0.5f, -1.f, 2.f}, out(size_t(H) * D);
  const float scale = 1.f / std::sqrt(float(D));
  sparse_attention(q.data(), H, D, ptrs, sink.data(), scale, out.data());
  for (int h = 0; h < H; ++h) {
    std::vector<double> s(n);
    double m = -INFINITY;
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int i = 0; i < D; ++i) acc += double(q[h * D + i]) * e[j][i];
      s[j] = acc * scale;
      m = std::max(m, s[j]);
    }
    double den = std::exp(sink[h] - m);
    for (int j = 0; j < n; ++j) den += std::exp(s[j] - m);
    for (int i = 0; i < D; ++i) {
      double num = 0;
      for (int j = 0; j < n; ++j) num += double(num::round_bf16(float(std::exp(s[j] - m)))) * e[j][i];
      CHECK(out[h * D + i] == Approx(num / den).margin(1e-2 * std::fabs(num / den) + 1e-6));
    }
  }
  std::vector<const float*> none;
  sparse_attention(q.data(), H, D, none, sink.data(), scale, out.data());
  for (float v : out) CHECK(v == 0.f);
}

TEST_CASE("mHC: Sinkhorn makes comb doubly stochastic; pre and post are in range", "[ops]") {
  const int hc = 4, d = 32;
  HcWeights w{randn(size_t(24) * hc * d, 20, 0.1f), randn(24, 21), {1.f, 1.f, 1.f}};
  auto H = randn(size_t(hc) * d, 22);
  auto mix = hc_mixes(H.data(), hc, d, w, 1e-20f, 20, 1e-6f);
  for (int j = 0; j < hc; ++j) {
    CHECK(mix.pre[j] > 0.f);
    CHECK(mix.pre[j] <= 1.f + 1e-6f);
    CHECK(mix.post[j] >= 0.f);
    CHECK(mix.post[j] <= 2.f);
    double row = 0, col = 0;
    for (int k = 0; k < hc; ++k) { row += mix.comb[j * hc + k]; col += mix.comb[k * hc + j]; }
    CHECK(row == Approx(1.0).margin(1e-3));
    CHECK(col == Approx(1.0).margin(1e-5));
  }
}

TEST_CASE("MoE routing: the bias picks, the raw scores weigh", "[ops]") {
  std::vector<float> logits = {0.f, 1.f, 2.f, -1.f};
  std::vector<float> bias = {10.f, 0.f, 0.f, 0.f};  // forces expert 0 in
  int sel[2];
  float w[2];
  route(logits.data(), bias.data(), 4, 2, true, 1.5f, sel, w);
  CHECK(sel[0] == 0);
  CHECK(sel[1] == 2);
  const double s0 = std::sqrt(std::log1p(std::exp(0.0))), s2 = std::sqrt(std::log1p(std::exp(2.0)));
  CHECK(w[0] == Approx(s0 / (s0 + s2) * 1.5));
  CHECK(w[1] == Approx(s2 / (s0 + s2) * 1.5));
  // Equal scores: the lower expert id wins.
  std::vector<float> flat(4, 0.5f), zero(4, 0.f);
  route(flat.data(), zero.data(), 4, 2, true, 1.f, sel, w);
  CHECK(sel[0] == 0);
  CHECK(sel[1] == 1);
}

TEST_CASE("top-k: finite picks only, ascending, ties to the lower index", "[ops]") {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {1.f, 3.f, 3.f, -inf, 2.f, -inf};
  CHECK(topk_row(s.data(), 6, 3) == std::vector<int32_t>{1, 2, 4});
  CHECK(topk_row(s.data(), 6, 6) == std::vector<int32_t>{0, 1, 2, 4});
  CHECK(topk_row(s.data(), 6, 1) == std::vector<int32_t>{1});
  CHECK(topk_row(s.data(), 0, 3).empty());
}

TEST_CASE("candidate blocks: best entry per block, newest block pinned", "[ops]") {
  const float inf = std::numeric_limits<float>::infinity();
  // 10 visible entries of 12, blocks of 4: block maxima 0.9, 0.1, (pinned), nothing past.
  std::vector<float> s = {0.9f, 0.f, 0.f, 0.f, 0.1f, 0.f, 0.f, 0.f, -5.f, -5.f, -inf, -inf};
  auto m = candidate_mask(s.data(), 12, 10, 2, 4);
  REQUIRE(m.size() == 10);
  for (int j = 0; j < 4; ++j) CHECK(m[j] == 1);
  for (int j = 4; j < 8; ++j) CHECK(m[j] == 0);
  for (int j = 8; j < 10; ++j) CHECK(m[j] == 1);  // the newest block, pinned although it scores lowest
  auto none = candidate_mask(s.data(), 12, 0, 2, 4);
  CHECK(none.empty());
}
