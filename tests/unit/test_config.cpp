// Config parsing, derived layer roles, parameter and cache accounting, compile-time presets.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <dsv41/config/accounting.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/model/model.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

using namespace dsv41;

static nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST_CASE("release config: roles follow SPEC §1", "[config]") {
  auto s = load_config(DSV41_TEST_DATA "/release/config.json");
  REQUIRE(s.ok());
  const auto sched = make_schedule(*s);
  REQUIRE(sched.size() == 43);
  CHECK(first_decoder_layer(*s) == 20);
  for (int l : {0, 1}) CHECK(sched[l].mode == AttnMode::Window);
  for (int l : {2, 8, 14, 20}) CHECK(sched[l].mode == AttnMode::Full);
  for (int l : {24, 28, 32, 36}) {
    CHECK(sched[l].mode == AttnMode::Reindex);
    CHECK(sched[l].uses_candidates);
    CHECK(sched[l].kv_source == 20);
  }
  CHECK(sched[20].candidate_source);
  CHECK_FALSE(sched[20].uses_candidates);
  CHECK(sched[13].mode == AttnMode::Reuse);
  CHECK(sched[13].kv_source == 8);
  CHECK(sched[13].index_source == 8);
  CHECK(sched[27].mode == AttnMode::Reuse);
  CHECK(sched[27].index_source == 24);
  CHECK(sched[27].kv_source == 20);
  CHECK(sched[1].engram_slot == 0);
  CHECK(sched[14].engram_slot == 1);
  CHECK(sched[37].tap_slot == 0);
  CHECK(sched[39].tap_slot == 2);
  for (int l = 40; l < 43; ++l) {
    CHECK(sched[l].dspark);
    CHECK(sched[l].n_experts == 128);
    CHECK(sched[l].top_k == 3);
  }
  CHECK(sched[19].encoder);
  CHECK_FALSE(sched[20].encoder);
}

TEST_CASE("release config: 890 bytes of global KV per token and the activated parameters", "[config]") {
  auto s = load_config(DSV41_TEST_DATA "/release/config.json");
  REQUIRE(s.ok());
  const auto c = cache_bytes(*s);
  CHECK(c.main_entry == 288);
  CHECK(c.index_entry == 68);
  CHECK(c.window_entry == 528);
  CHECK(c.entries_per_token == Approx(2.5));
  CHECK(c.global_per_token == Approx(890.0));
  CHECK(c.window_per_sequence == 43 * 128 * 528);
  const auto p = count_params(*s);
  // SPEC §1: 16.1 B activated per decode token, 8.3 B over layers 0-20.
  CHECK(p.active_decode / 1e9 == Approx(16.1).margin(0.05));
  CHECK(p.active_prefill / 1e9 == Approx(8.3).margin(0.05));
  // 552 B parameters without the Engram tables and DSpark stages.
  CHECK((p.total - p.engram_tables - p.dspark) / 1e9 == Approx(552).margin(0.5));
  CHECK(p.engram_tables == Approx(256.0 * (384006168.0 + 384016682.0)));
}

TEST_CASE("presets equal the configs they describe", "[config]") {
  auto rel = load_config(DSV41_TEST_DATA "/release/config.json");
  auto tiny = load_config(DSV41_TEST_DATA "/golden/tiny-ced/config.json");
  REQUIRE(rel.ok());
  REQUIRE(tiny.ok());
  CHECK(detail::compare_shapes(*rel, configs::to_shape<configs::V41Flash>()).ok());
  CHECK(detail::compare_shapes(*tiny, configs::to_shape<configs::TinyCed>()).ok());
  Status bad = detail::compare_shapes(*tiny, configs::to_shape<configs::V41Flash>());
  CHECK(bad.code() == Code::mismatch);
  CHECK_THAT(bad.message(), Catch::Contains("hidden_size"));
  STATIC_REQUIRE(configs::global_kv_bytes_per_token<configs::V41Flash>() == 890.0);
  STATIC_REQUIRE(configs::window_bytes_per_sequence<configs::V41Flash>() == 2906112);
}

TEST_CASE("tiny-ced roles match the fixture README", "[config]") {
  auto s = load_config(DSV41_TEST_DATA "/golden/tiny-ced/config.json");
  REQUIRE(s.ok());
  const auto r = make_schedule(*s);
  CHECK(r[2].mode == AttnMode::Full);
  CHECK(r[3].mode == AttnMode::Reuse);
  CHECK(r[4].mode == AttnMode::Full);
  CHECK(r[4].candidate_source);
  CHECK(r[5].mode == AttnMode::Reuse);
  CHECK(r[6].mode == AttnMode::Reindex);
  CHECK(r[6].uses_candidates);
  CHECK(r[7].mode == AttnMode::Reuse);
  CHECK(r[7].index_source == 6);
}

TEST_CASE("malformed configs are rejected with every problem named", "[config]") {
  auto base = read_json(DSV41_TEST_DATA "/golden/tiny-ced/config.json");
  SECTION("missing and mistyped keys are all reported") {
    auto j = base;
    j["text_config"].erase("hidden_size");
    j["text_config"]["head_dim"] = "64";
    auto s = parse_config(j);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == Code::format_error);
    CHECK_THAT(s.status().message(), Catch::Contains("text_config.hidden_size: missing"));
    CHECK_THAT(s.status().message(), Catch::Contains("text_config.head_dim: expected an integer"));
  }
  SECTION("compress_ratios of the wrong length") {
    auto j = base;
    j["text_config"]["compress_ratios"].erase(0);
    auto s = parse_config(j);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.status().message(), Catch::Contains("compress_ratios has 10 entries"));
  }
  SECTION("a compressed layer without a KV source") {
    auto j = base;
    j["text_config"]["kv_source_layer_ids"] = {4};
    j["text_config"]["index_source_layer_ids"] = {4, 6};
    auto s = parse_config(j);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.status().message(), Catch::Contains("layer 2 has ratio 2 but no KV source"));
  }
  SECTION("sizes a hostile file could push are bounded (fuzz_config: 10^6 experts took over 2 GB)") {
    for (auto [key, value] : {std::pair<const char*, int64_t>{"n_routed_experts", 1000000},
                              {"num_hidden_layers", 100000}, {"vocab_size", int64_t(1) << 30},
                              {"hidden_size", int64_t(1) << 20}}) {
      INFO(key);
      auto j = base;
      j["text_config"][key] = value;
      auto s = parse_config(j);
      REQUIRE_FALSE(s.ok());
      CHECK(s.status().code() == Code::format_error);
    }
    auto j = base;
    j["text_config"]["n_routed_experts"] = 1000000;
    CHECK_THAT(parse_config(j).status().message(), Catch::Contains("n_routed_experts must be at most 4096"));
    j = base;
    j["text_config"]["engram_num_embeddings"] = {int64_t(1) << 62, 5};
    CHECK_THAT(parse_config(j).status().message(), Catch::Contains("engram_num_embeddings entries must be in 1..2^40"));
  }
  SECTION("not an object") {
    auto s = parse_config(nlohmann::json::array());
    REQUIRE_FALSE(s.ok());
  }
  SECTION("unreadable file") {
    auto s = load_config("/nonexistent/config.json");
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == Code::io_error);
  }
}
