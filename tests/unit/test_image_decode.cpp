// vision/image_decode.hpp: PNG and JPEG -> RGB8 as PIL's convert("RGB"), and refusals of bad input.
// PNG corpus: tests/data/images/ (tools/gen_test_images.py, pixel formulas v8/v16 below); JPEGs are
// encoded here with libjpeg.
#include <dsv41/vision/image_decode.hpp>
#include <dsv41/vision/image_processor.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#if DSV41_HAVE_IMAGE_DECODE
#include <jpeglib.h>
#endif

namespace v = dsv41::vision;
using dsv41::Code;

namespace {

std::vector<uint8_t> load(const std::string& name) {
  std::ifstream f(std::string(DSV41_TEST_DATA "/images/") + name, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

int v8(int x, int y, int c) { return (x * 37 + y * 91 + c * 53 + 11) & 255; }
int v16(int x, int y, int c) { return v8(x, y, c) << 8 | ((x * 13 + y * 7 + c) & 255); }

// Checks a decoded 7x5 image against want(x, y, c).
template <class F>
void check_pixels(const std::string& name, F want) {
  INFO(name);
  auto im = v::decode_image(load(name));
  REQUIRE(im.ok());
  REQUIRE(im->width == 7);
  REQUIRE(im->height == 5);
  REQUIRE(im->pixels.size() == 7 * 5 * 3);
  int bad = 0;
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      for (int c = 0; c < 3; ++c) bad += int(im->at(x, y)[c]) != want(x, y, c);
  CHECK(bad == 0);
}

#if DSV41_HAVE_IMAGE_DECODE
// libjpeg encode of w x h pixels with `comps` components in colour space `cs`.
std::vector<uint8_t> encode_jpeg(int w, int h, int comps, J_COLOR_SPACE cs, const std::vector<uint8_t>& px,
                                 int quality = 100, bool progressive = false) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = comps;
  c.in_color_space = cs;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;  // 4:4:4
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + size_t(c.next_scanline) * size_t(w) * size_t(comps));
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}
#endif

}  // namespace

TEST_CASE("image decode: format sniffing and empty / unknown input", "[image_decode]") {
  CHECK(v::sniff_image_format(load("rgb8.png")) == v::ImageFormat::png);
  const std::vector<uint8_t> jpg = {0xFF, 0xD8, 0xFF, 0xE0};
  CHECK(v::sniff_image_format(jpg) == v::ImageFormat::jpeg);
  auto e = v::decode_image({});
  CHECK(e.status().code() == Code::format_error);
  auto n = v::decode_image(load("not_an_image.bin"));
  CHECK(n.status().code() == Code::unsupported);
  v::ImageLimits lim;
  lim.max_encoded_bytes = 100;
  CHECK(v::decode_image(load("rgb8.png"), lim).status().code() == Code::out_of_range);
}

TEST_CASE("image decode without libpng/libjpeg says so", "[image_decode]") {
  if (v::image_decode_available()) return;
  auto r = v::decode_image(load("rgb8.png"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::unsupported);
  CHECK(r.status().message().find("without PNG/JPEG support") != std::string::npos);
}

TEST_CASE("PNG colour types convert as PIL's convert('RGB')", "[image_decode]") {
  if (!v::image_decode_available()) return;
  const auto rgb = [](int x, int y, int c) { return v8(x, y, c); };
  const auto grey = [](int x, int y, int) { return v8(x, y, 0); };
  check_pixels("rgb8.png", rgb);
  check_pixels("rgba8.png", rgb);  // alpha dropped, not composited
  check_pixels("rgb_trns.png", rgb);
  check_pixels("grey8.png", grey);
  check_pixels("grey_alpha8.png", grey);
  check_pixels("rgb16.png", [](int x, int y, int c) { return v16(x, y, c) >> 8; });  // high byte
  check_pixels("rgba16.png", [](int x, int y, int c) { return v16(x, y, c) >> 8; });
  check_pixels("grey_alpha16.png", [](int x, int y, int) { return v16(x, y, 0) >> 8; });
  // 16-bit grey is PIL's I;16, which convert("RGB") clips at 255 (rows 0-1 hold values below 256).
  check_pixels("grey16.png", [](int x, int y, int) { return y < 2 ? v8(x, y, 0) : std::min(v16(x, y, 0), 255); });
  check_pixels("grey1.png", [](int x, int y, int) { return (v8(x, y, 0) & 1) * 255; });
  check_pixels("grey2.png", [](int x, int y, int) { return (v8(x, y, 0) & 3) * 85; });
  check_pixels("grey4.png", [](int x, int y, int) { return (v8(x, y, 0) & 15) * 17; });
  const auto pal = [](int x, int y, int c) {
    const int i = v8(x, y, 0) % 16;
    const int e[3] = {i * 3, 255 - i, (i * 7) & 255};
    return e[c];
  };
  check_pixels("palette8.png", pal);
  check_pixels("palette4.png", pal);
  check_pixels("palette_trns.png", pal);  // tRNS ignored
  check_pixels("interlaced_rgb8.png", rgb);
  check_pixels("interlaced_grey2.png", [](int x, int y, int) { return (v8(x, y, 0) & 3) * 85; });
  check_pixels("interlaced_rgba16.png", [](int x, int y, int c) { return v16(x, y, c) >> 8; });
}

TEST_CASE("bad PNGs: a clear error, never a crash", "[image_decode]") {
  if (!v::image_decode_available()) return;
  struct Bad {
    const char* file;
    Code code;
  };
  const Bad bad[] = {
      {"bad_truncated.png", Code::format_error},          {"bad_truncated_header.png", Code::format_error},
      {"bad_signature.png", Code::unsupported},           {"bad_crc_ihdr.png", Code::format_error},
      {"bad_crc_idat.png", Code::format_error},           {"bad_zero_width.png", Code::format_error},
      {"bad_huge_ihdr.png", Code::format_error},          {"bad_bit_depth.png", Code::format_error},
      {"bad_no_idat.png", Code::format_error},            {"bad_short_idat.png", Code::format_error},
      {"bad_zlib.png", Code::format_error},               {"bad_palette_missing.png", Code::format_error},
      {"bomb_chunk_length.png", Code::format_error},
  };
  for (const Bad& b : bad) {
    INFO(b.file);
    auto r = v::decode_image(load(b.file));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == b.code);
    CHECK_FALSE(r.status().message().empty());
  }
  // 100000x100000 passes libpng's own checks only when the side limit allows it; then the pixel limit
  // refuses it from the header, before any allocation.
  v::ImageLimits wide;
  wide.max_side = 200000;
  auto huge = v::decode_image(load("bad_huge_ihdr.png"), wide);
  CHECK(huge.status().code() == Code::out_of_range);
  CHECK(huge.status().message().find("100000x100000") != std::string::npos);
  v::ImageLimits small;
  small.max_pixels = 20;
  CHECK(v::decode_image(load("rgb8.png"), small).status().code() == Code::out_of_range);
}

TEST_CASE("PNG bombs: bounded work, the right image", "[image_decode]") {
  if (!v::image_decode_available()) return;
  // 8x8 whose IDAT inflates to 64 MiB: only the rows are inflated (PIL gives the same black image).
  auto b = v::decode_image(load("bomb_idat.png"));
  REQUIRE(b.ok());
  CHECK(b->width == 8);
  CHECK(b->height == 8);
  CHECK(std::all_of(b->pixels.begin(), b->pixels.end(), [](uint8_t p) { return p == 0; }));
  // A zTXt chunk inflating to 64 MiB is skipped unread.
  check_pixels("bomb_ztxt.png", [](int x, int y, int c) { return v8(x, y, c); });
}

#if DSV41_HAVE_IMAGE_DECODE
TEST_CASE("JPEG: RGB, grey, CMYK (Adobe, inverted), progressive, truncated", "[image_decode]") {
  const int W = 32, H = 16;
  // Flat 8x8 blocks at quality 100 survive the DCT within ±2.
  std::vector<uint8_t> rgb(size_t(W) * H * 3), grey(size_t(W) * H), cmyk(size_t(W) * H * 4);
  auto block_val = [](int x, int y, int c) { return ((x / 8) * 60 + (y / 8) * 90 + c * 40 + 20) & 255; };
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      for (int c = 0; c < 3; ++c) rgb[(size_t(y) * W + x) * 3 + c] = uint8_t(block_val(x, y, c));
      grey[size_t(y) * W + x] = uint8_t(block_val(x, y, 0));
      for (int c = 0; c < 4; ++c) cmyk[(size_t(y) * W + x) * 4 + c] = uint8_t(block_val(x, y, c));
    }
  auto near = [](int a, int b) { return a - b <= 2 && b - a <= 2; };

  for (bool progressive : {false, true}) {
    INFO("progressive " << progressive);
    auto r = v::decode_image(encode_jpeg(W, H, 3, JCS_RGB, rgb, 100, progressive));
    REQUIRE(r.ok());
    REQUIRE(r->width == W);
    REQUIRE(r->height == H);
    int bad = 0;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c) bad += !near(r->at(x, y)[c], block_val(x, y, c));
    CHECK(bad == 0);
  }
  {
    auto g = v::decode_image(encode_jpeg(W, H, 1, JCS_GRAYSCALE, grey));
    REQUIRE(g.ok());
    int bad = 0;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int c = 0; c < 3; ++c) bad += !near(g->at(x, y)[c], block_val(x, y, 0));
    CHECK(bad == 0);
  }
  {
    // libjpeg stores the CMYK bytes given (and writes an Adobe marker); PIL reads them as inverted
    // ("CMYK;I"): c = 255 − C', k = 255 − K', then R = K' − K'·c/255 (rounded), as its cmyk2rgb.
    auto k = v::decode_image(encode_jpeg(W, H, 4, JCS_CMYK, cmyk));
    REQUIRE(k.ok());
    int bad = 0;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const int K = block_val(x, y, 3);
        for (int c = 0; c < 3; ++c) {
          const int cc = 255 - block_val(x, y, c);
          const int want = K - int(double(cc) * K / 255.0 + 0.5);
          bad += !(k->at(x, y)[c] - want <= 3 && want - k->at(x, y)[c] <= 3);
        }
      }
    CHECK(bad == 0);
  }
  {
    const auto full = encode_jpeg(W, H, 3, JCS_RGB, rgb);
    for (size_t cut : {size_t(3), size_t(20), full.size() / 2, full.size() - 40}) {
      INFO("cut to " << cut);
      std::vector<uint8_t> t(full.begin(), full.begin() + ptrdiff_t(cut));
      auto r = v::decode_image(t);
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == Code::format_error);
    }
    v::ImageLimits lim;
    lim.max_side = 16;
    CHECK(v::decode_image(full, lim).status().code() == Code::out_of_range);
  }
}

TEST_CASE("decoded images go through the processor", "[image_decode]") {
  auto im = v::decode_image(load("interlaced_rgb8.png"));
  REQUIRE(im.ok());
  v::ImageProcessorConfig cfg;
  cfg.max_image_tokens = 64;
  cfg.min_pixels = 10584;
  auto p = v::process_image(*im, cfg);
  REQUIRE(p.ok());
  // 7x5 -> x√(10584/35) = 17.39 -> 121x86 -> 126x98 (9x7 patches, 3x3 cells).
  CHECK(p->n_vit_w == 9);
  CHECK(p->n_vit_h == 7);
  CHECK(p->n_llm_w == 3);
  CHECK(p->n_llm_h == 3);
  CHECK(p->patches.size() == size_t(63) * 3 * 14 * 14);
}
#endif
