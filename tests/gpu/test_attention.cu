// GPU check: sparse attention with sink matches cpu::sparse_attention,
// tiny and released shapes (bounds derived in check_attention.cuh).
#include <catch2/catch.hpp>

#include "check_attention.cuh"

TEST_CASE("sparse attention with sink matches cpu::sparse_attention", "[gpu][attention]") {
  for (const auto& r : dsv41::gputest::cases_attention()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
