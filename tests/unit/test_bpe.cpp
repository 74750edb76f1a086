// The BPE merge step (dsv41::text::bpe_merge) on a tiny hand-made merge table, its MergeTable and
// the per-encode WordCache.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <dsv41/text/bpe.hpp>

using namespace dsv41::text;

namespace {

struct Merge {
  int32_t a, b, id;
};

// Symbols 0, 1, 2; merged ids from 3. Rank = position in the list.
const std::vector<Merge> kMerges = {
    {0, 0, 3},  // r0: 0 0 -> 3
    {0, 1, 4},  // r1: 0 1 -> 4
    {3, 1, 5},  // r2: 3 1 -> 5
    {1, 2, 6},  // r3: 1 2 -> 6
    {4, 2, 7},  // r4: 4 2 -> 7
    {3, 3, 8},  // r5: 3 3 -> 8
    {5, 6, 9},  // r6: 5 6 -> 9
    {2, 2, 10}, // r7: 2 2 -> 10
    {8, 0, 11}, // r8: 8 0 -> 11
};

MergeTable table() {
  MergeTable t;
  t.reserve(kMerges.size());
  for (size_t r = 0; r < kMerges.size(); ++r) REQUIRE(t.insert(kMerges[r].a, kMerges[r].b, int32_t(r), kMerges[r].id));
  return t;
}

std::vector<int32_t> merged(std::vector<int32_t> w) {
  const MergeTable t = table();
  BpeScratch sc;
  bpe_merge(t, w, sc);
  return w;
}

// The textbook loop: merge the lowest-ranked adjacent pair (leftmost among equals) until none is left.
std::vector<int32_t> naive(std::vector<int32_t> w) {
  for (;;) {
    int best = -1, best_rank = INT_MAX, id = -1;
    for (int i = 0; i + 1 < int(w.size()); ++i)
      for (size_t r = 0; r < kMerges.size(); ++r)
        if (kMerges[r].a == w[size_t(i)] && kMerges[r].b == w[size_t(i) + 1] && int(r) < best_rank) {
          best = i, best_rank = int(r), id = kMerges[r].id;
        }
    if (best < 0) return w;
    w[size_t(best)] = id;
    w.erase(w.begin() + best + 1);
  }
}

using W = std::vector<int32_t>;

}  // namespace

TEST_CASE("bpe: merges in rank order on hand-derived words", "[bpe]") {
  CHECK(merged({}) == W{});
  CHECK(merged({2}) == W{2});
  CHECK(merged({0, 1}) == W{4});
  CHECK(merged({1, 0}) == W{1, 0});  // no merge for the pair
  // 0 0 1 2: r0 (0 0) -> 3 1 2; r2 (3 1) beats r3 (1 2) -> 5 2; (5 2) has no merge.
  CHECK(merged({0, 0, 1, 2}) == W{5, 2});
  // 0 1 2 2: r1 -> 4 2 2; r4 (4 2) beats r7 (2 2) -> 7 2.
  CHECK(merged({0, 1, 2, 2}) == W{7, 2});
  // 0 0 1 1 2: r0 -> 3 1 1 2; r2 -> 5 1 2; r3 -> 5 6; r6 -> 9.
  CHECK(merged({0, 0, 1, 1, 2}) == W{9});
  // Five 0s: r0 at 0 -> 3 0 0 0; r0 at 1 -> 3 3 0; r5 -> 8 0; r8 -> 11.
  CHECK(merged({0, 0, 0, 0, 0}) == W{11});
  // Equal ranks: the leftmost pair first (2 2 2 -> 10 2, not 2 10).
  CHECK(merged({2, 2, 2}) == W{10, 2});
}

TEST_CASE("bpe: long words take the queue path with the same result", "[bpe]") {
  // 24 symbols stay on the short path, 25 and 30 take the priority queue.
  // 24 zeros: twelve r0 merges left to right, then six r5 merges: 8 x 6.
  CHECK(merged(W(24, 0)) == W(6, 8));
  // 25 zeros: 3 x 12 then a 0; r5 gives 8 x 6 then 0, and r8 joins the last 8 with the 0.
  CHECK(merged(W(25, 0)) == W{8, 8, 8, 8, 8, 11});
  // 30 zeros: 3 x 15; r5 pairs them left to right: 8 x 7 then a 3.
  CHECK(merged(W(30, 0)) == W{8, 8, 8, 8, 8, 8, 8, 3});
  // Random words of every length up to 60 against the textbook loop.
  std::mt19937 rng(12345);
  for (int n = 0; n <= 60; ++n)
    for (int rep = 0; rep < 20; ++rep) {
      W w(static_cast<size_t>(n));
      for (auto& x : w) x = int32_t(rng() % 3);
      INFO("length " << n << " rep " << rep);
      CHECK(merged(w) == naive(w));
    }
}

TEST_CASE("bpe: MergeTable finds what was inserted, refuses duplicates, grows", "[bpe]") {
  MergeTable t;
  CHECK(t.find(0, 1) == nullptr);  // empty table
  REQUIRE(t.insert(0, 1, 5, 9));
  CHECK_FALSE(t.insert(0, 1, 6, 10));  // a duplicate pair keeps its first rank and id
  const auto* e = t.find(0, 1);
  REQUIRE(e);
  CHECK(e->rank == 5);
  CHECK(e->id == 9);
  CHECK(t.find(1, 0) == nullptr);  // pairs are ordered
  for (int32_t i = 0; i < 2000; ++i) REQUIRE(t.insert(i + 1, -i, i, 10000 + i));  // far past the first capacity
  CHECK(t.size() == 2001);
  for (int32_t i = 0; i < 2000; ++i) {
    const auto* f = t.find(i + 1, -i);
    REQUIRE(f);
    CHECK(f->rank == i);
    CHECK(f->id == 10000 + i);
  }
  CHECK(t.find(0, 1)->id == 9);
}

TEST_CASE("bpe: WordCache returns the ids stored for a word only", "[bpe]") {
  WordCache c;
  uint32_t n = 0;
  CHECK(c.find("hello", WordCache::hash("hello"), n) == nullptr);
  const int32_t ids[] = {7, 8, 9};
  c.insert("hello", WordCache::hash("hello"), ids, 3);
  const int32_t* got = c.find("hello", WordCache::hash("hello"), n);
  REQUIRE(got);
  CHECK(W(got, got + n) == W{7, 8, 9});
  CHECK(c.find("hellp", WordCache::hash("hellp"), n) == nullptr);
  for (int i = 0; i < 1000; ++i) {  // growth keeps every entry
    std::string w = std::to_string(i);
    w += "w";  // not "w" + to_string(i): GCC 12 warns falsely (-Wrestrict) on that
    const int32_t v[] = {i, -i};
    c.insert(w, WordCache::hash(w), v, 2);
  }
  for (int i = 0; i < 1000; i += 97) {
    std::string w = std::to_string(i);
    w += "w";  // not "w" + to_string(i): GCC 12 warns falsely (-Wrestrict) on that
    const int32_t* g = c.find(w, WordCache::hash(w), n);
    REQUIRE(g);
    CHECK(W(g, g + n) == W{i, -i});
  }
  got = c.find("hello", WordCache::hash("hello"), n);
  REQUIRE(got);
  CHECK(W(got, got + n) == W{7, 8, 9});
  const std::string huge(70000, 'x');  // longer than a cache key may be: not stored
  c.insert(huge, WordCache::hash(huge), ids, 3);
  CHECK(c.find(huge, WordCache::hash(huge), n) == nullptr);
}
