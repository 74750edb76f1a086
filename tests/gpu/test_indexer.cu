// GPU check: indexer scores and top-k match cpu::index_select and cpu::topk_row,
// tiny and released shapes (bounds derived in check_indexer.cuh).
#include <catch2/catch.hpp>

#include "check_indexer.cuh"

TEST_CASE("indexer scores and top-k match cpu::index_select and cpu::topk_row", "[gpu][indexer]") {
  for (const auto& r : dsv41::gputest::cases_indexer()) {
    INFO(r.summary());
    CHECK(r.pass);
  }
}
