// parallel::Plan: which rank holds which experts, heads and head rows (issue 16), on the released and tiny shapes.
#include <catch2/catch.hpp>

#include <algorithm>

#include <dsv41/config/presets.hpp>
#include <dsv41/parallel/accounting.hpp>
#include <dsv41/parallel/partition.hpp>

using namespace dsv41;
using parallel::PlanError;
using parallel::Range;

namespace {

template <class C>
constexpr parallel::PlanSizes sizes_of(int world, int rank, bool attention = false) {
  parallel::PlanSizes z;
  z.world = world;
  z.rank = rank;
  z.n_routed_experts = C::n_routed_experts;
  z.dspark_n_routed_experts = C::dspark_n_routed_experts;
  z.num_attention_heads = C::num_attention_heads;
  z.o_groups = C::o_groups;
  z.vocab_size = C::vocab_size;
  z.split_attention = attention;
  return z;
}

// The ranges of every rank tile [0, n) in rank order, without gaps or overlap, in equal parts.
template <class F>
void check_tiling(int world, int n, F range_of) {
  int next = 0;
  for (int r = 0; r < world; ++r) {
    const Range g = range_of(r);
    CHECK(g.begin == next);
    CHECK(g.size() * world == n);
    next = g.end;
  }
  CHECK(next == n);
}

}  // namespace

// The release at 8 ranks, at compile time: 384 / 8 = 48 experts, 128 / 8 = 16 DSpark experts, 8 groups of 8 heads
// one per rank, 129280 / 8 = 16160 vocabulary rows.
static_assert(parallel::check_plan(sizes_of<configs::V41Flash>(8, 3, true)) == PlanError::none);
static_assert(parallel::plan_of(sizes_of<configs::V41Flash>(8, 3, true)).experts == Range{3 * 48, 4 * 48});
static_assert(parallel::plan_of(sizes_of<configs::V41Flash>(8, 3, true)).dspark_experts == Range{3 * 16, 4 * 16});
static_assert(parallel::plan_of(sizes_of<configs::V41Flash>(8, 3, true)).heads == Range{3 * 8, 4 * 8});
static_assert(parallel::plan_of(sizes_of<configs::V41Flash>(8, 7, true)).vocab == Range{7 * 16160, 129280});

TEST_CASE("plans of the released shape tile every expert, group, head and vocabulary row", "[parallel][partition]") {
  using C = configs::V41Flash;
  for (int world : {1, 2, 4, 8}) {
    INFO("world " << world);
    std::vector<parallel::Plan> plans;
    for (int r = 0; r < world; ++r) {
      auto p = parallel::make_plan(configs::to_shape<C>(), world, r, sizes_of<C>(world, r, true));
      REQUIRE(p.ok());
      CHECK(p->world == world);
      CHECK(p->rank == r);
      plans.push_back(*p);
    }
    check_tiling(world, C::n_routed_experts, [&](int r) { return plans[size_t(r)].experts; });
    check_tiling(world, C::dspark_n_routed_experts, [&](int r) { return plans[size_t(r)].dspark_experts; });
    check_tiling(world, C::o_groups, [&](int r) { return plans[size_t(r)].groups; });
    check_tiling(world, C::num_attention_heads, [&](int r) { return plans[size_t(r)].heads; });
    check_tiling(world, C::vocab_size, [&](int r) { return plans[size_t(r)].vocab; });
    // heads follow their groups: group g holds heads [g·H/G, (g+1)·H/G)
    const int hpg = C::num_attention_heads / C::o_groups;
    for (const auto& p : plans) {
      CHECK(p.heads.begin == p.groups.begin * hpg);
      CHECK(p.heads.end == p.groups.end * hpg);
    }
  }
}

TEST_CASE("experts_of picks the DSpark range for DSpark stages", "[parallel][partition]") {
  using C = configs::V41Flash;
  const auto plan = parallel::plan_of(sizes_of<C>(4, 1));
  const auto sched = configs::schedule<C>();
  const LayerRole& backbone = sched[0];
  const LayerRole& stage = sched[size_t(C::num_hidden_layers)];
  REQUIRE(stage.dspark);
  CHECK(plan.experts_of(backbone) == Range{C::n_routed_experts / 4, 2 * C::n_routed_experts / 4});
  CHECK(plan.experts_of(stage) == Range{C::dspark_n_routed_experts / 4, 2 * C::dspark_n_routed_experts / 4});
}

TEST_CASE("attention is not split unless asked: every rank holds every head", "[parallel][partition]") {
  using C = configs::TinyCed;
  // TinyCed has 2 output groups: at 4 ranks heads cannot be split, but experts (8, DSpark 4) and vocab (512) can.
  auto p = parallel::make_plan(configs::to_shape<C>(), 4, 2);
  REQUIRE(p.ok());
  CHECK(p->heads == Range{0, C::num_attention_heads});
  CHECK(p->groups == Range{0, C::o_groups});
  CHECK(p->experts == Range{2 * (C::n_routed_experts / 4), 3 * (C::n_routed_experts / 4)});
  CHECK(p->dspark_experts == Range{2, 3});
  CHECK(p->vocab == Range{2 * (C::vocab_size / 4), 3 * (C::vocab_size / 4)});
  auto split = parallel::make_plan(configs::to_shape<C>(), 4, 2, sizes_of<C>(4, 2, true));
  REQUIRE_FALSE(split.ok());
  CHECK(split.status().message().find("output-projection groups") != std::string::npos);
  auto two = parallel::make_plan(configs::to_shape<C>(), 2, 1, sizes_of<C>(2, 1, true));
  REQUIRE(two.ok());
  CHECK(two->heads == Range{C::num_attention_heads / 2, C::num_attention_heads});
}

TEST_CASE("world size 1 holds everything", "[parallel][partition]") {
  using C = configs::TinyCed;
  auto p = parallel::make_plan(configs::to_shape<C>(), 1, 0);
  REQUIRE(p.ok());
  CHECK(p->single());
  CHECK(p->experts == Range{0, C::n_routed_experts});
  CHECK(p->dspark_experts == Range{0, C::dspark_n_routed_experts});
  CHECK(p->vocab == Range{0, C::vocab_size});
  CHECK(p->heads == Range{0, C::num_attention_heads});
}

TEST_CASE("plans that do not divide are errors that say why", "[parallel][partition]") {
  const ModelShape rel = configs::to_shape<configs::V41Flash>(), tiny = configs::to_shape<configs::TinyCed>();
  auto fails = [](const Result<parallel::Plan>& p, Code c, const char* words) {
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == c);
    INFO(p.status().message());
    CHECK(p.status().message().find(words) != std::string::npos);
  };
  fails(parallel::make_plan(rel, 0, 0), Code::invalid_argument, "world size 0");
  fails(parallel::make_plan(rel, 4, 4), Code::invalid_argument, "rank 4 outside [0, 4)");
  fails(parallel::make_plan(rel, 4, -1), Code::invalid_argument, "rank -1");
  // 384 experts divide over 3 ranks, DSpark's 128 do not
  fails(parallel::make_plan(rel, 3, 0), Code::unsupported, "DSpark stages' 128 routed experts");
  fails(parallel::make_plan(rel, 5, 0), Code::unsupported, "384 routed experts do not divide over 5");
  // tiny: 8 experts over 8 ranks, but DSpark's 4 do not
  fails(parallel::make_plan(tiny, 8, 0), Code::unsupported, "DSpark stages' 4");
  // the release's vocabulary 129280 = 2^8 · 5 · 101 does not divide over 3 (with the head split)
  parallel::PlanSizes z = parallel::plan_sizes(rel, 3, 0);
  z.dspark_n_routed_experts = 0;
  fails(parallel::make_plan(z), Code::unsupported, "vocabulary of 129280");
  z.split_head = false;
  CHECK(parallel::make_plan(z).ok());
  ModelShape odd = tiny;
  odd.num_attention_heads = 5;
  fails(parallel::make_plan(odd, 1, 0), Code::invalid_argument, "5 heads do not divide into 2 groups");
}

TEST_CASE("a rank of the release holds its experts and head rows, and every replicated byte", "[parallel][partition]") {
  using C = configs::V41Flash;
  const ModelShape s = configs::to_shape<C>();
  int64_t total = 0;
  for (const auto& t : expected_tensors(s)) total += parallel::tensor_bytes(t);
  // one routed expert: w1, w3 [I, d] and w2 [d, I] as packed E2M1 pairs with one UE8M0 per 32 inputs
  const int64_t I = C::moe_intermediate_size, d = C::hidden_size;
  const int64_t per_expert = 3 * (I * d / 2 + I * d / 32);
  const int64_t head = int64_t(C::vocab_size) * d * 2;
  const int64_t L = C::num_hidden_layers, nD = C::num_nextn_predict_layers;
  const int64_t E = C::n_routed_experts, Ed = C::dspark_n_routed_experts, V = C::vocab_size;
  CHECK(parallel::rank_bytes(s, *parallel::make_plan(s, 1, 0)) == total);
  // an Engram row: head_dim E4M3 values and one UE8M0 per 32
  const int64_t engram_row = C::engram_head_dim + C::engram_head_dim / 32;
  for (int world : {2, 4, 8}) {
    const int64_t others = (L * (E - E / world) + nD * (Ed - Ed / world)) * per_expert + head / V * (V - V / world);
    int64_t engram_rows_held = 0;
    for (int r = 0; r < world; ++r) {
      auto p = parallel::make_plan(s, world, r);
      REQUIRE(p.ok());
      int64_t engram_others = 0;
      for (int64_t n : C::engram_num_embeddings) {
        const int64_t held = n * (r + 1) / world - n * r / world;  // ⌊n(r+1)/w⌋ − ⌊nr/w⌋
        CHECK(p->engram_rows(n).size() == held);
        engram_others += (n - held) * engram_row;
        engram_rows_held += held;
      }
      INFO("world " << world << " rank " << r << ": " << double(parallel::rank_bytes(s, *p)) / double(1 << 30) << " GiB");
      CHECK(parallel::rank_bytes(s, *p) == total - others - engram_others);
    }
    int64_t all_rows = 0;
    for (int64_t n : C::engram_num_embeddings) all_rows += n;
    CHECK(engram_rows_held == all_rows);  // every row on exactly one rank (the ranges tile: partition's own test)
  }
}

TEST_CASE("Engram table rows tile each table in near-equal contiguous ranges", "[parallel][partition]") {
  const ModelShape tiny = configs::to_shape<configs::TinyCed>();
  for (int64_t n : {int64_t(7), int64_t(240), int64_t(306), int64_t(384016682)})
    for (int world = 1; world <= 8; ++world) {
      INFO("rows " << n << " world " << world);
      int64_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < world; ++r) {
        parallel::PlanSizes z = parallel::plan_sizes(tiny, world, r);
        z.n_routed_experts = z.dspark_n_routed_experts = 0;  // only the Engram split matters here
        z.split_head = false;
        auto p = parallel::make_plan(z);
        REQUIRE(p.ok());
        const parallel::Range64 g = p->engram_rows(n);
        CHECK(g.begin == next);
        next = g.end;
        lo = std::min(lo, g.size());
        hi = std::max(hi, g.size());
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  parallel::PlanSizes z = parallel::plan_sizes(tiny, 2, 1);
  z.split_engram = false;
  CHECK(parallel::make_plan(z)->engram_rows(306) == parallel::Range64{0, 306});
}
