// PNG and JPEG bytes -> ImageRGB8, as PIL's Image.open(...).convert("RGB") makes them (the reference
// image processor's input). Host only.
//
// Conversions (PIL's): palette -> its RGB entries (tRNS ignored); grey -> (v, v, v), 1/2/4-bit grey scaled
// to 0..255; alpha dropped (never composited); 16-bit RGB(A) and grey+alpha -> the high byte; 16-bit grey
// (PIL's I;16) -> min(v, 255); interlaced PNGs; JPEG YCbCr/RGB/grey through libjpeg, CMYK/YCCK as Adobe
// (inverted) CMYK, then PIL's cmyk2rgb. EXIF orientation is ignored (the reference does not transpose).
// Errors are Status values: an unknown format, a size over ImageLimits (refused from the header, before
// any pixel memory is allocated), zero size, truncated or corrupt data (a bad CRC in a critical PNG
// chunk, a JPEG that ends early). Memory stays bounded on bombs: ancillary PNG chunks are skipped
// unread, image data is inflated only as far as the rows need it, JPEG scans are capped.
//
// Decoding needs libpng and libjpeg: link the CMake target dsv41::images, which defines
// DSV41_HAVE_IMAGE_DECODE=1. Without it decode_image() returns Code::unsupported.
#pragma once
#include <dsv41/core/status.hpp>
#include <dsv41/vision/image.hpp>

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if DSV41_HAVE_IMAGE_DECODE
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>
#include <jerror.h>  // JWRN_JPEG_EOF
#include <png.h>
#endif

namespace dsv41::vision {

enum class ImageFormat { unknown, png, jpeg };

inline ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return ImageFormat::png;
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::jpeg;
  return ImageFormat::unknown;
}

inline constexpr bool image_decode_available() {
#if DSV41_HAVE_IMAGE_DECODE
  return true;
#else
  return false;
#endif
}

namespace detail {

inline Status check_image_size(int64_t w, int64_t h, const ImageLimits& lim, const char* what) {
  if (w <= 0 || h <= 0)
    return error(Code::format_error, std::string(what) + ": zero image size");
  if (w > lim.max_side || h > lim.max_side || w * h > lim.max_pixels)
    return error(Code::out_of_range, std::string(what) + ": image " + std::to_string(w) + "x" + std::to_string(h) +
                                         " exceeds the limits (side " + std::to_string(lim.max_side) +
                                         ", pixels " + std::to_string(lim.max_pixels) + ")");
  return Status::Ok();
}

#if DSV41_HAVE_IMAGE_DECODE

// Out-parameters and scratch of the C-style decode functions below. Plain data only: libpng and libjpeg
// report errors by longjmp, which must not cross a frame that owns a C++ object with a destructor. The
// pixel buffer is allocated through `alloc`, which lives in the C++ caller's frame.
struct DecodeIo {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  ImageLimits limits;
  int width = 0, height = 0;
  int refused = 0;   // 1: size over the limits (refused before allocating), 2: zero size
  uint8_t* (*alloc)(void* ctx, size_t n) = nullptr;  // returns null on failure; never throws
  void* alloc_ctx = nullptr;
  png_bytep* rows = nullptr;  // PNG row pointers (malloc'ed, freed by the decoder)
  char message[200] = {};
  std::jmp_buf jmp;
};

inline void set_message(DecodeIo* io, const char* m) {
  const char* s = m ? m : "unknown error";
  const size_t n = std::min(std::strlen(s), sizeof(io->message) - 1);
  std::memcpy(io->message, s, n);
  io->message[n] = '\0';
}

// ---- PNG ----
inline void png_read_cb(png_structp png, png_bytep out, size_t n) {
  auto* io = static_cast<DecodeIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}
inline void png_error_cb(png_structp png, png_const_charp msg) {
  set_message(static_cast<DecodeIo*>(png_get_error_ptr(png)), msg);
  png_longjmp(png, 1);
}
inline void png_warning_cb(png_structp, png_const_charp) {}

// Returns 0 on success. No C++ object with a destructor lives in this frame (see DecodeIo).
inline int png_decode_c(DecodeIo* io) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, png_error_cb, png_warning_cb);
  if (!png) {
    set_message(io, "out of memory");
    return 1;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    set_message(io, "out of memory");
    return 1;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::free(io->rows);
    io->rows = nullptr;
    return 1;
  }
  png_set_read_fn(png, io, png_read_cb);
  png_set_user_limits(png, png_uint_32(io->limits.max_side), png_uint_32(io->limits.max_side));
  png_set_chunk_cache_max(png, 64);
  png_set_chunk_malloc_max(png, io->limits.max_chunk_bytes);
  // Skip every ancillary chunk the pixels do not need, unread (text, ICC profiles, EXIF, unknown ones).
  static const png_byte kSkip[] = "tEXt\0zTXt\0iTXt\0iCCP\0sPLT\0eXIf\0tIME\0pHYs\0hIST\0sBIT\0bKGD\0"
                                  "cHRM\0gAMA\0sRGB\0oFFs\0pCAL\0sCAL\0sTER\0";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, 0);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kSkip, int(sizeof(kSkip) / 5));
  png_read_info(png, info);

  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  io->width = int(w);
  io->height = int(h);
  if (w == 0 || h == 0) io->refused = 2;
  else if (w > png_uint_32(io->limits.max_side) || h > png_uint_32(io->limits.max_side) ||
           int64_t(w) * int64_t(h) > io->limits.max_pixels)
    io->refused = 1;
  if (io->refused) {
    png_destroy_read_struct(&png, &info, nullptr);
    return 1;
  }
  // PIL's convert("RGB"): 16-bit grey without alpha (I;16) clips to 255; every other 16-bit mode keeps
  // the high byte (png_set_strip_16 drops the low one).
  const int grey16 = (color == PNG_COLOR_TYPE_GRAY && depth == 16);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16 && !grey16) png_set_strip_16(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_strip_alpha(png);  // palette_to_rgb may expand tRNS
  if ((color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) && !grey16) png_set_gray_to_rgb(png);
  if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
  png_read_update_info(png, info);

  const size_t stride = size_t(w) * 3;
  const size_t rowbytes = png_get_rowbytes(png, info);
  if (rowbytes != (grey16 ? size_t(w) * 2 : stride)) png_error(png, "unexpected row layout after transforms");
  uint8_t* px = io->alloc(io->alloc_ctx, stride * h);
  if (!px) png_error(png, "out of memory for the image");
  io->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (!io->rows) png_error(png, "out of memory for the row table");
  for (png_uint_32 y = 0; y < h; ++y) io->rows[y] = px + stride * y;
  png_read_image(png, io->rows);  // png_read_end is not called: nothing after the image data is needed
  if (grey16) {
    for (png_uint_32 y = 0; y < h; ++y) {  // in place, right to left: 2 bytes per pixel -> 3
      uint8_t* row = io->rows[y];
      for (size_t x = w; x-- > 0;) {
        const uint8_t hi = row[2 * x], lo = row[2 * x + 1];
        const uint8_t v = hi ? uint8_t(255) : lo;
        row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = v;
      }
    }
  }
  std::free(io->rows);
  io->rows = nullptr;
  png_destroy_read_struct(&png, &info, nullptr);
  return 0;
}

// ---- JPEG ----
struct JpegErr {
  jpeg_error_mgr mgr;  // first member: libjpeg hands back a pointer to it
  DecodeIo* io;
};
inline void jpeg_error_exit_cb(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  char buf[JMSG_LENGTH_MAX];
  c->err->format_message(c, buf);
  set_message(e->io, buf);
  std::longjmp(e->io->jmp, 1);
}
inline void jpeg_emit_message_cb(j_common_ptr c, int level) {
  // A JPEG that ends early is an error, as in PIL ("image file is truncated"); other warnings are not.
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) jpeg_error_exit_cb(c);
}
inline void jpeg_progress_cb(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > 256) {  // a progressive JPEG with this many scans is a CPU bomb
    auto* e = reinterpret_cast<JpegErr*>(c->err);
    set_message(e->io, "too many JPEG scans");
    std::longjmp(e->io->jmp, 1);
  }
}

inline int jpeg_decode_c(DecodeIo* io) {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  jpeg_progress_mgr progress;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit_cb;
  err.mgr.emit_message = jpeg_emit_message_cb;
  err.io = io;
  if (setjmp(io->jmp)) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  jpeg_create_decompress(&cinfo);
  progress.progress_monitor = jpeg_progress_cb;
  cinfo.progress = &progress;
  jpeg_mem_src(&cinfo, io->data, static_cast<unsigned long>(io->size));
  jpeg_read_header(&cinfo, TRUE);
  io->width = int(cinfo.image_width);
  io->height = int(cinfo.image_height);
  if (cinfo.image_width == 0 || cinfo.image_height == 0) io->refused = 2;
  else if (int64_t(cinfo.image_width) > io->limits.max_side || int64_t(cinfo.image_height) > io->limits.max_side ||
           int64_t(cinfo.image_width) * int64_t(cinfo.image_height) > io->limits.max_pixels)
    io->refused = 1;
  if (io->refused) {
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  const int cmyk = (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK);
  const int grey = (cinfo.jpeg_color_space == JCS_GRAYSCALE);
  cinfo.out_color_space = cmyk ? JCS_CMYK : grey ? JCS_GRAYSCALE : JCS_RGB;
  // Coefficient buffers of a progressive image: about 2 bytes per sample; more is refused.
  cinfo.mem->max_memory_to_use = long(io->limits.max_pixels) * 8 + (long(16) << 20);
  jpeg_start_decompress(&cinfo);
  const int nc = cinfo.output_components;
  if (nc != (cmyk ? 4 : grey ? 1 : 3) || cinfo.output_width != cinfo.image_width ||
      cinfo.output_height != cinfo.image_height) {
    set_message(io, "unexpected JPEG output layout");
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  const size_t w = cinfo.output_width, stride = w * 3;
  uint8_t* px = io->alloc(io->alloc_ctx, stride * cinfo.output_height + (cmyk ? w : 0));
  if (!px) {
    set_message(io, "out of memory for the image");
    jpeg_destroy_decompress(&cinfo);
    return 1;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    uint8_t* row = px + stride * cinfo.output_scanline;
    JSAMPROW rp = row;
    jpeg_read_scanlines(&cinfo, &rp, 1);  // a CMYK row is 4·w bytes: the buffer has w spare at its end
    if (grey) {
      for (size_t x = w; x-- > 0;) row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = row[x];
    } else if (cmyk) {
      // Stored inverted (Adobe), as PIL's "CMYK;I" assumes: c = 255 − C', k = 255 − K', then PIL's
      // cmyk2rgb: nk = 255 − k = K', out = nk − round(c·nk/255), left to right (4 bytes in, 3 out).
      for (size_t x = 0; x < w; ++x) {
        const int nk = row[4 * x + 3];
        int rgb[3];
        for (int ch = 0; ch < 3; ++ch) {
          const int cc = 255 - row[4 * x + ch];
          const int t = cc * nk + 128;
          const int v = nk - (((t >> 8) + t) >> 8);
          rgb[ch] = v < 0 ? 0 : v > 255 ? 255 : v;
        }
        for (int ch = 0; ch < 3; ++ch) row[3 * x + ch] = uint8_t(rgb[ch]);
      }
    }
  }
  jpeg_finish_decompress(&cinfo);  // the rest of the data (up to EOI) is not needed, but cheap and checked
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

inline uint8_t* alloc_into_vector(void* ctx, size_t n) {
  auto* v = static_cast<std::vector<uint8_t>*>(ctx);
  try {
    v->resize(n);
  } catch (...) {
    return nullptr;
  }
  return v->data();
}

#endif  // DSV41_HAVE_IMAGE_DECODE

}  // namespace detail

// Decodes a PNG or JPEG (sniffed from its first bytes) into RGB8.
inline Result<ImageRGB8> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {}) {
  if (bytes.empty()) return error(Code::format_error, "image: empty input");
  if (bytes.size() > limits.max_encoded_bytes)
    return error(Code::out_of_range, "image: " + std::to_string(bytes.size()) + " encoded bytes exceed the limit " +
                                         std::to_string(limits.max_encoded_bytes));
  const ImageFormat fmt = sniff_image_format(bytes);
  if (fmt == ImageFormat::unknown) return error(Code::unsupported, "image: not a PNG or JPEG file");
  const char* what = fmt == ImageFormat::png ? "PNG" : "JPEG";
#if DSV41_HAVE_IMAGE_DECODE
  std::vector<uint8_t> pixels;
  detail::DecodeIo io;
  io.data = bytes.data();
  io.size = bytes.size();
  io.limits = limits;
  io.alloc = detail::alloc_into_vector;
  io.alloc_ctx = &pixels;
  const int rc = fmt == ImageFormat::png ? detail::png_decode_c(&io) : detail::jpeg_decode_c(&io);
  if (io.refused == 2) return error(Code::format_error, std::string(what) + ": zero image size");
  if (io.refused == 1) return detail::check_image_size(io.width, io.height, limits, what);
  if (rc != 0) return error(Code::format_error, std::string(what) + ": " + io.message);
  ImageRGB8 img;
  img.width = io.width;
  img.height = io.height;
  pixels.resize(size_t(img.width) * size_t(img.height) * 3);  // drops the CMYK spare
  img.pixels = std::move(pixels);
  return Result<ImageRGB8>(std::move(img));
#else
  (void)limits;
  return error(Code::unsupported, std::string(what) +
                                      ": dsv41 was built without PNG/JPEG support (link dsv41::images)");
#endif
}

}  // namespace dsv41::vision
