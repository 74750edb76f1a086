// Shared by the unit tests: the tiny-ced fixture model (loaded once per test binary), its test prompts, and the
// suite's model types.
#pragma once
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include <dsv41/model/model.hpp>

// The suite's two CPU model types are instantiated once, in fixture.cpp, where the build says it links that unit
// (dsv41_tests: DSV41_TEST_MODELS_INSTANTIATED). Under its -O0 no other unit then compiles their members
// (test_engine.cpp 41 -> 19 CPU-s). Binaries that take single units (the TSan tests) instantiate them as before.
#if DSV41_TEST_MODELS_INSTANTIATED
namespace dsv41 {
extern template class Model<configs::TinyCed>;
extern template class Model<>;
}  // namespace dsv41
#endif

namespace dsv41::test {

using TinyModel = Model<configs::TinyCed>;

inline const TinyModel& tiny_ced() {
  static auto m = TinyModel::load(DSV41_FIXTURES "/tiny-ced");  // test-local cache
  REQUIRE(m.ok());
  return **m;
}

// n token ids in [3, 503) from an LCG seeded by (seed, salt).
inline std::vector<int32_t> tiny_prompt(int n, int seed, uint32_t salt = 1) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = uint32_t(seed) * 2654435761u + salt;
  for (auto& t : v) {
    x = x * 1664525u + 1013904223u;
    t = int32_t(3 + (x >> 8) % 500);
  }
  return v;
}

}  // namespace dsv41::test
