// GPU check: MoE (routing, sorted grouped FP4 experts, shared expert) matches cpu::moe,
// tiny and released shapes (bounds derived in check_moe.cuh).
#include <catch2/catch.hpp>

#include "check_moe.cuh"

TEST_CASE("MoE (routing, sorted grouped FP4 experts, shared expert) matches cpu::moe", "[gpu][moe]") {
  for (const auto& r : dsv41::gputest::cases_moe()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
