// GPU check: fused mHC step matches cpu::hc_post, hc_mixes, hc_pre, rmsnorm,
// tiny and released shapes (bounds derived in check_mhc.cuh).
#include <catch2/catch.hpp>

#include "check_mhc.cuh"

TEST_CASE("fused mHC step matches cpu::hc_post, hc_mixes, hc_pre, rmsnorm", "[gpu][mhc]") {
  for (const auto& r : dsv41::gputest::cases_mhc()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
