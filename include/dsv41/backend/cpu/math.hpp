// CPU reference building blocks: the readable statement of SPEC §3–4. Activations are FP32 arrays
// that hold BF16-rounded values wherever the reference holds BF16; each function says where it rounds.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <dsv41/blocks/rope.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/core/unsanitized.hpp>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/numeric/quant.hpp>
#include <dsv41/numeric/sum_order.hpp>

namespace dsv41::cpu {

inline float bf16(float x) { return num::round_bf16(x); }
inline void bf16_inplace(float* x, size_t n) { for (size_t i = 0; i < n; ++i) x[i] = bf16(x[i]); }
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Σ x² of a row in FP32 in the order of the reference's CPU run (numeric/sum_order.hpp: torch's cascade sum).
// The hc and DSpark draft paths are chaotic on random weights: the sequential order flipped 5 of vision-tiny's 24
// draft steps.
inline float sum_squares(const float* x, int n) {
  return num::cascade_sum_squares(n, [x](int i) { return x[i]; });
}

// §3.1 RMSNorm over rows of n: bf16(w · (x · rsqrt(mean(x²) + eps))), FP32 inside, one rounding.
inline void rmsnorm(const float* x, const float* w, int rows, int n, float eps, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + size_t(r) * n;
    const float ss = sum_squares(xr, n);
    const float rs = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int i = 0; i < n; ++i) y[size_t(r) * n + i] = bf16(w[i] * (xr[i] * rs));
  }
}

// FP32 dot product in 8 interleaved partial sums (a reordered sum, which SPEC §3 allows), so the
// compiler can vectorize it without -ffast-math. Most of a CPU prefill's time (core/unsanitized.hpp).
DSV41_UNSANITIZED inline float dot(const float* a, const float* b, int n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float acc = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// §3.4 GEMMs. y[M, out] = x[M, in] · Wᵀ.
enum class Lin {
  Auto,     // FP8/FP4 weights: FP8 activation quant first, BF16 out; BF16 weights: BF16 out
  NoQuant,  // no activation quant, BF16 out (wo_a, dequantized to BF16 by the reference)
  F32,      // FP32 weights and output (head, compressor at ratio > 1, gate, DSpark heads)
};

inline void linear(const Linear& W, const float* x, int M, float* y, Lin mode = Lin::Auto) {
  const bool quant = mode == Lin::Auto && (W.kind == WKind::FP8 || W.kind == WKind::FP4);
  std::vector<float> xq;
  if (quant) {
    xq.assign(x, x + size_t(M) * W.in);
    for (int m = 0; m < M; ++m) num::fp8_quant_block32(xq.data() + size_t(m) * W.in, W.in);
    x = xq.data();
  }
  std::vector<float> row(static_cast<size_t>(W.in));
  for (int o = 0; o < W.out; ++o) {
    W.row(o, row.data());
    for (int m = 0; m < M; ++m) {
      const float acc = dot(x + size_t(m) * W.in, row.data(), W.in);
      y[size_t(m) * W.out + o] = mode == Lin::F32 ? acc : bf16(acc);
    }
  }
}

// §3.6 sparse attention with sink for one query row: q [H, D], entries [n][D] (pointers), out [H, D] BF16.
inline void sparse_attention(const float* q, int H, int D, const std::vector<const float*>& entries,
                             const float* sink, float scale, float* out) {
  const int n = int(entries.size());
  std::vector<float> s(static_cast<size_t>(n));
  for (int h = 0; h < H; ++h) {
    const float* qh = q + size_t(h) * D;
    float* oh = out + size_t(h) * D;
    if (n == 0) { std::fill(oh, oh + D, 0.f); continue; }
    float m = kNegInf;
    for (int j = 0; j < n; ++j) {
      s[j] = dot(qh, entries[j], D) * scale;
      m = std::max(m, s[j]);
    }
    float den = 0.f;
    std::vector<float> acc(size_t(D), 0.f);
    for (int j = 0; j < n; ++j) {
      const float pj = std::exp(s[j] - m);
      den += pj;
      const float pb = bf16(pj);
      for (int i = 0; i < D; ++i) acc[i] += pb * entries[j][i];
    }
    den += std::exp(sink[h] - m);
    for (int i = 0; i < D; ++i) oh[i] = bf16(acc[i] / den);
  }
}

// §4.1 mHC coefficients of one row of streams H [hc, d] (BF16 values).
struct HcMix {
  std::vector<float> pre, post, comb;  // [hc], [hc], [hc*hc] (comb[j*hc+k])
};

inline HcMix hc_mixes(const float* Hrow, int hc, int d, const HcWeights& w, float norm_eps, int iters, float hc_eps) {
  const int nz = hc * d, nm = (2 + hc) * hc;
  const float rs = 1.0f / std::sqrt(sum_squares(Hrow, nz) / float(nz) + norm_eps);
  std::vector<float> m(static_cast<size_t>(nm));
  for (int o = 0; o < nm; ++o) {
    m[o] = dot(Hrow, w.fn.data() + size_t(o) * nz, nz) * rs;
  }
  auto sigmoid = [](float x) { return 1.f / (1.f + std::exp(-x)); };
  HcMix r;
  r.pre.resize(hc);
  r.post.resize(hc);
  r.comb.resize(size_t(hc) * hc);
  for (int j = 0; j < hc; ++j) {
    r.pre[j] = sigmoid(m[j] * w.scale[0] + w.base[j]) + hc_eps;
    r.post[j] = 2.f * sigmoid(m[hc + j] * w.scale[1] + w.base[hc + j]);
  }
  float* C = r.comb.data();
  for (int j = 0; j < hc; ++j) {
    float mx = kNegInf;
    for (int k = 0; k < hc; ++k) {
      C[j * hc + k] = m[2 * hc + j * hc + k] * w.scale[2] + w.base[2 * hc + j * hc + k];
      mx = std::max(mx, C[j * hc + k]);
    }
    float sum = 0.f;
    for (int k = 0; k < hc; ++k) sum += (C[j * hc + k] = std::exp(C[j * hc + k] - mx));
    for (int k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / sum + hc_eps;
  }
  auto norm_cols = [&] {
    for (int k = 0; k < hc; ++k) {
      float sum = 0.f;
      for (int j = 0; j < hc; ++j) sum += C[j * hc + k];
      for (int j = 0; j < hc; ++j) C[j * hc + k] /= (sum + hc_eps);
    }
  };
  auto norm_rows = [&] {
    for (int j = 0; j < hc; ++j) {
      float sum = 0.f;
      for (int k = 0; k < hc; ++k) sum += C[j * hc + k];
      for (int k = 0; k < hc; ++k) C[j * hc + k] /= (sum + hc_eps);
    }
  };
  norm_cols();
  for (int it = 0; it < iters - 1; ++it) { norm_rows(); norm_cols(); }
  return r;
}

// hc_pre: bf16(Σ_j pre_j · H_j), FP32 sum.
inline void hc_pre(const float* Hrow, const float* pre, int hc, int d, float* y) {
  for (int i = 0; i < d; ++i) {
    float acc = 0.f;
    for (int j = 0; j < hc; ++j) acc += pre[j] * Hrow[size_t(j) * d + i];
    y[i] = bf16(acc);
  }
}

// hc_post: stream k = bf16(post_k · x + Σ_j C_jk · H_j).
inline void hc_post(const float* x, const float* Hrow, const HcMix& m, int hc, int d, float* out) {
  for (int k = 0; k < hc; ++k)
    for (int i = 0; i < d; ++i) {
      float acc = 0.f;
      for (int j = 0; j < hc; ++j) acc += m.comb[size_t(j) * hc + k] * Hrow[size_t(j) * d + i];
      out[size_t(k) * d + i] = bf16(m.post[k] * x[i] + acc);
    }
}

inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
inline float silu(float x) { return x / (1.f + std::exp(-x)); }

// §4.6 one SwiGLU expert on rows x [M, d]: w2(bf16(weight · silu(min(g, lim)) · clamp(u, ±lim))).
inline void expert_ffn(const std::array<Linear, 3>& e, const float* x, int M, const float* row_weight, float limit,
                       float* y) {
  const int I = e[0].out, d = e[0].in;
  std::vector<float> g(size_t(M) * I), u(size_t(M) * I);
  linear(e[0], x, M, g.data());
  linear(e[2], x, M, u.data());
  for (int m = 0; m < M; ++m)
    for (int i = 0; i < I; ++i) {
      float gv = g[size_t(m) * I + i], uv = u[size_t(m) * I + i];
      if (limit > 0) { gv = std::min(gv, limit); uv = std::clamp(uv, -limit, limit); }
      float a = silu(gv) * uv;
      if (row_weight) a = row_weight[m] * a;
      g[size_t(m) * I + i] = bf16(a);
    }
  (void)d;
  linear(e[1], g.data(), M, y);
}

// §4.6 routing for one row: top-k of score + bias (ties to the lower id), weights from the raw scores.
inline void route(const float* logits, const float* bias, int E, int k, bool norm, float scale, int* sel, float* w) {
  std::vector<float> s(static_cast<size_t>(E)), b(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) { s[e] = std::sqrt(softplus(logits[e])); b[e] = s[e] + bias[e]; }
  std::vector<int> idx(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) idx[e] = e;
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int c) { return b[a] > b[c]; });
  float sum = 0.f;
  for (int i = 0; i < k; ++i) { sel[i] = idx[i]; w[i] = s[idx[i]]; sum += w[i]; }
  for (int i = 0; i < k; ++i) {
    if (norm && k > 1) w[i] /= (sum + 1e-20f);
    w[i] *= scale;
  }
}

}  // namespace dsv41::cpu
