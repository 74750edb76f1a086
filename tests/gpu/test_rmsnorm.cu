// GPU checks: RMSNorm and the FP8/FP4 activation quantizers against the CPU reference, tiny and
// released shapes (bounds derived in check_norm_quant.cuh).
#include <catch2/catch.hpp>

#include "check_norm_quant.cuh"

TEST_CASE("RMSNorm matches cpu::rmsnorm", "[gpu][rmsnorm]") {
  for (const auto& r : dsv41::gputest::cases_rmsnorm()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}

TEST_CASE("FP8 and FP4 activation quant match num::fp8_quant_block32 / fp4_quant_block32", "[gpu][act_quant]") {
  for (const auto& r : dsv41::gputest::cases_act_quant()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
