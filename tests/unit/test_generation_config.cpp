#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <dsv41/runtime/generation_config.hpp>

using namespace dsv41;

TEST_CASE("generation_config.json gives sampling defaults", "[generation_config]") {
  auto g = parse_generation_config(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                       "max_new_tokens": 512, "bos_token_id": 0})", "t");
  REQUIRE(g.ok());
  CHECK(*g->temperature == Approx(0.6f));
  CHECK(*g->top_p == Approx(0.95f));
  CHECK(*g->top_k == 20);
  CHECK(*g->max_new_tokens == 512);
  CHECK(!g->min_p.has_value());

  auto greedy = parse_generation_config(R"({"do_sample": false, "temperature": 0.7})", "t");
  REQUIRE(greedy.ok());
  CHECK(*greedy->temperature == 0.f);

  CHECK(!parse_generation_config("[1]", "t").ok());
  CHECK(!parse_generation_config("{not json", "t").ok());
  auto bad = parse_generation_config(R"({"top_p": 1.5})", "t");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("top_p") != std::string::npos);
  CHECK(!parse_generation_config(R"({"top_k": 2.5})", "t").ok());
  CHECK(!parse_generation_config(R"({"do_sample": "yes"})", "t").ok());
}

TEST_CASE("generation_config.json is optional in a model directory", "[generation_config]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "dsv41_generation_config_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto none = load_generation_defaults(dir.string());
  REQUIRE(none.ok());
  CHECK(!none->temperature.has_value());
  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.3})";
  auto some = load_generation_defaults(dir.string());
  REQUIRE(some.ok());
  CHECK(*some->temperature == Approx(0.3f));
  std::ofstream(dir / "generation_config.json") << "{";
  CHECK(!load_generation_defaults(dir.string()).ok());
  fs::remove_all(dir);
}
