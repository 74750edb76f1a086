// vision/image_processor.hpp: the plan (the reference's formulas), Pillow-exact fitting, and the vision-tiny
// golden (image.png -> image_patches, image_grid, token_types) bit for bit.
#include <dsv41/config/parse_config.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/vision/image_decode.hpp>
#include <dsv41/vision/image_processor.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace v = dsv41::vision;

namespace {

v::ImageProcessorConfig tiny_cfg() {  // vision-tiny's vision_config
  v::ImageProcessorConfig c;
  c.patch_size = 14;
  c.downsample_ratio = 3;
  c.max_image_tokens = 64;
  c.min_pixels = 10584;
  return c;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Same LCG as tools/gen_pillow_fit_refs.py.
v::ImageRGB8 lcg_image(int w, int h, uint32_t seed) {
  v::ImageRGB8 im{w, h, std::vector<uint8_t>(size_t(w) * size_t(h) * 3)};
  uint32_t x = seed;
  for (auto& b : im.pixels) {
    x = x * 1664525u + 1013904223u;
    b = uint8_t(x >> 24);
  }
  return im;
}

uint64_t fnv1a64(const std::vector<uint8_t>& b) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t c : b) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

TEST_CASE("image span layout: START (IMAGE x w NEWLINE) x h END", "[image_processor]") {
  const auto t = v::image_span_types(2, 3);
  const std::vector<int8_t> want = {0, 1, 1, 1, 2, 1, 1, 1, 2, 3};
  CHECK(t == want);
  CHECK(v::image_span_length(2, 3) == 10);
  CHECK(v::image_span_length(31, 1) == 64);
  CHECK(v::image_span_types(0, 5) == std::vector<int8_t>{0, 3});
}

TEST_CASE("plan_image_grid follows the reference's formulas", "[image_processor]") {
  struct Case {
    int w, h;
    double wh;
    int best_w, best_h, n_llm_h, n_llm_w;
  };
  // Derived by hand from SPEC 4.10 (p 14, r 3, 64 tokens, min_pixels 10584), e.g.
  //  120x80: 9600 < 10584 -> x√1.1025 = 1.05 -> 126x84 (already multiples of 14) -> 9x6 patches -> 3x2 cells.
  //  1x1: x√10584 -> 102x102 -> 112x112 -> 3x3 cells (14 tokens).
  //  97x13: 1261 px -> x2.897 -> 281x37 -> 294x42 -> 21x3 patches -> 7x1 cells.
  //  1000x1000: 1008² -> 24x24 cells = 602 tokens > 64; solve: max_w = √62.25 − 0.5 = 7.39, beta = 7·42/1000
  //    -> 294x294 -> 7x7 cells (58 tokens).
  //  100x2000 (tall): 194 tokens; r = 20, max_w = √3.35 − 0.5 = 1.33, max_h = 26.6, beta = min(42/100,
  //    26·42/2000) = 0.42 -> 42x840 -> 1x20 cells.
  //  3000x50 (wide): max_w = 60.5, max_h = 1.008, beta = 0.84 -> 2520x42 -> 60x1 cells (63 tokens).
  //  5000x10: max_h = 0.35 < 1 -> one row: 42 high, (64 − 3)·42 = 2562 wide -> 61x1 cells (64 tokens).
  //  10x5000: max_w = 0.11 < 1 -> one column: (64 − 2)/2·42 = 1302 high, 42 wide -> 1x31 cells (64 tokens).
  //  300x100, max_wh_ratio 2: width -> 200 -> 210x112 -> 5x3 cells; ratio 2.5: 250 -> 252x112 -> 6x3.
  const Case cases[] = {
      {120, 80, 0, 126, 84, 2, 3},    {1, 1, 0, 112, 112, 3, 3},      {97, 13, 0, 294, 42, 1, 7},
      {1000, 1000, 0, 294, 294, 7, 7}, {100, 2000, 0, 42, 840, 20, 1}, {3000, 50, 0, 2520, 42, 1, 60},
      {5000, 10, 0, 2562, 42, 1, 61},  {10, 5000, 0, 42, 1302, 31, 1}, {640, 480, 0, 336, 252, 6, 8},
      {300, 100, 2, 210, 112, 3, 5},   {300, 100, 2.5, 252, 112, 3, 6},
  };
  for (const Case& c : cases) {
    INFO(c.w << "x" << c.h << " max_wh_ratio " << c.wh);
    auto cfg = tiny_cfg();
    cfg.max_wh_ratio = c.wh;
    auto plan = v::plan_image_grid(c.w, c.h, cfg);
    REQUIRE(plan.ok());
    CHECK(plan->best_width == c.best_w);
    CHECK(plan->best_height == c.best_h);
    CHECK(plan->n_vit_w == c.best_w / 14);
    CHECK(plan->n_vit_h == c.best_h / 14);
    CHECK(plan->n_llm_h == c.n_llm_h);
    CHECK(plan->n_llm_w == c.n_llm_w);
    CHECK(plan->span_length() <= 64);
  }
  // Without the token cap binding: 1000x1000 with 1000 tokens stays 1008x1008 (24x24 cells, 602 tokens).
  auto cfg = tiny_cfg();
  cfg.max_image_tokens = 1000;
  auto big = v::plan_image_grid(1000, 1000, cfg);
  REQUIRE(big.ok());
  CHECK(big->best_width == 1008);
  CHECK(big->n_llm_w == 24);
  CHECK(big->span_length() == 602);
  // Refused: zero size, a config that fits no grid.
  CHECK_FALSE(v::plan_image_grid(0, 10, tiny_cfg()).ok());
  cfg.max_image_tokens = 2;
  CHECK_FALSE(v::plan_image_grid(10, 10, cfg).ok());
}

TEST_CASE("fitted images equal Pillow's ImageOps.pad / Image.resize (BICUBIC)", "[image_processor]") {
  struct Sample {
    int x, y, r, g, b;
  };
  struct Ref {
    int w, h;
    double wh;
    int best_w, best_h;
    uint64_t fnv;
    Sample s[3];
  };
  // From tools/gen_pillow_fit_refs.py (Pillow 13.0.0 with the horizontal pass pinned first, as every Pillow
  // before 13 does; Pillow 13 itself does 100x2000 vertically first, one level off in places): upscales with vertical/horizontal padding (the
  // 50x37 offset round(2.5) = 2 is Python's tie to even), downscales (support widened), resize past
  // max_wh_ratio, and a 1-pixel-tall resize of a very wide image.
  const Ref refs[] = {
      {97, 13, 0.0, 294, 42, 0x946f718497ebbfccull, {{0, 0, 127, 127, 127}, {147, 21, 92, 172, 90}, {293, 41, 127, 127, 127}}},
      {50, 37, 0.0, 126, 98, 0x80c5812ddf80a0a1ull, {{0, 0, 127, 127, 127}, {63, 49, 236, 69, 156}, {125, 97, 127, 127, 127}}},
      {37, 50, 0.0, 98, 126, 0x7121f66db543ddfcull, {{0, 0, 127, 127, 127}, {49, 63, 138, 136, 222}, {97, 125, 127, 127, 127}}},
      {400, 300, 0.0, 336, 252, 0xda1a146cff5c3308ull, {{0, 0, 100, 236, 142}, {168, 126, 143, 89, 165}, {335, 251, 118, 209, 64}}},
      {100, 2000, 0.0, 42, 840, 0xc06f2e99c3194d1full, {{0, 0, 157, 119, 102}, {21, 420, 165, 94, 135}, {41, 839, 176, 138, 61}}},
      {300, 100, 2.0, 210, 112, 0x30efaf938896de82ull, {{0, 0, 113, 166, 185}, {105, 56, 167, 156, 194}, {209, 111, 142, 224, 30}}},
      {5000, 10, 0.0, 2562, 42, 0xc022df7876570f19ull, {{0, 0, 127, 127, 127}, {1281, 21, 55, 124, 128}, {2561, 41, 127, 127, 127}}},
      {120, 80, 0.0, 126, 84, 0xb6240b6ca898b85full, {{0, 0, 198, 253, 149}, {63, 42, 71, 114, 104}, {125, 83, 2, 30, 232}}},
  };
  for (const Ref& r : refs) {
    INFO(r.w << "x" << r.h);
    auto cfg = tiny_cfg();
    cfg.max_wh_ratio = r.wh;
    const auto im = lcg_image(r.w, r.h, uint32_t(r.w * 1000 + r.h));
    auto plan = v::plan_image_grid(r.w, r.h, cfg);
    REQUIRE(plan.ok());
    REQUIRE(plan->best_width == r.best_w);
    REQUIRE(plan->best_height == r.best_h);
    auto fit = v::fit_image(im, *plan, cfg);
    REQUIRE(fit.ok());
    REQUIRE(fit->width == r.best_w);
    REQUIRE(fit->height == r.best_h);
    for (const Sample& s : r.s) {
      INFO("pixel " << s.x << "," << s.y);
      const uint8_t* p = fit->at(s.x, s.y);
      CHECK(int(p[0]) == s.r);
      CHECK(int(p[1]) == s.g);
      CHECK(int(p[2]) == s.b);
    }
    CHECK(fnv1a64(fit->pixels) == r.fnv);
  }
}

TEST_CASE("normalization: bf16((v/255 - 0.5)/0.5)", "[image_processor]") {
  const auto t = v::image_normalize_table();
  CHECK(t[0] == 0xBF80);    // -1
  CHECK(t[255] == 0x3F80);  // 1
  // 127/255 − 0.5 = −1/510: ·2 = −0.0039215..., in BF16 −0.003921508... = 0xBB80 (2^-8 · 1.00392 rounds to 2^-8)
  CHECK(t[127] == dsv41::num::bf16_bits(-1.0f / 255.0f));
  for (int i = 1; i < 256; ++i) CHECK(dsv41::num::bf16_to_f32(t[size_t(i)]) >= dsv41::num::bf16_to_f32(t[size_t(i - 1)]));
}

TEST_CASE("vision-tiny golden: image.png -> image_patches, grid and token types, bit for bit", "[image_processor]") {
  if (!v::image_decode_available()) {
    WARN("built without PNG/JPEG support: golden image test skipped");
    return;
  }
  const std::string dir = DSV41_FIXTURES "/vision-tiny";
  auto shape = dsv41::load_config(dir + "/config.json");
  REQUIRE(shape.ok());
  const auto cfg = v::ImageProcessorConfig::from(shape->vision);
  CHECK(cfg.patch_size == 14);
  CHECK(cfg.downsample_ratio == 3);
  CHECK(cfg.max_image_tokens == 64);
  CHECK(cfg.min_pixels == 10584);
  CHECK(cfg.max_wh_ratio == 0.0);  // null

  const auto bytes = read_file(dir + "/image.png");
  auto img = v::decode_image(bytes);
  REQUIRE(img.ok());
  CHECK(img->width == 120);
  CHECK(img->height == 80);
  auto pi = v::process_image(*img, cfg);
  REQUIRE(pi.ok());

  auto g = dsv41::st::File::open(dir + "/golden.safetensors");
  REQUIRE(g.ok());
  const auto* patches = g->find("image_patches");
  const auto* grid = g->find("image_grid");
  const auto* types = g->find("token_types");
  REQUIRE(patches);
  REQUIRE(grid);
  REQUIRE(types);
  REQUIRE(grid->numel() == 6);
  std::vector<int32_t> gr(6);
  std::memcpy(gr.data(), grid->data, 24);
  CHECK(pi->n_vit_h == gr[2]);
  CHECK(pi->n_vit_w == gr[3]);
  CHECK(pi->n_llm_h == gr[4]);
  CHECK(pi->n_llm_w == gr[5]);

  REQUIRE(patches->shape == std::vector<int64_t>{pi->num_patches(), 3, 14, 14});
  REQUIRE(size_t(patches->numel()) == pi->patches.size());
  std::vector<uint16_t> want(pi->patches.size());
  std::memcpy(want.data(), patches->data, want.size() * 2);
  size_t diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff += want[i] != pi->patches[i];
  CHECK(diff == 0);

  REQUIRE(types->shape.size() == 2);
  const int64_t P = types->shape[1];
  std::vector<int32_t> tt(size_t(types->numel()));
  std::memcpy(tt.data(), types->data, tt.size() * 4);
  const int64_t row = gr[0], start = gr[1];
  const auto span = pi->span_types();
  REQUIRE(start + int64_t(span.size()) <= P);
  for (size_t i = 0; i < span.size(); ++i) CHECK(int(span[i]) == tt[size_t(row * P + start) + i]);
  CHECK(tt[size_t(row * P + start + int64_t(span.size()))] == -1);  // text after the span
  if (start > 0) CHECK(tt[size_t(row * P + start - 1)] == -1);
}
