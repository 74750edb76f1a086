// GPU check of the continuous-batching engine (runtime/engine.hpp) on Model<Dynamic, Cuda>: concurrent greedy
// requests (one batched decode per step, the prefill chunks and the speculative verify blocks of a step in one
// forward each) return the tokens generate() gives alone on the GPU, a cancel frees its slot at once, and
// speculative greedy requests return the plain greedy tokens; Model::prefill_batch against prefill alone.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
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

std::unique_ptr<GModel> load_tiny_ced() {
  auto g = GModel::load(engine_data_dir(std::string(DSV41_TEST_DATA) + "/golden/tiny-ced", "tests/data/golden/tiny-ced"));
  REQUIRE(g.ok());
  return std::move(*g);
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
  const auto g = load_tiny_ced();
  const GModel& m = *g;
  const int V = m.shape().vocab_size;
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt = engine_prompt(6 + 7 * i, V, 300 + i);
    r.max_tokens = 10;
    r.speculative = i >= 4 && m.shape().n_dspark() > 0;  // two: their verify blocks share one forward
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
    if (reqs[i].speculative) CHECK(info->spec_steps > 0);
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

TEST_CASE("GPU prefill_batch: several sequences' chunks in one forward equal each alone", "[gpu][engine]") {
  const auto g = load_tiny_ced();
  const GModel& m = *g;
  const int V = m.shape().vocab_size;
  // Three sequences; the first two already hold a chunk, so the batch mixes positions; one chunk of one token.
  const std::vector<std::vector<int32_t>> first = {engine_prompt(9, V, 500), engine_prompt(17, V, 501), {}};
  const std::vector<std::vector<int32_t>> chunk = {engine_prompt(13, V, 502), engine_prompt(1, V, 503),
                                                   engine_prompt(21, V, 504)};
  std::vector<GModel::State> alone, together;
  std::vector<std::vector<float>> la(3), lt(3);
  for (int i = 0; i < 3; ++i) {
    for (auto* v : {&alone, &together}) {
      auto st = m.new_sequence(128);
      REQUIRE(st.ok());
      if (!first[size_t(i)].empty()) REQUIRE(m.prefill(*st, first[size_t(i)]).ok());
      v->push_back(std::move(*st));
    }
    REQUIRE(m.prefill(alone[size_t(i)], chunk[size_t(i)], &la[size_t(i)]).ok());
  }
  std::vector<GModel::PrefillItem> items;
  for (int i = 0; i < 3; ++i) items.push_back({&together[size_t(i)], chunk[size_t(i)], &lt[size_t(i)]});
  REQUIRE(m.prefill_batch(items).ok());
  // 52 rows: below every row count at which a kernel choice changes (wo_a on cuBLASLt above 64), so the same bits.
  for (int i = 0; i < 3; ++i) {
    INFO("sequence " << i);
    CHECK(together[size_t(i)].pos == alone[size_t(i)].pos);
    REQUIRE(lt[size_t(i)].size() == size_t(V));
    CHECK(lt[size_t(i)] == la[size_t(i)]);
  }
  // The states continue alike: one decode step of all three.
  const std::vector<int32_t> next = engine_prompt(3, V, 505);
  std::vector<GModel::DecodeItem> da, dt;
  std::vector<std::vector<float>> oa(3), ot(3);
  for (int i = 0; i < 3; ++i) {
    da.push_back({&alone[size_t(i)], next[size_t(i)], &oa[size_t(i)]});
    dt.push_back({&together[size_t(i)], next[size_t(i)], &ot[size_t(i)]});
  }
  REQUIRE(m.decode(da).ok());
  REQUIRE(m.decode(dt).ok());
  for (int i = 0; i < 3; ++i) CHECK(ot[size_t(i)] == oa[size_t(i)]);

  // An invalid item (a chunk past its sequence's capacity) fails the call before anything runs.
  auto small = m.new_sequence(8);
  REQUIRE(small.ok());
  const std::vector<int32_t> too_long = engine_prompt(9, V, 506);
  const int64_t p0 = together[0].pos;
  std::vector<GModel::PrefillItem> bad = {{&together[0], chunk[0], nullptr}, {&*small, too_long, nullptr}};
  const Status st = m.prefill_batch(bad);
  CHECK(st.code() == Code::out_of_range);
  CHECK(together[0].pos == p0);
  CHECK(small->pos == 0);
}
