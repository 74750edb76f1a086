// GPU check: the tiled FP32-accumulating GEMM (cuda/gemm_f32.cuh) against the one-warp-per-output kernels it
// replaces from 4 rows on (head: BF16 weights, FP32 out; wo_a: FP8 weights, groups, BF16 out). Both are FP32
// FMA chains in different orders, so |Δ| ≤ 2·K·2⁻²⁴·Σ|a·w| (each sum's error bound), plus one BF16 ulp where
// the output is rounded to BF16.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <dsv41/backend/cuda/kernels/gemm_f32.cuh>
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/backend/cuda/wo_a_blas.hpp>

using namespace dsv41;
using namespace dsv41::gpu;

namespace {
template <class T>
T* dev(const std::vector<T>& h) {
  T* d = nullptr;
  REQUIRE(cudaMalloc(&d, std::max<size_t>(h.size() * sizeof(T), 4)) == cudaSuccess);
  REQUIRE(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return d;
}
template <class T>
std::vector<T> host(const T* d, size_t n) {
  std::vector<T> h(n);
  REQUIRE(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}
}  // namespace

TEST_CASE("tiled FP32 GEMM equals the per-output kernels within the FP32 sum bound", "[gpu][gemm_f32]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  struct Case {
    int M, N, K, G;
    bool fp8;
  };
  int checked = 0;
  for (const Case c : {Case{5, 1000, 512, 1, false}, Case{64, 1030, 640, 1, false}, Case{37, 130, 96, 1, false},
                       Case{64, 1024, 4096, 8, true}, Case{6, 256, 512, 4, true}, Case{20, 64, 128, 2, true}}) {
    const int Kin = c.fp8 ? c.K : c.K, rows_w = c.G * c.N;
    const int64_t lda = int64_t(c.G) * Kin;
    std::vector<uint16_t> a(size_t(c.M) * lda);
    std::vector<float> af(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = num::bf16_bits(nd(rng));
      af[i] = num::bf16_to_f32(a[i]);
    }
    std::vector<uint8_t> w, ws;
    std::vector<float> wf(size_t(rows_w) * Kin);
    const int sb = (Kin + 31) / 32;
    if (c.fp8) {
      w.resize(wf.size());
      ws.resize(size_t((rows_w + 31) / 32) * sb);
      for (auto& s : ws) s = uint8_t(120 + rng() % 6);
      for (size_t i = 0; i < w.size(); ++i) {
        uint8_t code = uint8_t(rng());
        if ((code & 0x7F) == 0x7F) code ^= 1;
        w[i] = code;
        const size_t r = i / Kin, k = i % Kin;
        wf[i] = num::e4m3_to_f32(code) * num::ue8m0_to_f32(ws[(r / 32) * sb + k / 32]);
      }
    } else {
      w.resize(wf.size() * 2);
      for (size_t i = 0; i < wf.size(); ++i) {
        const uint16_t b = num::bf16_bits(nd(rng) * 0.05f);
        std::memcpy(&w[2 * i], &b, 2);
        wf[i] = num::bf16_to_f32(b);
      }
    }
    auto* dA = dev(a);
    auto* dW = dev(w);
    uint8_t* dWs = c.fp8 ? dev(ws) : nullptr;
    const size_t n_out = size_t(c.M) * c.G * c.N;
    float *y1 = nullptr, *y2 = nullptr;
    bf16_t *b1 = nullptr, *b2 = nullptr;
    REQUIRE(cudaMalloc(&y1, n_out * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&y2, n_out * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&b1, n_out * 2) == cudaSuccess);
    REQUIRE(cudaMalloc(&b2, n_out * 2) == cudaSuccess);
    GemmF32Params p;
    p.A = reinterpret_cast<const bf16_t*>(dA);
    p.lda = lda;
    p.a_goff = Kin;
    p.W = dW;
    p.Ws = dWs;
    p.M = c.M;
    p.N = c.N;
    p.K = Kin;
    p.G = c.G;
    p.ldy = int64_t(c.G) * c.N;
    if (c.fp8) {
      p.yb = b1;
      REQUIRE(gemm_f32(p, nullptr).ok());
      glue::wo_a_kernel<<<glue::blocks_for(int64_t(c.M) * c.G * c.N * 32), glue::kThreads>>>(
          reinterpret_cast<const bf16_t*>(dA), c.M, c.G, c.N, Kin, dW, dWs, b2);
    } else {
      p.yf = y1;
      REQUIRE(gemm_f32(p, nullptr).ok());
      glue::linear_bf16_simple_kernel<<<glue::blocks_for(int64_t(c.M) * c.N * 32), glue::kThreads>>>(
          reinterpret_cast<const bf16_t*>(dA), lda, reinterpret_cast<const bf16_t*>(dW), c.M, c.N, Kin, y2, nullptr,
          c.N);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<float> r1(n_out), r2(n_out);
    if (c.fp8) {
      auto h1 = host(reinterpret_cast<uint16_t*>(b1), n_out), h2 = host(reinterpret_cast<uint16_t*>(b2), n_out);
      for (size_t i = 0; i < n_out; ++i) {
        r1[i] = num::bf16_to_f32(h1[i]);
        r2[i] = num::bf16_to_f32(h2[i]);
      }
    } else {
      r1 = host(y1, n_out);
      r2 = host(y2, n_out);
    }
    double worst = 0;
    for (int m = 0; m < c.M; ++m)
      for (int g = 0; g < c.G; ++g)
        for (int n = 0; n < c.N; ++n) {
          double mag = 0, exact = 0;
          for (int k = 0; k < Kin; ++k) {
            const double t = double(af[size_t(m) * lda + size_t(g) * Kin + k]) * wf[(size_t(g) * c.N + n) * Kin + k];
            mag += std::fabs(t);
            exact += t;
          }
          const size_t o = size_t(m) * c.G * c.N + size_t(g) * c.N + n;
          double bound = 2.0 * Kin * std::ldexp(1.0, -24) * mag;
          if (c.fp8) bound += std::ldexp(std::max(std::fabs(r1[o]), std::fabs(r2[o])), -7);  // one BF16 ulp
          const double d = std::fabs(double(r1[o]) - r2[o]);
          worst = std::max(worst, d / std::max(bound, 1e-30));
          if (d > bound) {
            INFO("case M " << c.M << " N " << c.N << " K " << Kin << " G " << c.G << " at " << m << "," << g << "," << n);
            CHECK(d <= bound);
          }
          // and both are close to the exact sum
          if (!c.fp8) CHECK(std::fabs(r1[o] - exact) <= 1.0 * Kin * std::ldexp(1.0, -24) * mag + 1e-30);
          ++checked;
        }
    std::printf("gemm_f32 M %d N %d K %d G %d %s: worst |Δ| / bound %.3f\n", c.M, c.N, Kin, c.G, c.fp8 ? "fp8" : "bf16",
                worst);
    cudaFree(dA);
    cudaFree(dW);
    if (dWs) cudaFree(dWs);
    cudaFree(y1);
    cudaFree(y2);
    cudaFree(b1);
    cudaFree(b2);
  }
  CHECK(checked == 5 * 1000 + 64 * 1030 + 37 * 130 + 64 * 1024 * 8 + 6 * 256 * 4 + 20 * 64 * 2);
}

// The grouped wo_a against the one-warp-per-output kernel (wo_a_kernel): at few rows the rows kernel (one warp per
// two weight rows over all S rows, glue::wo_a_rows), above 64 rows the dequantized-BF16 cuBLASLt path (wo_a_blas).
// All are FP32 sums of exact products in different orders. An FP32 FMA chain is within K·2⁻²⁴·Σ|a·w| of the exact
// sum; the tensor cores may truncate where they align (one FP32 ulp, 2⁻²³, per accumulation step instead of half),
// so the cuBLASLt path is held to K·2⁻²³·Σ|a·w| of the exact sum; each plus one BF16 ulp for the output rounding.
namespace {
struct WoACase {
  int S, G, R, gw;
};
enum class WoAPath { rows, blas };
int64_t wo_a_against_per_output(const WoACase& c, WoAPath path, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  const int rows_w = c.G * c.R, sb = (c.gw + 31) / 32;
  std::vector<uint16_t> a(size_t(c.S) * c.G * c.gw);
  std::vector<float> af(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = num::bf16_bits(nd(rng));
    af[i] = num::bf16_to_f32(a[i]);
  }
  std::vector<uint8_t> w(size_t(rows_w) * c.gw), ws(size_t((rows_w + 31) / 32) * sb);
  for (auto& s : ws) s = uint8_t(120 + rng() % 6);
  std::vector<float> wf(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    uint8_t code = uint8_t(rng());
    if ((code & 0x7F) == 0x7F) code ^= 1;  // no NaN codes
    w[i] = code;
    wf[i] = num::e4m3_to_f32(code) * num::ue8m0_to_f32(ws[(i / c.gw / 32) * sb + (i % c.gw) / 32]);
  }
  auto* dA = dev(a);
  auto* dW = dev(w);
  auto* dWs = dev(ws);
  const size_t n_out = size_t(c.S) * rows_w;
  bf16_t *b1 = nullptr, *b2 = nullptr, *wdeq = nullptr;
  REQUIRE(cudaMalloc(&b1, n_out * 2) == cudaSuccess);
  REQUIRE(cudaMalloc(&b2, n_out * 2) == cudaSuccess);
  const auto* o = reinterpret_cast<const bf16_t*>(dA);
  BlasLt blas;
  if (path == WoAPath::rows) {
    REQUIRE(glue::wo_a_rows(o, c.S, c.G, c.R, c.gw, dW, dWs, b1, nullptr).ok());
  } else {
    REQUIRE(blas.init().ok());
    REQUIRE(cudaMalloc(&wdeq, size_t(rows_w) * c.gw * 2) == cudaSuccess);
    REQUIRE(wo_a_blas(blas, o, c.S, c.G, c.R, c.gw, dW, dWs, wdeq, b1, nullptr).ok());
  }
  glue::wo_a_kernel<<<glue::blocks_for(int64_t(n_out) * 32), glue::kThreads>>>(o, c.S, c.G, c.R, c.gw, dW, dWs, b2);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto h1 = host(reinterpret_cast<uint16_t*>(b1), n_out), h2 = host(reinterpret_cast<uint16_t*>(b2), n_out);
  // The path's own error against the exact sum (u1 per accumulation), the per-output FMA chain's (2⁻²⁴ per step).
  const double u1 = path == WoAPath::rows ? std::ldexp(1.0, -24) : std::ldexp(1.0, -23), u2 = std::ldexp(1.0, -24);
  double worst = 0;
  int64_t bad = 0, checked = 0;
  for (int t = 0; t < c.S; ++t)
    for (int n = 0; n < rows_w; ++n) {
      const int g = n / c.R;
      double mag = 0, exact = 0;
      for (int i = 0; i < c.gw; ++i) {
        const double p = double(af[(size_t(t) * c.G + g) * c.gw + i]) * wf[size_t(n) * c.gw + i];
        mag += std::fabs(p);
        exact += p;
      }
      const size_t k = size_t(t) * rows_w + n;
      const float r1 = num::bf16_to_f32(h1[k]), r2 = num::bf16_to_f32(h2[k]);
      const double ulp = std::ldexp(std::max({std::fabs(r1), std::fabs(r2), float(std::fabs(exact))}), -7);
      const double bound = (u1 + u2) * c.gw * mag + ulp;
      const double d = std::fabs(double(r1) - r2);
      worst = std::max(worst, d / bound);
      bad += d > bound || std::fabs(r1 - exact) > u1 * c.gw * mag + ulp;
      ++checked;
    }
  INFO("wo_a " << (path == WoAPath::rows ? "rows" : "cuBLASLt") << " S " << c.S << " G " << c.G << " R " << c.R
               << " gw " << c.gw);
  CHECK(bad == 0);
  std::printf("wo_a %s S %d G %d R %d gw %d: worst |d| / bound %.3f\n", path == WoAPath::rows ? "rows" : "cuBLASLt",
              c.S, c.G, c.R, c.gw, worst);
  cudaFree(dA);
  cudaFree(dW);
  cudaFree(dWs);
  cudaFree(b1);
  cudaFree(b2);
  cudaFree(wdeq);
  return checked;
}
}  // namespace

TEST_CASE("wo_a rows kernel equals the per-output kernel within the FP32 sum bound", "[gpu][gemm_f32]") {
  std::mt19937 rng(12);
  int64_t checked = 0;
  for (const WoACase c : {WoACase{1, 8, 1024, 4096}, WoACase{5, 8, 1024, 4096}, WoACase{16, 8, 1024, 4096},
                          WoACase{3, 4, 256, 512}, WoACase{9, 2, 64, 144}, WoACase{33, 8, 1024, 4096},
                          WoACase{64, 4, 256, 512}, WoACase{20, 1, 63, 144}}) {
    REQUIRE(glue::wo_a_rows_fits(c.S, c.G, c.R, c.gw));
    checked += wo_a_against_per_output(c, WoAPath::rows, rng);
  }
  CHECK(checked == 1 * 8192 + 5 * 8192 + 16 * 8192 + 3 * 1024 + 9 * 128 + 33 * 8192 + 64 * 1024 + 20 * 63);
  CHECK_FALSE(glue::wo_a_rows_fits(65, 8, 1024, 4096));
  CHECK_FALSE(glue::wo_a_rows_fits(4, 1, 63, 4096));  // two weight rows per warp up to 16 rows: G·R even
  CHECK_FALSE(glue::wo_a_rows_fits(4, 8, 1024, 4100));
  CHECK_FALSE(glue::wo_a_rows(nullptr, 0, 8, 1024, 4096, nullptr, nullptr, nullptr, nullptr).ok());
}

TEST_CASE("wo_a on cuBLASLt (dequantized BF16) equals the per-output kernel within the FP32 sum bound",
          "[gpu][gemm_f32]") {
  std::mt19937 rng(13);
  int64_t checked = 0;
  for (const WoACase c : {WoACase{72, 8, 1024, 4096}, WoACase{300, 4, 256, 512}, WoACase{130, 2, 64, 144},
                          WoACase{65, 1, 1024, 4096}}) {
    REQUIRE(wo_a_blas_fits(c.S, c.G, c.R, c.gw));
    checked += wo_a_against_per_output(c, WoAPath::blas, rng);
  }
  CHECK(checked == 72 * 8192 + 300 * 1024 + 130 * 128 + 65 * 1024);
  CHECK_FALSE(wo_a_blas_fits(100, 1, 63, 144));  // R % 8: the groups' output slices must be 16-byte aligned
  CHECK_FALSE(wo_a_blas_fits(100, 8, 1024, 4104));
  BlasLt none;
  CHECK_FALSE(wo_a_blas(none, nullptr, 100, 8, 1024, 4096, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
}
