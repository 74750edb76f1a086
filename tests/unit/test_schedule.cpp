// The compile-time schedule and Dims against the runtime path (make_schedule, ModelShape).
#include <catch2/catch.hpp>

#include <string>

#include <dsv41/config/dims.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/config/schedule.hpp>

#ifndef DSV41_TEST_DATA
#define DSV41_TEST_DATA "tests/data"
#endif

using namespace dsv41;

namespace {

template <class Sched>
void check_same_roles(const Sched& fixed, const std::vector<LayerRole>& run) {
  REQUIRE(fixed.size() == run.size());
  for (size_t l = 0; l < run.size(); ++l) {
    INFO("layer " << l);
    const LayerRole &a = fixed[l], &b = run[l];
    CHECK(a.id == b.id);
    CHECK(a.dspark == b.dspark);
    CHECK(a.ratio == b.ratio);
    CHECK(mode_name(a.mode) == std::string(mode_name(b.mode)));
    CHECK(a.kv_source == b.kv_source);
    CHECK(a.index_source == b.index_source);
    CHECK(a.candidate_source == b.candidate_source);
    CHECK(a.uses_candidates == b.uses_candidates);
    CHECK(a.engram_slot == b.engram_slot);
    CHECK(a.tap_slot == b.tap_slot);
    CHECK(a.encoder == b.encoder);
    CHECK(a.n_experts == b.n_experts);
    CHECK(a.top_k == b.top_k);
    CHECK(a == b);
  }
}

struct Counts {
  int compresses = 0, indexers = 0, window_only = 0, engram = 0, taps = 0, decoder = 0;
};

Counts count(const std::vector<LayerRole>& sched) {
  Counts c;
  for (const LayerRole& r : sched) {
    c.compresses += r.compresses();
    c.indexers += r.runs_indexer();
    c.window_only += r.is_window_only();
    c.engram += r.has_engram();
    c.taps += r.is_tap();
    c.decoder += r.is_decoder();
  }
  return c;
}

template <class D>
int nope_dim(const D& d) { return d.head_dim - d.rope_dim; }  // one spelling for both kinds of Dims

void check_same_dims(const Dims<configs::Dynamic>& d, const ModelShape& s) {
  CHECK(d.vocab == s.vocab_size);
  CHECK(d.hidden == s.hidden_size);
  CHECK(d.hc == s.hc_mult);
  CHECK(d.heads == s.num_attention_heads);
  CHECK(d.head_dim == s.head_dim);
  CHECK(d.rope_dim == s.qk_rope_head_dim);
  CHECK(d.q_lora_rank == s.q_lora_rank);
  CHECK(d.o_groups == s.o_groups);
  CHECK(d.o_lora_rank == s.o_lora_rank);
  CHECK(d.window == s.sliding_window);
  CHECK(d.index_heads == s.index_n_heads);
  CHECK(d.index_head_dim == s.index_head_dim);
  CHECK(d.index_topk == s.index_topk);
  CHECK(d.moe_inter == s.moe_intermediate_size);
  CHECK(d.engram_head_dim == s.engram_head_dim);
  CHECK(d.n_layers == s.num_hidden_layers);
  CHECK(d.n_dspark == s.n_dspark());
  CHECK(d.dspark_block == s.dspark_block_size);
}

}  // namespace

TEST_CASE("constexpr schedule equals make_schedule for both presets", "[schedule]") {
  constexpr auto v41 = configs::schedule<configs::V41Flash>();
  constexpr auto tiny = configs::schedule<configs::TinyCed>();
  STATIC_REQUIRE(v41.size() == 43);
  STATIC_REQUIRE(tiny.size() == 11);
  SECTION("from to_shape") {
    check_same_roles(v41, make_schedule(configs::to_shape<configs::V41Flash>()));
    check_same_roles(tiny, make_schedule(configs::to_shape<configs::TinyCed>()));
  }
  SECTION("from the config.json files") {
    auto rel = load_config(DSV41_TEST_DATA "/release/config.json");
    auto ced = load_config(DSV41_TEST_DATA "/golden/tiny-ced/config.json");
    REQUIRE(rel.ok());
    REQUIRE(ced.ok());
    check_same_roles(v41, make_schedule(*rel));
    check_same_roles(tiny, make_schedule(*ced));
    CHECK(configs::first_decoder_layer<configs::V41Flash>() == first_decoder_layer(*rel));
    CHECK(configs::first_decoder_layer<configs::TinyCed>() == first_decoder_layer(*ced));
  }
}

TEST_CASE("LayerRole predicates", "[schedule]") {
  auto rel = load_config(DSV41_TEST_DATA "/release/config.json");
  REQUIRE(rel.ok());
  const auto sched = make_schedule(*rel);
  for (const LayerRole& r : sched) {
    INFO("layer " << r.id);
    CHECK(r.compresses() == (r.mode == AttnMode::Full));
    CHECK(r.runs_indexer() == (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex));
    CHECK(r.reads_compressed() == (r.mode != AttnMode::Window));
    CHECK(r.is_window_only() == !r.reads_compressed());
    CHECK(r.has_engram() == (r.engram_slot >= 0));
    CHECK(r.is_tap() == (r.tap_slot >= 0));
  }
  // One compressing layer per KV source, one indexer per index source (SPEC §1).
  const Counts c = count(sched);
  CHECK(c.compresses == int(rel->kv_source_layer_ids.size()));
  CHECK(c.indexers == int(rel->index_source_layer_ids.size()));
  CHECK(c.window_only == 2 + rel->n_dspark());  // layers 0, 1 and the DSpark stages
  CHECK(c.engram == int(rel->engram_layer_ids.size()));
  CHECK(c.taps == int(rel->dspark_target_layer_ids.size()));
  CHECK(c.decoder == rel->num_hidden_layers - first_decoder_layer(*rel));
  CHECK(sched[3].reads_compressed());
  CHECK_FALSE(sched[3].compresses());
  CHECK_FALSE(sched[3].runs_indexer());
  CHECK(sched[24].runs_indexer());
  CHECK_FALSE(sched[24].compresses());
  CHECK(sched[20].is_decoder());
  CHECK_FALSE(sched[19].is_decoder());
  CHECK_FALSE(sched[40].is_decoder());
  STATIC_REQUIRE(configs::schedule<configs::V41Flash>()[20].compresses());
  STATIC_REQUIRE(configs::schedule<configs::TinyCed>()[6].runs_indexer());
}

TEST_CASE("Dims<Dynamic> from config.json equals the preset's constexpr Dims", "[schedule]") {
  using V = Dims<configs::V41Flash>;
  using T = Dims<configs::TinyCed>;
  STATIC_REQUIRE(V::is_static);
  STATIC_REQUIRE(T::is_static);
  STATIC_REQUIRE_FALSE(DynamicDims::is_static);
  auto rel = load_config(DSV41_TEST_DATA "/release/config.json");
  auto ced = load_config(DSV41_TEST_DATA "/golden/tiny-ced/config.json");
  REQUIRE(rel.ok());
  REQUIRE(ced.ok());
  const DynamicDims dr(*rel), dc(*ced);
  check_same_dims(dr, *rel);
  check_same_dims(dc, *ced);
  CHECK(dr == DynamicDims(V{}));
  CHECK(dc == DynamicDims(T{}));
  CHECK_FALSE(dc == DynamicDims(V{}));
  // Field by field against the preset's static members, read through an instance as kernels will.
  const V v(*rel);
  CHECK(dr.vocab == v.vocab);
  CHECK(dr.hidden == v.hidden);
  CHECK(dr.hc == v.hc);
  CHECK(dr.heads == v.heads);
  CHECK(dr.head_dim == v.head_dim);
  CHECK(dr.rope_dim == v.rope_dim);
  CHECK(dr.q_lora_rank == v.q_lora_rank);
  CHECK(dr.o_groups == v.o_groups);
  CHECK(dr.o_lora_rank == v.o_lora_rank);
  CHECK(dr.window == v.window);
  CHECK(dr.index_heads == v.index_heads);
  CHECK(dr.index_head_dim == v.index_head_dim);
  CHECK(dr.index_topk == v.index_topk);
  CHECK(dr.moe_inter == v.moe_inter);
  CHECK(dr.engram_head_dim == v.engram_head_dim);
  CHECK(dr.n_layers == v.n_layers);
  CHECK(dr.n_dspark == v.n_dspark);
  CHECK(dr.dspark_block == v.dspark_block);
  CHECK(nope_dim(v) == nope_dim(dr));
  CHECK(nope_dim(dr) == rel->nope_dim());
}
