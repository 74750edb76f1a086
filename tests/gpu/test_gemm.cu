// GPU check: FP8 and FP4 block-scaled GEMMs match cpu::linear,
// tiny and released shapes (bounds derived in check_gemm.cuh).
#include <catch2/catch.hpp>

#include "check_gemm.cuh"

TEST_CASE("FP8 and FP4 block-scaled GEMMs match cpu::linear", "[gpu][gemm]") {
  for (const auto& r : dsv41::gputest::cases_gemm()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
