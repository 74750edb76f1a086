// Images through the engine (Request::images, SPEC §4.10) on vision-tiny: a prompt with an image gives the
// tokens of the model run by hand (encode_image, one prefill with the span, greedy decodes), also when the
// prefill budget would cut the span and beside a text-only request sharing the steps; the text engine turns
// image placeholders into spans.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <dsv41/io/safetensors.hpp>
#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/engine.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

namespace {

const Model<>& vt() {
  static auto m = Model<>::load(DSV41_FIXTURES "/vision-tiny");
  REQUIRE(m.ok());
  return **m;
}

RequestImage golden_request_image(int64_t start) {
  auto f = st::File::open(DSV41_FIXTURES "/vision-tiny/golden.safetensors");
  REQUIRE(f.ok());
  const st::TensorView* p = f->find("image_patches");
  REQUIRE(p);
  RequestImage im;
  im.patches.resize(size_t(p->numel()));
  std::memcpy(im.patches.data(), p->data, im.patches.size() * 2);
  const auto grid = golden::detail::to_int<int32_t>(*f->find("image_grid"));
  im.n_vit_h = grid[2];
  im.n_vit_w = grid[3];
  im.n_llm_h = grid[4];
  im.n_llm_w = grid[5];
  im.types.push_back(ImageSpan::kStart);
  for (int r = 0; r < im.n_llm_h; ++r) {
    for (int c = 0; c < im.n_llm_w; ++c) im.types.push_back(ImageSpan::kImage);
    im.types.push_back(ImageSpan::kNewline);
  }
  im.types.push_back(ImageSpan::kEnd);
  im.start = start;
  return im;
}

std::vector<int32_t> prompt_with_span(const RequestImage& im, int before, int after) {
  std::vector<int32_t> p;
  for (int i = 0; i < before; ++i) p.push_back(int32_t(3 + (i * 37) % 400));
  p.insert(p.end(), im.types.size(), vt().shape().image_token_id);
  for (int i = 0; i < after; ++i) p.push_back(int32_t(5 + (i * 53) % 400));
  return p;
}

// Greedy tokens of the model run by hand: the image encoded, one prefill with its span, then decodes.
std::vector<int32_t> by_hand(const std::vector<int32_t>& prompt, const RequestImage* im, int n) {
  const auto& m = vt();
  std::vector<float> embeds;
  std::vector<ImageSpan> spans;
  if (im) {
    ImageInput in;
    in.patches = im->patches;
    in.n_vit_h = im->n_vit_h;
    in.n_vit_w = im->n_vit_w;
    in.n_llm_h = im->n_llm_h;
    in.n_llm_w = im->n_llm_w;
    VisionResult r;
    REQUIRE(m.encode_image(in, r).ok());
    embeds = r.embeds;
    spans.push_back({im->start, im->types, embeds});
  }
  auto st = m.new_sequence(int64_t(prompt.size()) + n + 2);
  std::vector<float> logits;
  PrefillOptions po;
  po.images = spans;
  REQUIRE(m.prefill(st, prompt, &logits, po).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    if (i + 1 == n) break;
    typename Model<>::DecodeItem item{&st, t, &logits};
    REQUIRE(m.decode(std::span<typename Model<>::DecodeItem>(&item, 1)).ok());
  }
  return out;
}

}  // namespace

TEST_CASE("engine: a prompt with an image equals the model run by hand, chunks never cut the span",
          "[engine][vision]") {
  const RequestImage im = golden_request_image(5);
  const std::vector<int32_t> prompt = prompt_with_span(im, 5, 7);
  const std::vector<int32_t> want = by_hand(prompt, &im, 6);
  // The image matters: the same span with a blank image gives other tokens.
  RequestImage blank = im;
  std::fill(blank.patches.begin(), blank.patches.end(), uint16_t(0));
  CHECK(by_hand(prompt, &blank, 6) != want);
  const std::vector<int32_t> text_prompt = {7, 9, 11, 13, 15};
  const std::vector<int32_t> text_want = by_hand(text_prompt, nullptr, 6);
  for (int chunk : {0, 4, 9}) {  // 4 and 9 would end inside the span (positions 5..5+len)
    INFO("prefill_chunk " << chunk);
    EngineOptions o;
    o.step_tokens = 24;
    o.max_running = 4;
    o.prefill_chunk = chunk;
    auto e = Engine<Model<>>::make(vt(), o);
    REQUIRE(e.ok());
    Request r;
    r.prompt = prompt;
    r.max_tokens = 6;
    r.images = {im};
    Request t;
    t.prompt = text_prompt;
    t.max_tokens = 6;
    auto ir = e->submit(r), it = e->submit(t);
    REQUIRE(ir.ok());
    REQUIRE(it.ok());
    e->run_until_idle(200);
    REQUIRE(e->idle());
    auto info = e->poll(*ir);
    REQUIRE(info.ok());
    INFO(info->status.to_string());
    CHECK(info->prompt_tokens == int64_t(prompt.size()));
    auto got = e->take_tokens(*ir), got_t = e->take_tokens(*it);
    REQUIRE(got.ok());
    REQUIRE(got_t.ok());
    CHECK(*got == want);
    CHECK(*got_t == text_want);
  }
  // A span outside the prompt is refused.
  EngineOptions o;
  auto e = Engine<Model<>>::make(vt(), o);
  REQUIRE(e.ok());
  Request bad;
  bad.prompt = prompt;
  bad.images = {golden_request_image(int64_t(prompt.size()) - 3)};
  auto ib = e->submit(bad);
  REQUIRE(ib.ok());
  e->step();
  auto bi = e->poll(*ib);
  REQUIRE(bi.ok());
  CHECK(bi->finish == RequestFinish::error);
}
