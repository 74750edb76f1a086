// Decoded images: 8-bit RGB, row-major, and the limits a decoder enforces on untrusted input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dsv41::vision {

// 8-bit RGB, rows top to bottom, pixels left to right, R G B interleaved: pixels.size() == 3·width·height.
struct ImageRGB8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;

  const uint8_t* at(int x, int y) const { return pixels.data() + (size_t(y) * size_t(width) + size_t(x)) * 3; }
  uint8_t* at(int x, int y) { return pixels.data() + (size_t(y) * size_t(width) + size_t(x)) * 3; }
};

// What a decoder accepts. Checked on the header before any pixel memory is allocated.
struct ImageLimits {
  size_t max_encoded_bytes = size_t(64) << 20;  // the compressed input
  int64_t max_pixels = 40'000'000;              // width·height
  int max_side = 16384;                         // width and height each
  size_t max_chunk_bytes = size_t(8) << 20;     // PNG: one ancillary chunk (decompressed), JPEG: markers kept
};

}  // namespace dsv41::vision
