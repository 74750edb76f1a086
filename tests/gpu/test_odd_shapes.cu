// GPU check: the CUDA model runs shapes no preset has (tests/gpu/odd_shape_model.hpp: hc_mult 1, 2, 3, 8,
// widths 96..224, more than 8 experts per token) and meets the golden contract against the CPU model's own
// run of the same random weights (the CPU half: tests/unit/test_odd_shapes.cpp).
#include <catch2/catch.hpp>

#include <filesystem>

#include <dsv41/backend/cuda/kernels/shape_support.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/golden.hpp>

#include "odd_shape_model.hpp"

using namespace dsv41;

TEST_CASE("CUDA model passes the golden check at odd shapes", "[gpu][model][odd_shapes]") {
  namespace fs = std::filesystem;
  for (const auto& o : golden_tools::odd_shapes()) {
    INFO(o.name);
    const std::string dir = (fs::temp_directory_path() / ("dsv41_gpu_odd_" + o.name)).string();
    const Status w = golden_tools::write_odd_model(std::string(DSV41_FIXTURES) + "/tiny-ced", dir, o, 20261201);
    INFO(w.to_string());
    REQUIRE(w.ok());
    auto m = Model<configs::Dynamic, Cuda>::load(dir);
    INFO((m.ok() ? std::string() : m.status().to_string()));
    REQUIRE(m.ok());
    CHECK(gpu::check_supported((*m)->shape()).ok());
    auto rep = golden::run(**m, dir + "/golden.safetensors");
    REQUIRE(rep.ok());
    INFO(rep->summary());
    CHECK(rep->pass);
    CHECK(!rep->has_nan);
    CHECK(rep->engram_mismatches == 0);
    CHECK(rep->stages.size() == size_t(2 * (*m)->shape().n_dspark()));  // each DSpark stage on its golden input
    fs::remove_all(dir);
  }
}
