// Host reference of the vision tower and aligner for tests/gpu/test_vision_gpu.cu (host only, no CUDA):
// BF16 at DeepSeek's vision.py rounding points, sums in double. Plus per-row relative error statistics.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <dsv41/numeric/formats.hpp>

namespace dsv41::vision_ref {

struct Dims {
  int layers = 0, d = 0, heads = 0, inter = 0, patch = 14, ratio = 3, out_dim = 0;
  float theta = 10000.f, eps = 1e-6f;
  int head_dim() const { return d / heads; }
  int patch_in() const { return 3 * patch * patch; }
  int merge_in() const { return d * ratio * ratio; }
};
inline int merged_rows(const Dims& v, int n_h, int n_w) {
  return ((n_h + v.ratio - 1) / v.ratio) * ((n_w + v.ratio - 1) / v.ratio);
}

// Per-row ‖x − g‖ / ‖g‖.
inline std::vector<double> row_rel(const std::vector<float>& x, const std::vector<float>& g, int cols) {
  std::vector<double> r;
  for (size_t i = 0; i + size_t(cols) <= g.size(); i += size_t(cols)) {
    double e = 0, n = 0;
    for (int c = 0; c < cols; ++c) {
      const double d = double(x[i + c]) - g[i + c];
      e += d * d;
      n += double(g[i + c]) * g[i + c];
    }
    r.push_back(n > 0 ? std::sqrt(e / n) : std::sqrt(e));
  }
  return r;
}
struct RelStat {
  double median = 0, max = 0;
  bool finite = true;
};
inline RelStat stat(std::vector<double> r) {
  RelStat s;
  for (double v : r) s.finite = s.finite && std::isfinite(v);
  std::sort(r.begin(), r.end());
  if (!r.empty()) {
    s.median = r.size() % 2 ? r[r.size() / 2] : 0.5 * (r[r.size() / 2 - 1] + r[r.size() / 2]);
    s.max = r.back();
  }
  return s;
}

// ---- host reference (BF16 at the reference's rounding points, sums in double) ----
inline float rb(double x) { return num::round_bf16(float(x)); }

struct HostBlock {
  std::vector<float> n1, n2, wqkv, bqkv, wo, bo, w1, w2;
};
struct HostModel {
  Dims v;
  std::vector<float> pw, pb, norm, a1, ab1, a2, ab2;
  std::vector<HostBlock> blocks;
};
// y [M, N] = rb(x·Wᵀ + b)
inline std::vector<float> h_linear(const std::vector<float>& x, int M, int K, const std::vector<float>& w, int N,
                            const std::vector<float>* b) {
  std::vector<float> y(size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(x[size_t(m) * K + k]) * w[size_t(n) * K + k];
      y[size_t(m) * N + n] = rb(b ? double(float(s) + (*b)[n]) : s);
    }
  return y;
}
inline std::vector<float> h_norm(const std::vector<float>& x, int M, int d, const std::vector<float>& w, float eps) {
  std::vector<float> y(x.size());
  for (int m = 0; m < M; ++m) {
    double ss = 0;
    for (int k = 0; k < d; ++k) ss += double(x[size_t(m) * d + k]) * x[size_t(m) * d + k];
    const float rs = 1.0f / std::sqrt(float(ss / d) + eps);
    for (int k = 0; k < d; ++k) y[size_t(m) * d + k] = rb(w[k] * (x[size_t(m) * d + k] * rs));
  }
  return y;
}
inline void h_rope(std::vector<float>& qkv, int n_h, int n_w, const Dims& v) {
  const int hd = v.head_dim(), half = hd / 2, r = half, nf = r / 2;
  std::vector<float> inv(static_cast<size_t>(nf));
  for (int i = 0; i < nf; ++i) inv[i] = float(1.0 / std::pow(double(v.theta), double(2 * i) / r));
  for (int p = 0; p < n_h * n_w; ++p)
    for (int which = 0; which < 2; ++which)
      for (int h = 0; h < v.heads; ++h) {
        float* x = &qkv[size_t(p) * 3 * v.d + size_t(which) * v.d + size_t(h) * hd];
        for (int j = 0; j < half; ++j) {
          const double ang = double(j < nf ? p / n_w : p % n_w) * inv[j % nf];
          const double c = std::cos(ang), s = std::sin(ang), x1 = x[j], x2 = x[j + half];
          x[j] = rb(x1 * c - x2 * s);
          x[j + half] = rb(x2 * c + x1 * s);
        }
      }
}
// Softmax in double, the row sum of the unrounded values. round_p: P rounded to BF16 against the row max
// (the GPU's scale when n ≤ 64 keys) for the P·V sum; round_out: the output rounded to BF16.
// spread (optional): Σ p|v| / Σ p per element.
inline std::vector<float> h_attention(const std::vector<float>& qkv, int n, const Dims& v, bool round_p,
                                      bool round_out, std::vector<double>* spread = nullptr) {
  const int hd = v.head_dim(), d = v.d;
  std::vector<float> out(size_t(n) * d);
  if (spread) spread->assign(out.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> p(static_cast<size_t>(n));
  for (int h = 0; h < v.heads; ++h)
    for (int i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int k = 0; k < hd; ++k)
          s += double(qkv[size_t(i) * 3 * d + h * hd + k]) * qkv[size_t(j) * 3 * d + d + h * hd + k];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      double l = 0;
      for (int j = 0; j < n; ++j) {
        p[j] = std::exp(p[j] - mx);
        l += p[j];
      }
      for (int k = 0; k < hd; ++k) {
        double acc = 0, sp = 0;
        for (int j = 0; j < n; ++j) {
          const double vv = qkv[size_t(j) * 3 * d + 2 * d + h * hd + k];
          acc += (round_p ? double(num::round_bf16(float(p[j]))) : p[j]) * vv;
          sp += p[j] * std::fabs(vv);
        }
        out[size_t(i) * d + h * hd + k] = round_out ? rb(acc / l) : float(acc / l);
        if (spread) (*spread)[size_t(i) * d + h * hd + k] = sp / l;
      }
    }
  return out;
}
inline std::vector<float> h_merge(const std::vector<float>& x, int n_h, int n_w, const Dims& v) {
  const int r = v.ratio, ch = (n_h + r - 1) / r, cw = (n_w + r - 1) / r, rr = r * r;
  std::vector<float> cells(size_t(ch) * cw * v.d * rr, 0.f);
  for (int ci = 0; ci < ch; ++ci)
    for (int cj = 0; cj < cw; ++cj)
      for (int c = 0; c < v.d; ++c)
        for (int ki = 0; ki < r; ++ki)
          for (int kj = 0; kj < r; ++kj) {
            const int y = ci * r + ki, xx = cj * r + kj;
            if (y < n_h && xx < n_w)
              cells[(size_t(ci) * cw + cj) * v.d * rr + size_t(c) * rr + ki * r + kj] = x[(size_t(y) * n_w + xx) * v.d + c];
          }
  return cells;
}
// bf16_p: the attention rounds P to BF16 (else FP32 probabilities).
inline void h_tower(const HostModel& M, const std::vector<float>& patches, int n_h, int n_w, std::vector<float>& tower,
                    std::vector<float>& embeds, bool bf16_p = false) {
  const Dims& v = M.v;
  const int n = n_h * n_w;
  std::vector<float> x = h_linear(patches, n, v.patch_in(), M.pw, v.d, &M.pb);
  auto add = [](std::vector<float>& a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = rb(double(a[i]) + b[i]);
  };
  for (const HostBlock& b : M.blocks) {
    std::vector<float> q = h_linear(h_norm(x, n, v.d, b.n1, v.eps), n, v.d, b.wqkv, 3 * v.d, &b.bqkv);
    h_rope(q, n_h, n_w, v);
    add(x, h_linear(h_attention(q, n, v, bf16_p, true), n, v.d, b.wo, v.d, &b.bo));
    const std::vector<float> gu = h_linear(h_norm(x, n, v.d, b.n2, v.eps), n, v.d, b.w1, 2 * v.inter, nullptr);
    std::vector<float> a(size_t(n) * v.inter);
    for (int m = 0; m < n; ++m)
      for (int c = 0; c < v.inter; ++c) {
        const double g = gu[size_t(m) * 2 * v.inter + c], u = gu[size_t(m) * 2 * v.inter + v.inter + c];
        a[size_t(m) * v.inter + c] = rb(double(rb(g / (1.0 + std::exp(-g)))) * u);
      }
    add(x, h_linear(a, n, v.inter, b.w2, v.d, nullptr));
  }
  tower = h_norm(x, n, v.d, M.norm, v.eps);
  const int rows = merged_rows(v, n_h, n_w);
  std::vector<float> hid = h_linear(h_merge(tower, n_h, n_w, v), rows, v.merge_in(), M.a1, v.out_dim, &M.ab1);
  for (float& e : hid) e = rb(0.5 * e * (1.0 + std::erf(double(e) / std::sqrt(2.0))));
  embeds = h_linear(hid, rows, v.out_dim, M.a2, v.out_dim, &M.ab2);
}

}  // namespace dsv41::vision_ref
