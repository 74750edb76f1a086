// Shared helpers of the GPU checks (tests/gpu/test_*.cu and bench/gpu_harness.cu): CUDA error checks,
// device buffers that are poisoned before every run, deterministic random inputs, and error statistics.
// Test code: failures throw std::runtime_error (Catch2 and the harness report them).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/numeric/formats.hpp>

#include "ref_api.hpp"

namespace dsv41::gputest {

#define GT_CUDA(expr)                                                                                          \
  do {                                                                                                         \
    const cudaError_t gt_e_ = (expr);                                                                          \
    if (gt_e_ != cudaSuccess)                                                                                  \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #expr ": " +         \
                               cudaGetErrorString(gt_e_));                                                     \
  } while (0)
#define GT_OK(expr)                                                                                            \
  do {                                                                                                         \
    const ::dsv41::Status gt_s_ = (expr);                                                                      \
    if (!gt_s_.ok())                                                                                           \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " + gt_s_.to_string()); \
  } while (0)
// After a launch sequence: launch errors, then asynchronous errors.
#define GT_SYNC() do { GT_CUDA(cudaGetLastError()); GT_CUDA(cudaDeviceSynchronize()); } while (0)

inline const RefApi& ref() {
  const RefApi* r = dsv41_gpu_cpu_reference ? dsv41_gpu_cpu_reference() : nullptr;
  if (!r) throw std::runtime_error("CPU reference not linked (add tests/gpu/ref_cpu.cpp to the GPU test binary)");
  return *r;
}

template <class T>
struct DBuf {
  T* p = nullptr;
  size_t n = 0;
  DBuf() = default;
  explicit DBuf(size_t count) : n(count) { GT_CUDA(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T))); }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  DBuf(DBuf&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; o.n = 0; }
  DBuf& operator=(DBuf&& o) noexcept { std::swap(p, o.p); std::swap(n, o.n); return *this; }
  ~DBuf() { if (p) cudaFree(p); }
  size_t bytes() const { return n * sizeof(T); }
  void upload(const std::vector<T>& h) {
    if (h.size() != n) throw std::runtime_error("upload size");
    GT_CUDA(cudaMemcpy(p, h.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    GT_CUDA(cudaMemcpy(h.data(), p, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  // 0xFF: NaN for BF16/FP32 outputs; 0xA5: an invalid index for integer outputs.
  void poison(int byte = 0xFF) { GT_CUDA(cudaMemset(p, byte, bytes())); }
};
template <class T>
DBuf<T> to_dev(const std::vector<T>& h) {
  DBuf<T> d(h.size());
  d.upload(h);
  return d;
}

// splitmix64: deterministic, fast.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
  float normal() {
    const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int below(int n) { return int(next() % uint64_t(n)); }
};

inline uint16_t bf16b(float x) { return num::bf16_bits(x); }
inline float bf16v(uint16_t b) { return num::bf16_to_f32(b); }
inline float bf16f(float x) { return num::round_bf16(x); }

// BF16 values (as floats and as bits) of scale·N(0,1).
inline std::vector<float> rand_bf16(Rng& r, size_t n, float scale = 1.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = bf16f(scale * r.normal());
  return v;
}
inline std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bf16b(v[i]);
  return b;
}
inline std::vector<float> from_bits(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16v(b[i]);
  return v;
}
// Random E4M3 codes (no NaN codes).
inline std::vector<uint8_t> rand_e4m3(Rng& r, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& c : v) {
    c = uint8_t(r.next());
    if ((c & 0x7F) == 0x7F) c ^= 0x01;
  }
  return v;
}
// Random UE8M0 exponents in [lo, hi].
inline std::vector<uint8_t> rand_ue8m0(Rng& r, size_t n, int lo, int hi) {
  std::vector<uint8_t> v(n);
  for (auto& e : v) e = uint8_t(lo + r.below(hi - lo + 1));
  return v;
}
inline std::vector<uint8_t> rand_bytes(Rng& r, size_t n) {
  std::vector<uint8_t> v(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = r.next();
    for (int k = 0; k < 8; ++k) v[i + k] = uint8_t(x >> (8 * k));
  }
  for (; i < n; ++i) v[i] = uint8_t(r.next());
  return v;
}

// Distance in BF16 units in the last place between two BF16 values (ordered bit patterns).
inline int64_t bf16_ulps(float a, float b) {
  auto ord = [](float x) {
    const int32_t v = int32_t(bf16b(x));
    return v & 0x8000 ? -(v & 0x7FFF) : v;
  };
  return std::llabs(int64_t(ord(a)) - int64_t(ord(b)));
}
inline float bf16_ulp(float x) {  // spacing of BF16 at |x|
  x = std::fabs(x);
  if (x < 1e-38f) return 0x1p-133f;
  int e;
  std::frexp(x, &e);
  return std::ldexp(1.0f, e - 8);
}

struct CheckResult {
  std::string op, shape;
  bool pass = false;
  int64_t n = 0, n_diff = 0, n_bad = 0, n_nan = 0;
  double max_abs = 0, max_rel_norm = 0, max_ratio = 0;  // max |err|, max |err|/max|ref|, max |err|/bound
  int64_t max_ulps = 0;
  std::string bound, note;
  std::string summary() const {
    char b[512];
    std::snprintf(b, sizeof b, "%-10s %-44s %s  n=%lld diff=%lld bad=%lld nan=%lld max_abs=%.3g max_err/max|ref|=%.3g "
                  "max_ulps=%lld max_err/bound=%.3g  [%s] %s",
                  op.c_str(), shape.c_str(), pass ? "PASS" : "FAIL", (long long)n, (long long)n_diff,
                  (long long)n_bad, (long long)n_nan, max_abs, max_rel_norm, (long long)max_ulps, max_ratio,
                  bound.c_str(), note.c_str());
    return b;
  }
};

// Accumulates element comparisons: gpu vs ref with a per-element bound (bound < 0: exact).
struct Cmp {
  CheckResult r;
  double max_ref = 0;
  void add(float gpu, float refv, double bound) {
    ++r.n;
    if (std::isnan(gpu) && !std::isnan(refv)) { ++r.n_nan; ++r.n_bad; return; }
    if (std::isnan(refv)) return;
    const double err = (std::isinf(gpu) || std::isinf(refv)) ? (gpu == refv ? 0.0 : INFINITY) : std::fabs(double(gpu) - refv);
    max_ref = std::max(max_ref, std::fabs(double(refv)));
    if (gpu != refv) ++r.n_diff;
    r.max_abs = std::max(r.max_abs, err);
    if (!std::isinf(gpu) && !std::isinf(refv)) r.max_ulps = std::max(r.max_ulps, bf16_ulps(gpu, refv));
    if (bound < 0) { if (err > 0) ++r.n_bad; }
    else {
      if (err > bound) ++r.n_bad;
      if (bound > 0) r.max_ratio = std::max(r.max_ratio, err / bound);
      else if (err > 0) r.max_ratio = INFINITY;
    }
  }
  CheckResult done(bool extra_ok = true) {
    r.max_rel_norm = max_ref > 0 ? r.max_abs / max_ref : r.max_abs;
    r.pass = extra_ok && r.n_bad == 0 && r.n > 0;
    return r;
  }
};

inline std::string shape_str(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::string s;
  for (auto& [k, v] : kv) {
    if (!s.empty()) s += ' ';
    s += k;
    s += '=';
    s += std::to_string(v);
  }
  return s;
}

}  // namespace dsv41::gputest
