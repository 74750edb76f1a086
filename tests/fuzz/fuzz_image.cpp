// Image bytes → decode_image (PNG / JPEG) → process_image with vision-tiny's processor settings: refused or
// processed, never a crash, a leak, UB, or memory beyond the limits. Tight limits keep each run fast.
#include <cstddef>
#include <cstdint>
#include <span>

#include <dsv41/vision/image_decode.hpp>
#include <dsv41/vision/image_processor.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v = dsv41::vision;
  v::ImageLimits lim;
  lim.max_encoded_bytes = size_t(1) << 20;
  lim.max_pixels = 1 << 20;
  lim.max_side = 4096;
  lim.max_chunk_bytes = size_t(1) << 20;
  auto img = v::decode_image(std::span<const uint8_t>(data, size), lim);
  if (!img.ok()) return 0;
  if (img->pixels.size() != size_t(img->width) * size_t(img->height) * 3) __builtin_trap();
  v::ImageProcessorConfig cfg;  // vision-tiny: patch 14, ratio 3
  cfg.max_image_tokens = 64;
  cfg.min_pixels = 10584;
  cfg.max_wh_ratio = (size & 1) ? 0.0 : 4.0;  // both fitting paths
  auto p = v::process_image(*img, cfg);
  if (p.ok() && (p->span_length() > 64 || p->patches.size() != size_t(p->num_patches()) * 3 * 14 * 14))
    __builtin_trap();
  return 0;
}
