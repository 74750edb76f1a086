// Which rank holds what when a model runs over several devices (issue 16). Expert parallel: each rank holds a
// contiguous range of every MoE layer's routed experts (the shared expert on every rank). Tensor parallel: a
// contiguous range of attention heads, cut on output-projection group boundaries (wo_a is grouped per head group),
// and a contiguous range of the head's vocabulary rows. Ranges are equal-sized; the checks say what does not divide.
// Engram tables (189 GiB of the release's 474) are split by rows into near-equal contiguous ranges (any size).
// Everything here is constexpr over plain sizes (PlanSizes); make_plan() wraps it for a ModelShape with messages.
#pragma once
#include <string>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::parallel {

// [begin, end)
struct Range {
  int begin = 0, end = 0;
  constexpr int size() const { return end - begin; }
  constexpr bool contains(int i) const { return i >= begin && i < end; }
  constexpr bool operator==(const Range&) const = default;
};
struct Range64 {
  int64_t begin = 0, end = 0;
  constexpr int64_t size() const { return end - begin; }
  constexpr bool contains(int64_t i) const { return i >= begin && i < end; }
  constexpr bool operator==(const Range64&) const = default;
};

// Block r of n items cut into `parts` equal blocks (n divisible by parts).
constexpr Range block_of(int n, int parts, int r) { return {r * (n / parts), (r + 1) * (n / parts)}; }

// What is split, and into how many ranks.
struct PlanSizes {
  int world = 1, rank = 0;
  int n_routed_experts = 0;         // backbone MoE layers
  int dspark_n_routed_experts = 0;  // DSpark stages' MoE (0: none)
  int num_attention_heads = 0, o_groups = 0;
  int vocab_size = 0;
  // Tensor parallel for attention (LoadOptions::split_attention; the CPU backend only): off by default, every rank
  // holding every head.
  bool split_attention = false;
  bool split_head = true;    // false: every rank holds every vocabulary row
  bool split_engram = true;  // false: every rank holds every Engram table row
};

enum class PlanError {
  none,
  bad_world,         // world < 1
  bad_rank,          // rank outside [0, world)
  experts,           // n_routed_experts % world
  dspark_experts,    // dspark_n_routed_experts % world
  groups,            // o_groups % world (heads are split on group boundaries)
  heads,             // num_attention_heads % o_groups
  vocab,             // vocab_size % world
};

struct Plan {
  int world = 1, rank = 0;
  Range experts;         // backbone layers' routed experts held here
  Range dspark_experts;  // DSpark stages' routed experts held here
  Range groups;          // output-projection groups held here
  Range heads;           // their heads: groups × (H / o_groups)
  Range vocab;           // head rows (logits) computed here
  bool engram_split = false;

  // The rows of an Engram table of n rows held here: [⌊n·rank/world⌋, ⌊n·(rank+1)/world⌋).
  constexpr Range64 engram_rows(int64_t n) const {
    if (!engram_split) return {0, n};
    return {n * rank / world, n * (rank + 1) / world};
  }

  // The routed experts of a layer held here.
  constexpr Range experts_of(const LayerRole& r) const { return r.dspark ? dspark_experts : experts; }
  constexpr bool single() const { return world == 1; }
  constexpr bool operator==(const Plan&) const = default;
};

constexpr PlanError check_plan(const PlanSizes& z) {
  if (z.world < 1) return PlanError::bad_world;
  if (z.rank < 0 || z.rank >= z.world) return PlanError::bad_rank;
  if (z.n_routed_experts % z.world) return PlanError::experts;
  if (z.dspark_n_routed_experts % z.world) return PlanError::dspark_experts;
  if (z.o_groups <= 0 || z.num_attention_heads % z.o_groups) return PlanError::heads;
  if (z.split_attention && z.o_groups % z.world) return PlanError::groups;
  if (z.split_head && z.vocab_size % z.world) return PlanError::vocab;
  return PlanError::none;
}

// The plan of sizes that check_plan accepts.
constexpr Plan plan_of(const PlanSizes& z) {
  Plan p;
  p.world = z.world;
  p.rank = z.rank;
  p.experts = block_of(z.n_routed_experts, z.world, z.rank);
  p.dspark_experts = block_of(z.dspark_n_routed_experts, z.world, z.rank);
  const int hpg = z.o_groups > 0 ? z.num_attention_heads / z.o_groups : 0;
  p.groups = z.split_attention ? block_of(z.o_groups, z.world, z.rank) : Range{0, z.o_groups};
  p.heads = {p.groups.begin * hpg, p.groups.end * hpg};
  p.vocab = z.split_head ? block_of(z.vocab_size, z.world, z.rank) : Range{0, z.vocab_size};
  p.engram_split = z.split_engram && z.world > 1;
  return p;
}

// What the backends split today (PlanSizes' defaults), or other choices through `base`.
inline PlanSizes plan_sizes(const ModelShape& s, int world, int rank, PlanSizes base = {}) {
  PlanSizes z = base;
  z.world = world;
  z.rank = rank;
  z.n_routed_experts = s.n_routed_experts;
  z.dspark_n_routed_experts = s.n_dspark() > 0 ? s.dspark_n_routed_experts : 0;
  z.num_attention_heads = s.num_attention_heads;
  z.o_groups = s.o_groups;
  z.vocab_size = s.vocab_size;
  return z;
}

inline Status plan_status(PlanError e, const PlanSizes& z) {
  const std::string w = std::to_string(z.world);
  switch (e) {
    case PlanError::none: return Status::Ok();
    case PlanError::bad_world: return error(Code::invalid_argument, "parallel: world size " + w + " (at least 1)");
    case PlanError::bad_rank:
      return error(Code::invalid_argument, "parallel: rank " + std::to_string(z.rank) + " outside [0, " + w + ")");
    case PlanError::experts:
      return error(Code::unsupported, "parallel: " + std::to_string(z.n_routed_experts) +
                                          " routed experts do not divide over " + w + " ranks");
    case PlanError::dspark_experts:
      return error(Code::unsupported, "parallel: the DSpark stages' " + std::to_string(z.dspark_n_routed_experts) +
                                          " routed experts do not divide over " + w + " ranks");
    case PlanError::groups:
      return error(Code::unsupported, "parallel: " + std::to_string(z.o_groups) +
                                          " output-projection groups (heads are split on group boundaries) do not "
                                          "divide over " + w + " ranks");
    case PlanError::heads:
      return error(Code::invalid_argument, "parallel: " + std::to_string(z.num_attention_heads) +
                                               " heads do not divide into " + std::to_string(z.o_groups) + " groups");
    case PlanError::vocab:
      return error(Code::unsupported,
                   "parallel: a vocabulary of " + std::to_string(z.vocab_size) + " does not divide over " + w + " ranks");
  }
  return error(Code::internal, "parallel: unknown plan error");
}

inline Result<Plan> make_plan(const PlanSizes& z) {
  if (const PlanError e = check_plan(z); e != PlanError::none) return plan_status(e, z);
  return plan_of(z);
}
inline Result<Plan> make_plan(const ModelShape& s, int world, int rank, PlanSizes base = {}) {
  return make_plan(plan_sizes(s, world, rank, base));
}

}  // namespace dsv41::parallel
