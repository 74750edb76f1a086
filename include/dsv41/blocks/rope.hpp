// SPEC §3.5 RoPE: the per-layer frequency table (both backends upload or use the same one) and its
// rotation on the host.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41 {

// §3.5 RoPE tables: one per layer kind. Angles and rotations in FP32, as the reference's complex64.
struct RopeTable {
  int rd = 0;                 // rotated dims (pairs = rd/2)
  std::vector<float> freqs;   // [rd/2]

  static RopeTable make(int rd, double theta, bool yarn, double factor, double beta_fast, double beta_slow,
                        double original) {
    RopeTable t;
    t.rd = rd;
    t.freqs.resize(size_t(rd / 2));
    for (int i = 0; i < rd / 2; ++i) {
      const float e = float(2 * i) / float(rd);
      t.freqs[i] = 1.0f / std::pow(float(theta), e);
    }
    if (yarn && original > 0) {
      auto corr = [&](double rot) { return rd * std::log(original / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
      const double low = std::max(std::floor(corr(beta_fast)), 0.0);
      const double high = std::min(std::ceil(corr(beta_slow)), double(rd - 1));
      const float span = float(std::max(high - low, 1e-3));
      for (int i = 0; i < rd / 2; ++i) {
        const float ramp = std::clamp((float(i) - float(low)) / span, 0.f, 1.f);
        const float smooth = 1.f - ramp;
        t.freqs[i] = t.freqs[i] / float(factor) * (1.f - smooth) + t.freqs[i] * smooth;
      }
    }
    return t;
  }

  // Rotates the trailing rd channels of v (length n) at position p; result rounded to BF16.
  void apply(float* v, int n, int64_t p, bool inverse = false) const {
    float* t = v + (n - rd);
    for (int i = 0; i < rd / 2; ++i) {
      const float ang = float(p) * freqs[i];
      const float c = float(std::cos(double(ang))), s0 = float(std::sin(double(ang)));
      const float s = inverse ? -s0 : s0;
      const float a = t[2 * i], b = t[2 * i + 1];
      t[2 * i] = num::round_bf16(a * c - b * s);
      t[2 * i + 1] = num::round_bf16(a * s + b * c);
    }
  }
};

// The table of a layer: compressed layers (ratio > 0) use compress_rope_theta and YaRN, the others rope_theta.
inline RopeTable rope_table_for(const ModelShape& s, bool compressed) {
  const auto& y = s.rope_scaling;
  return RopeTable::make(s.qk_rope_head_dim, compressed ? s.compress_rope_theta : s.rope_theta,
                         compressed && s.has_rope_scaling, y.factor, y.beta_fast, y.beta_slow,
                         double(y.original_max_position_embeddings));
}

}  // namespace dsv41
