// TextModel: per-token streaming (id and text), stop strings, cancellation, errors, seeds.
#include <catch2/catch.hpp>

#include <dsv41/runtime/text_model.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif
#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

using namespace dsv41;
using TM = text::TextModel<Model<>>;

namespace {
const TM& lm() {
  static auto model = Model<>::load(DSV41_FIXTURES "/tiny-ced");
  REQUIRE(model.ok());
  static auto tok = text::Tokenizer::from_json_file(DSV41_TEST_DATA "/tiny-text/tokenizer.json");
  REQUIRE(tok.ok());
  static auto t = TM::make(**model, *tok);
  REQUIRE(t.ok());
  return *t;
}
struct Seen {
  std::vector<int32_t> ids;
  std::string text;
  int calls = 0, cancel_after = -1;
};
bool record(void* c, int32_t id, std::string_view piece) {
  auto& s = *static_cast<Seen*>(c);
  ++s.calls;
  if (id >= 0) s.ids.push_back(id);
  s.text += piece;
  return s.cancel_after < 0 || s.calls < s.cancel_after;
}
}  // namespace

TEST_CASE("streaming: one call per token with its id; the pieces make the text", "[text]") {
  Seen seen;
  text::TextOptions o;
  o.max_tokens = 24;
  o.sampling.temperature = 0.9f;
  o.sampling.seed = 11;
  o.on_text = record;
  o.ctx = &seen;
  auto r = lm().complete("<｜begin▁of▁sentence｜>def main():", o);
  REQUIRE(r.ok());
  CHECK(seen.ids == r->ids);
  CHECK(seen.text == r->text);
  CHECK(seen.calls == int(r->ids.size()) + 1);  // + the final flush
  CHECK(r->completion_tokens == int64_t(r->ids.size()));
  // Same seed, same text; another seed, (almost surely) another text.
  auto again = lm().complete("<｜begin▁of▁sentence｜>def main():", o);
  REQUIRE(again.ok());
  CHECK(again->text == r->text);
}

TEST_CASE("stop strings cut the text before the first occurrence", "[text]") {
  text::TextOptions o;
  o.max_tokens = 40;
  o.sampling.temperature = 0.9f;
  o.sampling.seed = 5;
  auto full = lm().complete("import", o);
  REQUIRE(full.ok());
  REQUIRE(full->text.size() >= 6);
  const std::string stop = full->text.substr(3, 2);
  o.stop = {stop};
  Seen seen;
  o.on_text = record;
  o.ctx = &seen;
  auto cut = lm().complete("import", o);
  REQUIRE(cut.ok());
  CHECK(cut->text == full->text.substr(0, full->text.find(stop)));
  CHECK(seen.text == cut->text);  // nothing past the stop string was ever streamed
  CHECK(cut->finish == text::TextFinish::stop);
}

TEST_CASE("the callback cancels; bad requests are errors", "[text]") {
  Seen seen;
  seen.cancel_after = 3;
  text::TextOptions o;
  o.max_tokens = 50;
  o.on_text = record;
  o.ctx = &seen;
  auto r = lm().complete("x", o);
  REQUIRE(r.ok());
  CHECK(r->finish == text::TextFinish::cancelled);
  CHECK(r->ids.size() == 3);
  text::TextOptions bad;
  bad.stop = {""};
  CHECK(lm().complete("x", bad).status().code() == Code::invalid_argument);
  std::string huge;
  for (int i = 0; i < 5000; ++i) huge += "<｜User｜>";
  CHECK(lm().complete(huge, text::TextOptions{}).status().code() == Code::out_of_range);
}
