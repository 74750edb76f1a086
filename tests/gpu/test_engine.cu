// GPU check of the continuous-batching engine (runtime/engine.hpp) on Model<Dynamic, Cuda>: concurrent greedy
// requests (one batched decode per step) each return the tokens generate() gives alone on the GPU, a cancel
// frees its slot at once, and a speculative greedy request returns the plain greedy tokens.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/runtime/engine.hpp>
#include <dsv41/runtime/generate.hpp>

using namespace dsv41;
using GModel = Model<configs::Dynamic, Cuda>;

namespace {

std::string engine_data_dir(const std::string& built, const std::string& local) {
  return std::filesystem::exists(built) ? built : local;
}

std::vector<int32_t> engine_prompt(int n, int V, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = uint32_t(seed) * 2654435761u + 7;
  for (auto& t : v) {
    x = x * 1664525u + 1013904223u;
    t = int32_t(3 + (x >> 8) % uint32_t(V - 8));
  }
  return v;
}

std::vector<int32_t> generate_alone(const GModel& m, const Request& r) {
  GenerateOptions o;
  o.max_tokens = r.max_tokens;
  o.sampling = r.sampling;
  o.speculative = r.speculative;
  auto st = m.new_sequence(int64_t(r.prompt.size()) + r.max_tokens + 4);
  REQUIRE(st.ok());
  auto g = generate(m, *st, r.prompt, o);
  REQUIRE(g.ok());
  return g->tokens;
}

}  // namespace

TEST_CASE("GPU engine: concurrent greedy requests equal generate() alone", "[gpu][engine]") {
  const std::string dir =
      engine_data_dir(std::string(DSV41_TEST_DATA) + "/golden/tiny-ced", "tests/data/golden/tiny-ced");
  auto g = GModel::load(dir);
  REQUIRE(g.ok());
  const GModel& m = **g;
  const int V = m.shape().vocab_size;
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = engine_prompt(6 + 7 * i, V, 300 + i);
    r.max_tokens = 10;
    r.speculative = i == 5 && m.shape().n_dspark() > 0;
    reqs.push_back(r);
  }
  EngineOptions o;
  o.step_tokens = 48;
  o.max_running = 6;
  auto made = Engine<GModel>::make(m, o);
  REQUIRE(made.ok());
  auto& e = *made;
  std::vector<RequestId> ids;
  for (const auto& r : reqs) {
    auto id = e.submit(r);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  int most_decoded = 0;
  for (int steps = 0; !e.idle(); ++steps) {
    REQUIRE(steps < 100);
    most_decoded = std::max(most_decoded, e.step().decoded);
  }
  CHECK(most_decoded >= 3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    auto info = e.poll(ids[i]);
    REQUIRE(info.ok());
    CHECK(info->finish == RequestFinish::length);
    CHECK(*e.take_tokens(ids[i]) == generate_alone(m, reqs[i]));
  }

  // Cancel during prefill frees the slot and its reserved bytes at once.
  Request longp;
  longp.prompt = engine_prompt(200, V, 400);
  longp.max_tokens = 4;
  auto id = e.submit(longp);
  REQUIRE(id.ok());
  e.step();
  REQUIRE(e.poll(*id)->phase == RequestPhase::prefilling);
  REQUIRE(e.cancel(*id).ok());
  CHECK(e.counts().prefilling == 0);
  CHECK(e.counts().cache_bytes == 0);
  CHECK(e.poll(*id)->finish == RequestFinish::cancelled);
}
