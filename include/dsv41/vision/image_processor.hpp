// The image processor (SPEC §4.10, DeepSeek's inference/image_processor.py): an RGB8 image -> BF16 ViT
// patches, the patch grid, the LLM token grid, and the image span's token types.
//
//  1. plan_image_grid: the pixel size the image is brought to (best_width x best_height, multiples of the
//     patch size) and the token grid n_llm_h x n_llm_w = ⌈(best/p)/r⌉, so that the span's length
//     n_llm_h·(n_llm_w + 1) + 2 stays within max_image_tokens. Computed in double as the reference's
//     Python floats (pow for **0.5, int() truncation, floor/ceil).
//  2. The image is fitted into that size as PIL's ImageOps.pad(color 127): ImageOps.contain (aspect kept,
//     Python round, ties to even), a BICUBIC resize bit-exact with Pillow's Resample.c (separable,
//     horizontal then vertical, 22-bit fixed-point coefficients, 8-bit rounding between the passes),
//     pasted centred (offset round((W − w)·0.5)) on grey 127. Images at least max_wh_ratio times wider
//     than tall are instead resized to the full size (Image.resize, BICUBIC).
//  3. Each byte v -> bf16(((float)v / 255 − 0.5) / 0.5), FP32 arithmetic as the reference's torch ops.
//  4. Patches in row-major grid order, each 3 x p x p channel-major.
// Host only, no dependencies (decoding is image_decode.hpp).
#pragma once
#include <dsv41/config/model_shape.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/vision/image.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsv41::vision {

// Token types of an image span (and −1 for text), as the reference's TEXT / IMAGE_START / ...
enum ImageTokenType : int8_t {
  kTokenText = -1,
  kImageStart = 0,
  kImage = 1,
  kImageNewline = 2,
  kImageEnd = 3,
};

// The processor's parameters: vision_config's patch_size, downsample_ratio, max_image_tokens,
// min_pixels and max_wh_ratio (0 = null).
struct ImageProcessorConfig {
  int patch_size = 14;
  int downsample_ratio = 3;
  int max_image_tokens = 0;
  int64_t min_pixels = 0;
  double max_wh_ratio = 0.0;

  static ImageProcessorConfig from(const VisionShape& v) {
    ImageProcessorConfig c;
    c.patch_size = v.patch_size;
    c.downsample_ratio = v.downsample_ratio;
    c.max_image_tokens = v.max_image_tokens;
    c.min_pixels = v.min_pixels;
    c.max_wh_ratio = v.max_wh_ratio;
    return c;
  }
};

// Span length of an n_llm_h x n_llm_w token grid: START, n_llm_h rows of (n_llm_w IMAGE + NEWLINE), END.
inline int64_t image_span_length(int64_t n_llm_h, int64_t n_llm_w) { return n_llm_h * (n_llm_w + 1) + 2; }

// [START] ([IMAGE] x n_llm_w [NEWLINE]) x n_llm_h [END].
inline std::vector<int8_t> image_span_types(int n_llm_h, int n_llm_w) {
  std::vector<int8_t> t;
  if (n_llm_h < 0 || n_llm_w < 0) return t;
  t.reserve(size_t(image_span_length(n_llm_h, n_llm_w)));
  t.push_back(kImageStart);
  for (int y = 0; y < n_llm_h; ++y) {
    t.insert(t.end(), size_t(n_llm_w), int8_t(kImage));
    t.push_back(kImageNewline);
  }
  t.push_back(kImageEnd);
  return t;
}

struct ImageGridPlan {
  int best_width = 0, best_height = 0;  // pixels the image is brought to (multiples of patch_size)
  int n_vit_h = 0, n_vit_w = 0;         // patch grid: best / patch_size
  int n_llm_h = 0, n_llm_w = 0;         // token grid after the aligner's downsample
  int64_t span_length() const { return image_span_length(n_llm_h, n_llm_w); }
};

// What the ViT consumes.
struct ProcessedImage {
  // BF16 bits, [n_vit_h·n_vit_w][3][patch_size][patch_size]: patch (gy, gx) at index gy·n_vit_w + gx,
  // within it channel c, row py, column px at c·p² + py·p + px (pixel (gx·p + px, gy·p + py)).
  std::vector<uint16_t> patches;
  int patch_size = 0;
  int n_vit_h = 0, n_vit_w = 0;  // the ViT's patch grid (rows, columns)
  int n_llm_h = 0, n_llm_w = 0;  // the aligner's token grid: the span has n_llm_h·n_llm_w IMAGE slots
  int64_t num_patches() const { return int64_t(n_vit_h) * n_vit_w; }
  int64_t span_length() const { return image_span_length(n_llm_h, n_llm_w); }
  std::vector<int8_t> span_types() const { return image_span_types(n_llm_h, n_llm_w); }
};

namespace detail {

inline int64_t llm_cells(int64_t best, int p, int r) {  // ⌈(best // p) / r⌉
  const int64_t n = best / p;
  return (n + r - 1) / r;
}

}  // namespace detail

// The reference's plan_image_grid + safe_resize for an image of the given size.
inline Result<ImageGridPlan> plan_image_grid(int width, int height, const ImageProcessorConfig& cfg) {
  const int p = cfg.patch_size, r = cfg.downsample_ratio;
  if (p <= 0 || r <= 0 || cfg.max_image_tokens < 3)
    return error(Code::invalid_argument, "image processor: patch_size, downsample_ratio must be positive and "
                                         "max_image_tokens at least 3");
  if (width <= 0 || height <= 0) return error(Code::invalid_argument, "image processor: zero image size");
  double w = width, h = height;
  if (cfg.max_wh_ratio > 0 && w > h * cfg.max_wh_ratio) w = h * cfg.max_wh_ratio;
  if (w * h < double(cfg.min_pixels)) {
    const double ratio = std::pow(double(cfg.min_pixels) / (w * h), 0.5);
    w = std::trunc(w * ratio);
    h = std::trunc(h * ratio);
  }
  double best_w = std::ceil(w / p) * p, best_h = std::ceil(h / p) * p;
  if (!(best_w < 1e9 && best_h < 1e9))
    return error(Code::out_of_range, "image processor: image too large to plan");
  int64_t nh = detail::llm_cells(int64_t(best_h), p, r), nw = detail::llm_cells(int64_t(best_w), p, r);
  const int64_t max_tok = cfg.max_image_tokens;
  if (image_span_length(nh, nw) > max_tok) {
    // solve_resize_ratio(h, w): the largest aspect-preserving size whose grid fits.
    const double ratio_hw = h / w;
    const double max_w_f = std::sqrt(double(max_tok - 2) / ratio_hw + 0.25) - 0.5;
    const double max_h_f = max_w_f * ratio_hw;
    const int64_t cell = int64_t(p) * r;
    if (max_w_f < 1.0) {  // very tall: one column
      best_h = double((max_tok - 2) / 2 * cell);
      best_w = double(cell);
    } else if (max_h_f < 1.0) {  // very wide: one row
      best_h = double(cell);
      best_w = double((max_tok - 3) * cell);
    } else {
      const double beta = std::min(double(int64_t(std::floor(max_w_f)) * cell) / w,
                                   double(int64_t(std::floor(max_h_f)) * cell) / h);
      best_h = std::floor(h * beta / p) * p;
      best_w = std::floor(w * beta / p) * p;
    }
    nh = detail::llm_cells(int64_t(best_h), p, r);
    nw = detail::llm_cells(int64_t(best_w), p, r);
    if (image_span_length(nh, nw) > max_tok)
      return error(Code::internal, "image processor: no grid fits max_image_tokens");
  }
  ImageGridPlan plan;
  plan.best_width = int(best_w);
  plan.best_height = int(best_h);
  plan.n_vit_h = plan.best_height / p;
  plan.n_vit_w = plan.best_width / p;
  plan.n_llm_h = int(nh);
  plan.n_llm_w = int(nw);
  if (plan.n_vit_h <= 0 || plan.n_vit_w <= 0)
    return error(Code::invalid_argument, "image processor: the plan has an empty patch grid");
  return plan;
}

namespace detail {

// Pillow's bicubic kernel, a = −0.5 (the same operations in the same order).
inline double pil_bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

inline constexpr int kPilPrecisionBits = 32 - 8 - 2;

// One axis of a Pillow resample from in_size to out_size samples: for output i, the taps start at
// first[i] and number count[i]; their fixed-point weights are weights[i·ksize + k].
struct ResampleAxis {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

inline ResampleAxis pil_bicubic_axis(int in_size, int out_size) {
  ResampleAxis ax;
  const double scale = double(float(in_size) - 0.0f) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 2.0 * filterscale;
  ax.ksize = int(std::ceil(support)) * 2 + 1;
  ax.first.resize(size_t(out_size));
  ax.count.resize(size_t(out_size));
  ax.weights.assign(size_t(out_size) * size_t(ax.ksize), 0);
  std::vector<double> k(size_t(ax.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double wgt = pil_bicubic((x + xmin - center + 0.5) * ss);
      k[size_t(x)] = wgt;
      ww += wgt;
    }
    for (int x = 0; x < xmax; ++x) {
      double v = k[size_t(x)];
      if (ww != 0.0) v /= ww;
      const double f = v * double(1 << kPilPrecisionBits);
      ax.weights[size_t(xx) * size_t(ax.ksize) + size_t(x)] = v < 0 ? int32_t(-0.5 + f) : int32_t(0.5 + f);
    }
    ax.first[size_t(xx)] = xmin;
    ax.count[size_t(xx)] = xmax;
  }
  return ax;
}

inline uint8_t pil_clip8(int32_t acc) {
  const int32_t v = acc >> kPilPrecisionBits;  // arithmetic shift: floor
  return v < 0 ? uint8_t(0) : v > 255 ? uint8_t(255) : uint8_t(v);
}

}  // namespace detail

// Pillow's Image.resize(size, BICUBIC) of an RGB image, bit-exact (no reducing_gap, no box).
inline ImageRGB8 resize_bicubic_pil(const ImageRGB8& in, int out_w, int out_h) {
  ImageRGB8 out;
  out.width = out_w;
  out.height = out_h;
  if (out_w <= 0 || out_h <= 0 || in.width <= 0 || in.height <= 0) {
    out.width = std::max(out_w, 0);
    out.height = std::max(out_h, 0);
    out.pixels.assign(size_t(out.width) * size_t(out.height) * 3, 0);
    return out;
  }
  if (out_w == in.width && out_h == in.height) return in;  // Image.resize returns a copy
  const bool need_h = out_w != in.width, need_v = out_h != in.height;
  const detail::ResampleAxis vert = detail::pil_bicubic_axis(in.height, out_h);
  // Rows of the source the vertical pass reads: only those go through the horizontal pass.
  const int y_first = vert.first[0];
  const int y_last = vert.first[size_t(out_h) - 1] + vert.count[size_t(out_h) - 1];
  const ImageRGB8* src = &in;
  int row_offset = 0;
  ImageRGB8 tmp;
  if (need_h) {
    const detail::ResampleAxis hor = detail::pil_bicubic_axis(in.width, out_w);
    tmp.width = out_w;
    tmp.height = y_last - y_first;
    tmp.pixels.resize(size_t(tmp.width) * size_t(tmp.height) * 3);
    for (int yy = 0; yy < tmp.height; ++yy) {
      const uint8_t* srow = in.at(0, yy + y_first);
      uint8_t* drow = tmp.at(0, yy);
      for (int xx = 0; xx < out_w; ++xx) {
        const int32_t* kw = hor.weights.data() + size_t(xx) * size_t(hor.ksize);
        const uint8_t* s = srow + size_t(hor.first[size_t(xx)]) * 3;
        int32_t a0 = 1 << (detail::kPilPrecisionBits - 1), a1 = a0, a2 = a0;
        for (int x = 0; x < hor.count[size_t(xx)]; ++x) {
          a0 += int32_t(s[3 * x + 0]) * kw[x];
          a1 += int32_t(s[3 * x + 1]) * kw[x];
          a2 += int32_t(s[3 * x + 2]) * kw[x];
        }
        drow[3 * xx + 0] = detail::pil_clip8(a0);
        drow[3 * xx + 1] = detail::pil_clip8(a1);
        drow[3 * xx + 2] = detail::pil_clip8(a2);
      }
    }
    src = &tmp;
    row_offset = y_first;
  }
  if (!need_v) return tmp;  // the identity vertical axis reads every row: tmp is the result
  out.pixels.resize(size_t(out_w) * size_t(out_h) * 3);
  const size_t row_bytes = size_t(src->width) * 3;
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* kw = vert.weights.data() + size_t(yy) * size_t(vert.ksize);
    const int ymin = vert.first[size_t(yy)] - row_offset;
    const int ny = vert.count[size_t(yy)];
    uint8_t* drow = out.at(0, yy);
    for (size_t i = 0; i < row_bytes; ++i) {
      int32_t acc = 1 << (detail::kPilPrecisionBits - 1);
      for (int y = 0; y < ny; ++y) acc += int32_t(src->pixels[size_t(ymin + y) * row_bytes + i]) * kw[y];
      drow[i] = detail::pil_clip8(acc);
    }
  }
  return out;
}

namespace detail {
inline int py_round(double x) { return int(std::nearbyint(x)); }  // Python round(): ties to even
}  // namespace detail

// PIL's ImageOps.pad(image, (w, h), BICUBIC, color=(fill, fill, fill)), centring (0.5, 0.5).
inline ImageRGB8 pad_pil(const ImageRGB8& in, int w, int h, uint8_t fill = 127) {
  // ImageOps.contain: the largest size within (w, h) with the image's aspect ratio.
  int cw = w, ch = h;
  if (in.height > 0 && h > 0) {
    const double im_ratio = double(in.width) / in.height, dest_ratio = double(w) / h;
    if (im_ratio != dest_ratio) {
      if (im_ratio > dest_ratio) ch = detail::py_round(double(in.height) / in.width * w);
      else cw = detail::py_round(double(in.width) / in.height * h);
    }
  } else {
    cw = ch = 0;
  }
  ImageRGB8 resized = (cw > 0 && ch > 0) ? resize_bicubic_pil(in, cw, ch) : ImageRGB8{std::max(cw, 0), std::max(ch, 0), {}};
  if (resized.width == w && resized.height == h) return resized;
  ImageRGB8 out;
  out.width = w;
  out.height = h;
  out.pixels.assign(size_t(w) * size_t(h) * 3, fill);
  int x0 = 0, y0 = 0;
  if (resized.width != w) x0 = detail::py_round((w - resized.width) * 0.5);
  else y0 = detail::py_round((h - resized.height) * 0.5);
  // Image.paste clips to the canvas.
  for (int y = 0; y < resized.height; ++y) {
    const int ty = y + y0;
    if (ty < 0 || ty >= h || resized.pixels.empty()) continue;
    for (int x = 0; x < resized.width; ++x) {
      const int tx = x + x0;
      if (tx < 0 || tx >= w) continue;
      const uint8_t* s = resized.at(x, y);
      uint8_t* d = out.at(tx, ty);
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

// The 256 normalized BF16 values: bf16(((float)v / 255 − 0.5) / 0.5).
inline std::array<uint16_t, 256> image_normalize_table() {
  std::array<uint16_t, 256> t{};
  for (int v = 0; v < 256; ++v) {
    const float x = float(v) / 255.0f;
    t[size_t(v)] = num::bf16_bits((x - 0.5f) / 0.5f);
  }
  return t;
}

// The fitted image (best_width x best_height) that the patches are cut from.
inline Result<ImageRGB8> fit_image(const ImageRGB8& img, const ImageGridPlan& plan, const ImageProcessorConfig& cfg) {
  if (img.width <= 0 || img.height <= 0 || img.pixels.size() != size_t(img.width) * size_t(img.height) * 3)
    return error(Code::invalid_argument, "image processor: malformed image");
  if (cfg.max_wh_ratio > 0 && double(img.width) >= cfg.max_wh_ratio * double(img.height))
    return Result<ImageRGB8>(resize_bicubic_pil(img, plan.best_width, plan.best_height));
  return Result<ImageRGB8>(pad_pil(img, plan.best_width, plan.best_height, 127));
}

// The whole processor: plan, fit, normalize, cut into patches.
inline Result<ProcessedImage> process_image(const ImageRGB8& img, const ImageProcessorConfig& cfg) {
  auto plan = plan_image_grid(img.width, img.height, cfg);
  if (!plan) return plan.status();
  auto fitted = fit_image(img, *plan, cfg);
  if (!fitted) return fitted.status();
  const ImageRGB8& f = *fitted;
  const int p = cfg.patch_size;
  ProcessedImage out;
  out.patch_size = p;
  out.n_vit_h = plan->n_vit_h;
  out.n_vit_w = plan->n_vit_w;
  out.n_llm_h = plan->n_llm_h;
  out.n_llm_w = plan->n_llm_w;
  const auto lut = image_normalize_table();
  const size_t pp = size_t(p) * size_t(p);
  out.patches.resize(size_t(out.num_patches()) * 3 * pp);
  uint16_t* dst = out.patches.data();
  for (int gy = 0; gy < out.n_vit_h; ++gy)
    for (int gx = 0; gx < out.n_vit_w; ++gx)
      for (int c = 0; c < 3; ++c)
        for (int py = 0; py < p; ++py)
          for (int px = 0; px < p; ++px) *dst++ = lut[f.at(gx * p + px, gy * p + py)[c]];
  return Result<ProcessedImage>(std::move(out));
}

}  // namespace dsv41::vision
