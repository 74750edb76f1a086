// SPEC §4.10 the vision ops on the CPU (blocks/vision.hpp lists them), with the reference's rounding points
// (DeepSeek's inference/vision.py run in BF16): BF16 linears with FP32 accumulation and the bias added before
// the one rounding, RMSNorm eps 1e-6 in FP32 with FP32 weights, 2-D rope in FP32 then BF16, attention in FP32
// throughout (softmax and its FP32 probabilities against V, one rounding of the output), exact (erf) GELU, and
// every residual sum rounded to BF16. These reproduce the vision-tiny golden's vision_tower bit for bit.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::cpu {

// One image's activations (BF16 values in FP32 arrays).
struct VisionWork {
  int n = 0, nh = 0, nw = 0, lh = 0, lw = 0;  // patches, patch grid, token grid
  std::vector<float> x, h, qkv, o, mlp;       // [n, dv], [n, dv], [n, 3dv], [n, dv], [n, 2·inter]
  std::vector<float> cos, sin;                // [n, hd/2] 2-D rope angles' cos and sin (FP32)
  std::vector<float> tower, cells, embeds;    // [n, dv], [lh·lw, dv·r·r], [lh·lw, d]
};

// y[M, out] = bf16(x · Wᵀ + b) with BF16 weights; b may be empty.
inline void vision_linear(const Linear& W, const std::vector<float>& b, const float* x, int M, float* y) {
  std::vector<float> row(static_cast<size_t>(W.in));
  for (int o = 0; o < W.out; ++o) {
    W.row(o, row.data());
    const float bias = b.empty() ? 0.f : b[size_t(o)];
    for (int m = 0; m < M; ++m) y[size_t(m) * W.out + o] = bf16(dot(x + size_t(m) * W.in, row.data(), W.in) + bias);
  }
}

inline VisionWork vision_work(const ModelShape& s, const ImageInput& in) {
  const auto& v = s.vision;
  VisionWork w;
  w.nh = in.n_vit_h;
  w.nw = in.n_vit_w;
  w.n = w.nh * w.nw;
  w.lh = in.n_llm_h;
  w.lw = in.n_llm_w;
  const size_t n = size_t(w.n), dv = size_t(v.hidden_size);
  w.x.resize(n * dv);
  w.h.resize(n * dv);
  w.qkv.resize(n * 3 * dv);
  w.o.resize(n * dv);
  w.mlp.resize(n * 2 * size_t(v.intermediate_size));
  w.tower.resize(n * dv);
  // 2-D rope: r = hd/2 angles per patch, [row·f_i (i < r/2), col·f_i (i < r/2)], f_i = θ^(−2i/r), FP32.
  const int r = v.hidden_size / v.num_attention_heads / 2, nf = r / 2;
  std::vector<float> f(static_cast<size_t>(nf));
  for (int i = 0; i < nf; ++i) f[size_t(i)] = 1.0f / std::pow(float(v.rope_theta), float(2 * i) / float(r));
  w.cos.resize(n * size_t(r));
  w.sin.resize(n * size_t(r));
  for (int p = 0; p < w.n; ++p)
    for (int i = 0; i < r; ++i) {
      const float pos = float(i < nf ? p / w.nw : p % w.nw);
      const float ang = pos * f[size_t(i % nf)];
      w.cos[size_t(p) * r + i] = float(std::cos(double(ang)));
      w.sin[size_t(p) * r + i] = float(std::sin(double(ang)));
    }
  return w;
}

inline void patch_embed(const VisionWeights& V, const ImageInput& in, VisionWork& w) {
  std::vector<float> px(in.patches.size());
  for (size_t i = 0; i < px.size(); ++i) px[i] = num::bf16_to_f32(in.patches[i]);
  vision_linear(V.patch, V.patch_b, px.data(), w.n, w.x.data());
}

// Query and key halves of every head rotated by the patch's angles.
inline void vision_rope2d(const ModelShape& s, VisionWork& w) {
  const int dv = s.vision.hidden_size, H = s.vision.num_attention_heads, hd = dv / H, r = hd / 2;
  for (int p = 0; p < w.n; ++p) {
    const float* c = w.cos.data() + size_t(p) * r;
    const float* sn = w.sin.data() + size_t(p) * r;
    for (int part = 0; part < 2; ++part)  // q, k
      for (int h = 0; h < H; ++h) {
        float* x = w.qkv.data() + size_t(p) * 3 * dv + size_t(part) * dv + size_t(h) * hd;
        for (int i = 0; i < r; ++i) {
          const float x1 = x[i], x2 = x[r + i];
          x[i] = bf16(x1 * c[i] - x2 * sn[i]);
          x[r + i] = bf16(x2 * c[i] + x1 * sn[i]);
        }
      }
  }
}

// Bidirectional attention of every patch over all patches, per head, FP32 inside; o [n, dv] BF16.
inline void vision_attention(const ModelShape& s, VisionWork& w) {
  const int dv = s.vision.hidden_size, H = s.vision.num_attention_heads, hd = dv / H, n = w.n;
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> sc(static_cast<size_t>(n)), acc(static_cast<size_t>(hd));
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < n; ++i) {
      const float* q = w.qkv.data() + size_t(i) * 3 * dv + size_t(h) * hd;
      float m = kNegInf;
      for (int j = 0; j < n; ++j) {
        sc[size_t(j)] = dot(q, w.qkv.data() + size_t(j) * 3 * dv + dv + size_t(h) * hd, hd) * scale;
        m = std::max(m, sc[size_t(j)]);
      }
      float den = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int j = 0; j < n; ++j) {
        const float e = std::exp(sc[size_t(j)] - m);
        den += e;
        const float* v = w.qkv.data() + size_t(j) * 3 * dv + 2 * size_t(dv) + size_t(h) * hd;
        for (int k = 0; k < hd; ++k) acc[size_t(k)] += e * v[k];
      }
      float* o = w.o.data() + size_t(i) * dv + size_t(h) * hd;
      for (int k = 0; k < hd; ++k) o[k] = bf16(acc[size_t(k)] / den);
    }
}

// x = bf16(x + y) over rows of x.
inline void residual_add(std::vector<float>& x, const std::vector<float>& y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = bf16(x[i] + y[i]);
}

inline void vision_wo(const VisionBlockWeights& B, VisionWork& w) {
  std::vector<float> y(w.x.size());
  vision_linear(B.wo, B.bo, w.o.data(), w.n, y.data());
  residual_add(w.x, y);
}

inline void vision_mlp(const VisionBlockWeights& B, VisionWork& w) {
  const int I = B.w2.in;
  vision_linear(B.w1, {}, w.h.data(), w.n, w.mlp.data());
  std::vector<float> a(size_t(w.n) * I), y(w.x.size());
  for (int p = 0; p < w.n; ++p)
    for (int i = 0; i < I; ++i) {
      const float g = w.mlp[size_t(p) * 2 * I + i], u = w.mlp[size_t(p) * 2 * I + I + i];
      a[size_t(p) * I + i] = bf16(bf16(silu(g)) * u);
    }
  vision_linear(B.w2, {}, a.data(), w.n, y.data());
  residual_add(w.x, y);
}

// F.unfold order: cell (bh, bw) in row-major order, within it channel c, row kh, column kw at c·r·r + kh·r + kw;
// patches past the grid (the bottom/right padding) are zeros.
inline void vision_merge(const ModelShape& s, VisionWork& w) {
  const int dv = s.vision.hidden_size, r = s.vision.downsample_ratio, K = dv * r * r;
  w.cells.assign(size_t(w.lh) * w.lw * K, 0.f);
  for (int bh = 0; bh < w.lh; ++bh)
    for (int bw = 0; bw < w.lw; ++bw) {
      float* cell = w.cells.data() + (size_t(bh) * w.lw + bw) * K;
      for (int kh = 0; kh < r; ++kh)
        for (int kw = 0; kw < r; ++kw) {
          const int y = bh * r + kh, x = bw * r + kw;
          if (y >= w.nh || x >= w.nw) continue;
          const float* t = w.tower.data() + (size_t(y) * w.nw + x) * dv;
          for (int c = 0; c < dv; ++c) cell[size_t(c) * r * r + kh * r + kw] = t[c];
        }
    }
}

inline void vision_aligner(const ModelShape& s, const VisionWeights& V, VisionWork& w) {
  const int rows = w.lh * w.lw, d = s.hidden_size;
  std::vector<float> h(size_t(rows) * d);
  vision_linear(V.al_w1, V.al_b1, w.cells.data(), rows, h.data());
  for (float& x : h) x = bf16(0.5f * x * (1.f + std::erf(x * float(M_SQRT1_2))));
  w.embeds.resize(size_t(rows) * d);
  vision_linear(V.al_w2, V.al_b2, h.data(), rows, w.embeds.data());
}

// The span rows of a forward's embeddings E [S, d] (rows p0..): START/NEWLINE/END take the image_* vectors,
// IMAGE slots the span's embedding rows in reading order. The spans were checked (check_image_spans).
inline void merge_image_spans(const ModelShape& s, const VisionWeights& V, std::span<const ImageSpan> spans,
                              int64_t p0, float* E) {
  const size_t d = size_t(s.hidden_size);
  for (const ImageSpan& sp : spans) {
    size_t img = 0;
    for (size_t i = 0; i < sp.types.size(); ++i) {
      float* row = E + size_t(sp.start - p0 + int64_t(i)) * d;
      const float* src = nullptr;
      switch (sp.types[i]) {
        case ImageSpan::kStart: src = V.image_start.data(); break;
        case ImageSpan::kNewline: src = V.image_newline.data(); break;
        case ImageSpan::kEnd: src = V.image_end.data(); break;
        default: src = sp.embeds.data() + (img++) * d; break;
      }
      std::copy_n(src, d, row);
    }
  }
}

}  // namespace dsv41::cpu
