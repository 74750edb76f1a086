// SPEC §4.10 on the CPU reference: the vision tower and aligner against the vision-tiny golden, the image span
// merged into the embeddings, the checks of image inputs and spans, and the golden check with an image.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

namespace {

const Model<>& vision_tiny() {
  static auto m = Model<>::load(DSV41_FIXTURES "/vision-tiny");  // test-local cache
  REQUIRE(m.ok());
  return **m;
}

// The golden's tensors the tests read, decoded once.
struct Golden {
  std::vector<uint16_t> patches;  // BF16 bits
  std::vector<int32_t> grid, ids, types;
  std::vector<float> tower, embeds, h0;
  int B = 0, T = 0, P = 0;
};

const Golden& golden_file() {
  static Golden g = [] {
    Golden r;
    auto f = st::File::open(DSV41_FIXTURES "/vision-tiny/golden.safetensors");
    REQUIRE(f.ok());
    const st::File& file = *f;
    auto bits = [&](const char* n) {
      const st::TensorView* t = file.find(n);
      REQUIRE(t);
      std::vector<uint16_t> v(size_t(t->numel()));
      std::memcpy(v.data(), t->data, v.size() * 2);
      return v;
    };
    auto f32 = [&](const char* n) {
      const st::TensorView* t = file.find(n);
      REQUIRE(t);
      return golden::detail::to_f32(*t);
    };
    auto i32 = [&](const char* n) {
      const st::TensorView* t = file.find(n);
      REQUIRE(t);
      return golden::detail::to_int<int32_t>(*t);
    };
    r.patches = bits("image_patches");
    r.grid = i32("image_grid");
    r.ids = i32("input_ids");
    r.types = i32("token_types");
    r.tower = f32("vision_tower");
    r.embeds = f32("vision_embeds");
    r.h0 = f32("h.0");
    r.B = int(file.find("input_ids")->shape[0]);
    r.T = int(file.find("input_ids")->shape[1]);
    r.P = i32("prefill_length")[0];
    return r;
  }();
  return g;
}

ImageInput golden_image() {
  const Golden& g = golden_file();
  ImageInput in;
  in.patches = g.patches;
  in.n_vit_h = g.grid[2];
  in.n_vit_w = g.grid[3];
  in.n_llm_h = g.grid[4];
  in.n_llm_w = g.grid[5];
  return in;
}

double max_row_rel(const std::vector<float>& x, const std::vector<float>& ref, size_t w) {
  bool nan = false;
  return golden::detail::rel_stat("", x, ref, w, &nan).max;
}

// The image's span: types from the golden's token_types.
struct Span {
  std::vector<int8_t> types;
  ImageSpan span;
};
Span golden_span(const std::vector<float>& embeds) {
  const Golden& g = golden_file();
  Span s;
  const int n = g.grid[4] * (g.grid[5] + 1) + 2;
  for (int i = 0; i < n; ++i) s.types.push_back(int8_t(g.types[size_t(g.grid[0]) * g.P + size_t(g.grid[1] + i)]));
  s.span.start = g.grid[1];
  s.span.types = s.types;
  s.span.embeds = embeds;
  return s;
}

struct EmbedTap {
  std::vector<float> H;  // unit 0's input rows, [rows, hc, d]
  static void on_input(void* c, int l, int64_t, int rows, float* H, float*) {
    auto& t = *static_cast<EmbedTap*>(c);
    if (l == 0) t.H.insert(t.H.end(), H, H + size_t(rows) * 4 * 128);
  }
};

}  // namespace

TEST_CASE("vision-tiny: the ViT and aligner reproduce the golden's vision_tower and vision_embeds", "[vision]") {
  const auto& m = vision_tiny();
  const Golden& g = golden_file();
  REQUIRE(m.shape().has_vision);
  VisionResult r;
  REQUIRE(m.encode_image(golden_image(), r).ok());
  REQUIRE(r.tower.size() == g.tower.size());
  REQUIRE(r.embeds.size() == g.embeds.size());
  bool nan = false;
  const auto tower = golden::detail::rel_stat("tower", r.tower, g.tower, 64, &nan);
  const auto embeds = golden::detail::rel_stat("embeds", r.embeds, g.embeds, 128, &nan);
  CHECK_FALSE(nan);
  // The README's contract: median ≤ 1e-2, every row ≤ 3e-2. The reference's own CPU-vs-H200 gap is ≤ 7.8e-3; the
  // reference's rounding points (one per BF16 tensor, FP32 attention) land far below it.
  CHECK(tower.median <= 1e-2);
  CHECK(tower.max <= 3e-2);
  CHECK(embeds.median <= 1e-2);
  CHECK(embeds.max <= 3e-2);
  CHECK(tower.max <= 1e-3);
  CHECK(embeds.max <= 1e-3);
}

TEST_CASE("vision-tiny: the image span takes image_* vectors and the aligner rows; text rows the embeddings",
          "[vision]") {
  const auto& m = vision_tiny();
  const Golden& g = golden_file();
  VisionResult r;
  REQUIRE(m.encode_image(golden_image(), r).ok());
  const Span sp = golden_span(r.embeds);
  const int b = g.grid[0];
  const std::span<const int32_t> ids(g.ids.data() + size_t(b) * g.T, size_t(g.P));
  // One forward; the span inside the first of three; the span alone in a forward of its own.
  const std::vector<std::vector<int>> splits = {{0, 48}, {0, 16, 32, 48}, {0, 6, 16, 48}};
  for (const auto& cuts : splits) {
    CAPTURE(cuts.size());
    EmbedTap tap;
    ForwardHooks hooks;
    hooks.ctx = &tap;
    hooks.unit_input = EmbedTap::on_input;
    SequenceState st = m.new_sequence(g.T);
    const ImageSpan one[] = {sp.span};
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      ForwardOptions fo;
      fo.hooks = &hooks;
      if (sp.span.start >= cuts[k] && sp.span.start < cuts[k + 1]) fo.images = one;
      ForwardResult fr;
      REQUIRE(m.forward(st, ids.subspan(size_t(cuts[k]), size_t(cuts[k + 1] - cuts[k])), fr, fo).ok());
    }
    REQUIRE(tap.H.size() == size_t(g.P) * 4 * 128);
    const std::vector<float> want(g.h0.begin() + std::ptrdiff_t(size_t(b) * g.T * 512),
                                  g.h0.begin() + std::ptrdiff_t((size_t(b) * g.T + g.P) * 512));
    CHECK(max_row_rel(tap.H, want, 512) <= 1e-3);  // h.0 holds the reference's merged embeddings
    // START, NEWLINE, END and text rows are exact copies.
    for (int t = 0; t < g.P; ++t) {
      const int off = t - sp.span.start;
      const bool image_slot = off >= 0 && off < int(sp.types.size()) && sp.types[size_t(off)] == ImageSpan::kImage;
      if (image_slot) continue;
      bool same = true;
      for (int i = 0; i < 512; ++i) same = same && tap.H[size_t(t) * 512 + i] == want[size_t(t) * 512 + i];
      CAPTURE(t);
      CHECK(same);
    }
  }
}

TEST_CASE("vision-tiny: prefill with an image equals one forward; chunks keep the span whole", "[vision]") {
  const auto& m = vision_tiny();
  const Golden& g = golden_file();
  VisionResult r;
  REQUIRE(m.encode_image(golden_image(), r).ok());
  const Span sp = golden_span(r.embeds);
  const std::span<const int32_t> ids(g.ids.data() + size_t(g.grid[0]) * g.T, size_t(g.P));
  const ImageSpan one[] = {sp.span};
  SequenceState a = m.new_sequence(g.T);
  ForwardOptions fo;
  fo.images = one;
  ForwardResult fa;
  REQUIRE(m.forward(a, ids, fa, fo).ok());
  PrefillOptions po;
  po.images = one;
  po.chunk = 20;  // the span [6, 16) lies in the first chunk
  EmbedTap tap;     // PrefillOptions::hooks reach every chunk's forward
  ForwardHooks hooks;
  hooks.ctx = &tap;
  hooks.unit_input = EmbedTap::on_input;
  po.hooks = &hooks;
  SequenceState b = m.new_sequence(g.T);
  std::vector<float> lb;
  REQUIRE(m.prefill(b, ids, &lb, po).ok());
  REQUIRE(lb.size() == fa.logits.size());
  CHECK(max_row_rel(lb, fa.logits, lb.size()) <= 1e-6);
  REQUIRE(tap.H.size() == size_t(g.P) * 512);
  const std::vector<float> want(g.h0.begin() + std::ptrdiff_t(size_t(g.grid[0]) * g.T * 512),
                                g.h0.begin() + std::ptrdiff_t((size_t(g.grid[0]) * g.T + g.P) * 512));
  CHECK(max_row_rel(tap.H, want, 512) <= 1e-3);
  po.hooks = nullptr;
  // Without the image the same ids give other logits (the span rows are not token embeddings).
  SequenceState c = m.new_sequence(g.T);
  std::vector<float> lc;
  REQUIRE(m.prefill(c, ids, &lc).ok());
  CHECK(max_row_rel(lc, fa.logits, lc.size()) > 1e-3);
  // A chunk boundary inside the span is refused, and so is a span outside the prompt.
  po.chunk = 10;
  SequenceState d = m.new_sequence(g.T);
  CHECK(m.prefill(d, ids, nullptr, po).code() == Code::invalid_argument);
  ImageSpan late = sp.span;
  late.start = g.P;
  const ImageSpan lates[] = {late};
  po.chunk = 0;
  po.images = lates;
  SequenceState e = m.new_sequence(g.T);
  CHECK(m.prefill(e, ids, nullptr, po).code() == Code::invalid_argument);
}

TEST_CASE("image inputs and spans are checked", "[vision]") {
  const auto& m = vision_tiny();
  const Golden& g = golden_file();
  VisionResult r;
  ImageInput in = golden_image();
  in.patches = in.patches.subspan(1);
  CHECK(m.encode_image(in, r).code() == Code::invalid_argument);
  in = golden_image();
  in.n_llm_w += 1;
  CHECK(m.encode_image(in, r).code() == Code::invalid_argument);
  REQUIRE(m.encode_image(golden_image(), r).ok());
  const Span sp = golden_span(r.embeds);
  const std::span<const int32_t> ids(g.ids.data() + size_t(g.grid[0]) * g.T, size_t(g.P));
  auto run = [&](const ImageSpan& s, std::span<const int32_t> with) {
    SequenceState st = m.new_sequence(g.T);
    ForwardOptions fo;
    const ImageSpan one[] = {s};
    fo.images = one;
    ForwardResult fr;
    Status out = m.forward(st, with, fr, fo);
    if (!out.ok()) CHECK(st.pos == 0);  // refused before anything ran
    return out.code();
  };
  CHECK(run(sp.span, ids) == Code::ok);
  ImageSpan s = sp.span;
  s.embeds = s.embeds.subspan(128);  // one row short
  CHECK(run(s, ids) == Code::invalid_argument);
  s = sp.span;
  s.start -= 1;  // START on a text token
  CHECK(run(s, ids) == Code::invalid_argument);
  std::vector<int8_t> bad = sp.types;
  bad.back() = ImageSpan::kImage;  // no END
  s = sp.span;
  s.types = bad;
  CHECK(run(s, ids) == Code::invalid_argument);
  std::vector<int32_t> other(ids.begin(), ids.end());
  other[size_t(sp.span.start + 3)] = 7;  // a span position without image_token_id
  CHECK(run(sp.span, other) == Code::invalid_argument);
  // A text-only model takes no images.
  const auto& tiny = test::tiny_ced();
  CHECK(tiny.encode_image(golden_image(), r).code() == Code::unsupported);
}

TEST_CASE("vision-tiny golden check: units, top-k, head, Engram and the vision additions", "[vision][golden]") {
  auto rep = golden::run(vision_tiny(), DSV41_FIXTURES "/vision-tiny/golden.safetensors");
  REQUIRE(rep.ok());
  INFO(rep->summary());
  CHECK(rep->has_image);
  CHECK_FALSE(rep->has_nan);
  CHECK(rep->engram_mismatches == 0);
  CHECK(rep->engram_total == 2 * 60 * 2 * 4);
  for (const auto& u : rep->units) {
    CHECK(u.median <= 1e-3);
    CHECK(u.frac_above <= 0.05);
  }
  CHECK(rep->mean_unit_frac <= 0.02);
  for (const auto& t : rep->topk) CHECK(t.frac_above <= 0.05);
  CHECK(rep->head.max <= 1e-3);
  CHECK(rep->vision_tower.pass);
  CHECK(rep->vision_embeds.pass);
  CHECK(rep->merged_embeds.max <= 1e-3);
  CHECK(rep->dspark.median <= 1e-3);
  // With image decoding the patches are the processor's of image.png, judged exact against the golden's.
  CHECK(rep->patches_from_image == vision::image_decode_available());
  if (rep->patches_from_image) CHECK(rep->patch_mismatches == 0);
}

// The whole contract, DSpark included (2.5% of draft rows above 1e-2 since sums of squares follow the reference
// CPU run's order; 21.7% with a sequential sum).
TEST_CASE("vision-tiny meets the golden contract", "[vision][golden]") {
  auto rep = golden::run(vision_tiny(), DSV41_FIXTURES "/vision-tiny/golden.safetensors");
  REQUIRE(rep.ok());
  INFO(rep->summary());
  CHECK(rep->dspark.frac_above <= 0.15);
  CHECK(rep->pass);
}

TEST_CASE("the tensor table lists every vision tensor of the checkpoint; accounting keeps them apart", "[vision]") {
  const auto& m = vision_tiny();
  auto f = st::File::open(DSV41_FIXTURES "/vision-tiny/model.safetensors");
  REQUIRE(f.ok());
  int in_file = 0;
  for (const auto& n : f->names())
    in_file += n.rfind("vision.", 0) == 0 || n.rfind("aligner.", 0) == 0 || n.rfind("image_", 0) == 0;
  int listed = 0;
  double vision_params = 0;
  for (const auto& t : expected_tensors(m.shape()))
    if (t.group == TensorGroup::Vision) {
      ++listed;
      vision_params += double(t.params);
      CHECK(f->find(t.name) != nullptr);
    }
  CHECK(in_file == 26);  // patch 2, 2 blocks × 8, final norm, aligner 4, image_* 3
  CHECK(listed == in_file);
  ModelShape text = m.shape();
  text.has_vision = false;
  const auto with = count_params(m.shape()), without = count_params(text);
  // the text model's count, plus each backbone layer's ffn.gate.bias_vl
  CHECK(with.total == without.total + double(text.num_hidden_layers) * text.n_routed_experts);
  CHECK(with.vision == vision_params);
}
