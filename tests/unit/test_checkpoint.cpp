// Loading checkpoints: sharded directories load like a single file; every mismatch is reported at once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <dsv41/model/model.hpp>

#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;
namespace fs = std::filesystem;

namespace {
// Copies tiny-ced's config and token map into dir and writes its tensors, optionally edited.
void write_model(const fs::path& dir, int shards, const std::vector<std::string>& drop = {},
                 const std::string& reshape = "") {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = DSV41_FIXTURES "/tiny-ced";
  fs::copy_file(src / "config.json", dir / "config.json");
  fs::copy_file(src / "engram_token_map.safetensors", dir / "engram_token_map.safetensors");
  auto f = st::File::open((src / "model.safetensors").string());
  REQUIRE(f.ok());
  std::vector<std::vector<st::TensorToWrite>> parts(static_cast<size_t>(shards));
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  size_t i = 0;
  for (const auto& name : f->names()) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    const st::TensorView* t = f->find(name);
    st::TensorToWrite w;
    w.name = name;
    w.dtype = t->dtype;
    w.shape = t->shape;
    w.view = t->bytes();
    if (name == reshape) w.shape = {t->shape[1], t->shape[0]};  // same bytes, transposed shape
    const size_t k = i++ % size_t(shards);
    parts[k].push_back(std::move(w));
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05d.safetensors", k + 1, shards);
    index["weight_map"][name] = file;
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05d.safetensors", k + 1, shards);
    REQUIRE(st::write((dir / file).string(), parts[k]).ok());
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(1);
}
}  // namespace

TEST_CASE("a sharded checkpoint loads and computes exactly like the single file", "[checkpoint]") {
  const fs::path dir = fs::temp_directory_path() / "dsv41_sharded_tiny";
  write_model(dir, 3);
  auto single = Model<>::load(DSV41_FIXTURES "/tiny-ced");
  auto sharded = Model<>::load(dir.string());
  REQUIRE(single.ok());
  REQUIRE(sharded.ok());
  std::vector<int32_t> ids = {0, 5, 77, 300, 12, 9, 480, 3, 3, 3, 64};
  SequenceState a = (*single)->new_sequence(16), b = (*sharded)->new_sequence(16);
  std::vector<float> la, lb;
  REQUIRE((*single)->prefill(a, ids, &la).ok());
  REQUIRE((*sharded)->prefill(b, ids, &lb).ok());
  CHECK(la == lb);
  fs::remove_all(dir);
}

TEST_CASE("every checkpoint mismatch is reported in one error", "[checkpoint]") {
  const fs::path dir = fs::temp_directory_path() / "dsv41_broken_tiny";
  write_model(dir, 2, {"layers.3.attn.wkv.weight", "mtp.2.markov_head.head.weight"}, "layers.5.ffn.gate.weight");
  auto m = Model<>::load(dir.string());
  REQUIRE_FALSE(m.ok());
  const std::string msg = m.status().message();
  CHECK(m.status().code() == Code::mismatch);
  CHECK_THAT(msg, Catch::Contains("3 problems"));
  CHECK_THAT(msg, Catch::Contains("missing layers.3.attn.wkv.weight (F8_E4M3 [64, 128])"));
  CHECK_THAT(msg, Catch::Contains("missing mtp.2.markov_head.head.weight"));
  CHECK_THAT(msg, Catch::Contains("layers.5.ffn.gate.weight: BF16 [128, 8], expected BF16 [8, 128]"));
  fs::remove_all(dir);
}

TEST_CASE("a missing or inconsistent model directory is an error, not a crash", "[checkpoint]") {
  const fs::path dir = fs::temp_directory_path() / "dsv41_partial_tiny";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(DSV41_FIXTURES "/tiny-ced") / "config.json", dir / "config.json");
  auto no_tensors = Model<>::load(dir.string());
  REQUIRE_FALSE(no_tensors.ok());
  CHECK(no_tensors.status().code() == Code::io_error);
  write_model(dir, 1);
  fs::remove(dir / "engram_token_map.safetensors");
  auto no_map = Model<>::load(dir.string());
  REQUIRE_FALSE(no_map.ok());
  CHECK_THAT(no_map.status().message(), Catch::Contains("engram_token_map.safetensors"));
  fs::remove_all(dir);
}
