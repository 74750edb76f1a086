// TextEngine (runtime/text_engine.hpp) on tiny-ced: concurrent text requests each equal TextModel::complete()
// alone (greedy and seeded), stop strings, cancellation, refusals, usage.
#include <catch2/catch.hpp>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <dsv41/runtime/text_engine.hpp>

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

struct Out {
  std::string streamed;
  std::vector<int32_t> ids;  // the ids the pieces came with
  int done = 0, cancel_after = -1, pieces = 0;
  text::TextDone d;
};
bool on_text(void* c, RequestId, int32_t id, std::string_view p) {
  auto& o = *static_cast<Out*>(c);
  o.streamed += p;
  if (id >= 0) o.ids.push_back(id);
  ++o.pieces;
  return o.cancel_after < 0 || o.pieces < o.cancel_after;
}
void on_done(void* c, const text::TextDone& d) {
  auto& o = *static_cast<Out*>(c);
  ++o.done;
  o.d = d;
}

text::TextRequest req_of(const std::string& prompt, int max_tokens, float temp, uint64_t seed, Out& out) {
  text::TextRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temp;
  r.sampling.seed = seed;
  r.on_text = on_text;
  r.on_done = on_done;
  r.ctx = &out;
  return r;
}

text::TextOptions opts_of(const text::TextRequest& r) {
  text::TextOptions o;
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.stop = r.stop;
  return o;
}

void run(text::TextEngineBase& e, int max_steps = 2000) {
  for (int i = 0; i < max_steps && !e.idle(); ++i) e.step();
  REQUIRE(e.idle());
}
}  // namespace

TEST_CASE("text engine: concurrent requests each equal TextModel::complete alone", "[text_engine]") {
  EngineOptions eo;
  eo.step_tokens = 16;  // prompts prefill over several steps, alongside the other's decode
  eo.max_running = 4;
  auto e = text::TextEngine<Model<>>::make(lm(), eo);
  REQUIRE(e.ok());
  const std::vector<std::string> prompts = {"<｜begin▁of▁sentence｜>def main():",
                                            "<｜begin▁of▁sentence｜>import numpy as np\nimport os\nclass Foo:", "x = [",
                                            "<｜begin▁of▁sentence｜>Hello, wörld ✓"};
  for (float temp : {0.f, 0.9f}) {
    std::vector<Out> outs(prompts.size());
    std::vector<text::TextRequest> reqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      reqs.push_back(req_of(prompts[i], 20 + int(i) * 3, temp, 7 + i, outs[i]));
      auto id = (*e)->submit(reqs.back());
      REQUIRE(id.ok());
    }
    run(**e);
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO("prompt " << i << " temperature " << temp);
      auto alone = lm().complete(prompts[i], opts_of(reqs[i]));
      REQUIRE(alone.ok());
      REQUIRE(outs[i].done == 1);
      const text::TextResult& r = outs[i].d.result;
      CHECK(outs[i].d.status.ok());
      CHECK(r.text == alone->text);
      CHECK(r.ids == alone->ids);
      CHECK(outs[i].streamed == alone->text);  // the deltas make the text
      CHECK(outs[i].ids == alone->ids);
      CHECK(r.finish == alone->finish);
      CHECK(r.prompt_tokens == alone->prompt_tokens);
      CHECK(r.completion_tokens == int64_t(alone->ids.size()));
      CHECK(r.cached_tokens == 0);
    }
  }
}

TEST_CASE("text engine: stop strings, cancel, refusals", "[text_engine]") {
  EngineOptions eo;
  eo.step_tokens = 32;
  eo.max_running = 2;
  eo.max_queued = 1;
  auto made = text::TextEngine<Model<>>::make(lm(), eo);
  REQUIRE(made.ok());
  auto& e = **made;

  // A stop string found in the free text cuts it there, as TextModel does; nothing past it is streamed.
  Out full;
  REQUIRE(e.submit(req_of("import", 40, 0.9f, 5, full)).ok());
  run(e);
  REQUIRE(full.d.result.text.size() >= 6);
  const std::string stop = full.d.result.text.substr(3, 2);
  Out cut;
  auto rq = req_of("import", 40, 0.9f, 5, cut);
  rq.stop = {stop};
  REQUIRE(e.submit(rq).ok());
  run(e);
  auto alone = lm().complete("import", opts_of(rq));
  REQUIRE(alone.ok());
  CHECK(cut.d.result.finish == text::TextFinish::stop);
  CHECK(cut.d.result.text == full.d.result.text.substr(0, full.d.result.text.find(stop)));
  CHECK(cut.d.result.text == alone->text);
  CHECK(cut.streamed == cut.d.result.text);

  // on_text's false cancels after that piece; cancel() from the host ends a request with on_done once.
  Out c3;
  c3.cancel_after = 3;
  REQUIRE(e.submit(req_of("x", 50, 0.f, 1, c3)).ok());
  Out c_host;
  auto id = e.submit(req_of("y = 1", 50, 0.f, 1, c_host));
  REQUIRE(id.ok());
  e.step();
  e.step();
  REQUIRE(e.cancel(*id).ok());
  CHECK(c_host.done == 1);
  CHECK(c_host.d.result.finish == text::TextFinish::cancelled);
  run(e);
  CHECK(c3.done == 1);
  CHECK(c3.d.result.finish == text::TextFinish::cancelled);
  CHECK(c3.d.result.ids.size() == 3);
  CHECK(c_host.done == 1);

  // Bad requests are refused at submit, without callbacks.
  Out bad;
  auto rb = req_of("x", 5, 0.f, 1, bad);
  rb.stop = {""};
  CHECK(e.submit(rb).status().code() == Code::invalid_argument);
  std::string huge;
  for (int i = 0; i < 5000; ++i) huge += "<｜User｜>";
  CHECK(e.submit(req_of(huge, 5, 0.f, 1, bad)).status().code() == Code::out_of_range);
  auto rt = req_of("x", 5, 0.5f, 1, bad);
  rt.sampling.top_p = 2.f;
  CHECK(e.submit(rt).status().code() == Code::invalid_argument);
  // A full queue refuses: 2 running + 1 queued.
  std::vector<Out> many(4);
  int accepted = 0;
  for (auto& o : many) accepted += e.submit(req_of("z", 4, 0.f, 1, o)).ok() ? 1 : 0;
  CHECK(accepted == 3);
  CHECK(e.submit(req_of("z", 4, 0.f, 1, bad)).status().code() == Code::resource_exhausted);
  run(e);
  CHECK(bad.done == 0);
  int finished = 0;
  for (auto& o : many) finished += o.done;
  CHECK(finished == 3);
}

TEST_CASE("text engine: client threads submit while one thread steps", "[text_engine][threads][tsan]") {
  EngineOptions eo;
  eo.step_tokens = 24;
  eo.max_running = 3;
  auto made = text::TextEngine<Model<>>::make(lm(), eo);
  REQUIRE(made.ok());
  auto& e = **made;
  const int n = 6;
  std::vector<Out> outs(n);
  std::vector<text::TextRequest> reqs;
  for (int i = 0; i < n; ++i) reqs.push_back(req_of("def f" + std::to_string(i) + "(", 12, 0.8f, 100 + i, outs[i]));
  std::atomic<int> submitted{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      while (!e.submit(reqs[i]).ok()) std::this_thread::yield();
      ++submitted;
    });
  for (int k = 0; k < 100000 && (submitted < n || !e.idle()); ++k) {
    if (e.idle()) std::this_thread::yield();
    else e.step();
  }
  for (auto& t : clients) t.join();
  run(e);
  for (int i = 0; i < n; ++i) {
    auto alone = lm().complete(reqs[i].prompt, opts_of(reqs[i]));
    REQUIRE(alone.ok());
    CHECK(outs[i].done == 1);
    CHECK(outs[i].d.result.text == alone->text);
  }
}
