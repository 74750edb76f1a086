// GPU-vs-CPU op suite: every row of tests/gpu/op_cases.cuh (released and odd shapes), one Catch2 case per op.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "op_cases.cuh"

namespace {
void run_op(const std::string& op) {
  int n = 0;
  for (const auto& c : dsv41::gputest::op_cases()) {
    if (op != c.op) continue;
    ++n;
    INFO(c.op << " [" << c.shape << "]");
    std::fprintf(stderr, "op %s [%s]\n", c.op, c.shape);  // progress: the log shows a case that does not return
    const dsv41::gputest::CheckResult r = c.run();
    INFO(r.summary());
    CHECK(r.pass);
  }
  REQUIRE(n > 0);
}
}  // namespace

TEST_CASE("RMSNorm matches cpu::rmsnorm", "[gpu][ops][rmsnorm]") { run_op("rmsnorm"); }
TEST_CASE("FP8 and FP4 activation quant match num::fp8_quant_block32 / fp4_quant_block32", "[gpu][ops][act_quant]") {
  run_op("act_quant");
}
TEST_CASE("block-scaled GEMMs match cpu::linear", "[gpu][ops][gemm]") { run_op("gemm"); }
TEST_CASE("sparse attention matches cpu::sparse_attention", "[gpu][ops][attention]") { run_op("attention"); }
TEST_CASE("indexer scores and lists match cpu::index_select", "[gpu][ops][indexer]") { run_op("indexer"); }
TEST_CASE("top-k matches cpu::topk_row", "[gpu][ops][topk]") { run_op("topk"); }
TEST_CASE("mHC step matches cpu::hc_post, hc_mixes, hc_pre, rmsnorm", "[gpu][ops][mhc]") { run_op("mhc"); }
TEST_CASE("MoE matches cpu::moe and cpu::route", "[gpu][ops][moe]") { run_op("moe"); }
