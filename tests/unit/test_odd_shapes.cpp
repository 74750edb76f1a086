// The CPU half of the odd-shape check (tests/gpu/test_odd_shapes.cu): tiny models at shapes no preset has
// (tests/gpu/odd_shape_model.hpp) are written with random weights and a CPU-made golden file, the loader
// accepts them, the CUDA forward's shape rule (gpu::check_supported's, here validate_shape) accepts them, and
// the CPU model, loaded again from the files, meets its own golden at the contract's thresholds.
#include <catch2/catch.hpp>

#include <filesystem>

#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#include "../gpu/odd_shape_model.hpp"
#include "fixture.hpp"

#ifndef DSV41_FIXTURES
#define DSV41_FIXTURES "tests/data/golden"
#endif

using namespace dsv41;

TEST_CASE("odd-shape models: CPU golden written and met by the CPU model", "[model][golden][odd_shapes]") {
  namespace fs = std::filesystem;
  for (const auto& o : golden_tools::odd_shapes()) {
    INFO(o.name);
    const std::string dir = (fs::temp_directory_path() / ("dsv41_odd_" + o.name)).string();
    const Status w = golden_tools::write_odd_model(DSV41_FIXTURES "/tiny-ced", dir, o, 20261201);
    INFO(w.to_string());
    REQUIRE(w.ok());
    auto m = Model<>::load(dir);
    INFO((m.ok() ? std::string() : m.status().to_string()));
    REQUIRE(m.ok());
    const ModelShape& s = (*m)->shape();
    for (const auto& [k, v] : o.text.items()) {  // the file's shape is the requested one, not tiny-ced's
      if (k == "hc_mult") CHECK(s.hc_mult == v.get<int>());
      if (k == "hidden_size") CHECK(s.hidden_size == v.get<int>());
      if (k == "head_dim") CHECK(s.head_dim == v.get<int>());
      if (k == "num_experts_per_tok") CHECK(s.num_experts_per_tok == v.get<int>());
    }
    CHECK(validate_shape(s).ok());
    auto rep = golden::run(**m, dir + "/golden.safetensors");
    REQUIRE(rep.ok());
    INFO(rep->summary());
    CHECK(rep->pass);
    CHECK(!rep->has_nan);
    CHECK(rep->engram_mismatches == 0);
    // Every DSpark stage judged on its own golden input; the CPU meets its own golden exactly.
    REQUIRE(rep->stages.size() == size_t(2 * s.n_dspark()));
    for (const auto& st : rep->stages) CHECK(st.max == 0.0);
    CHECK(rep->dspark.max == 0.0);
    CHECK(rep->dspark_free.max == 0.0);
    fs::remove_all(dir);
  }
}
