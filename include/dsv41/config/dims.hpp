// Kernel-relevant sizes with one syntax for both paths: `dims.head_dim`.
// Dims<Preset>: every member is static constexpr (usable in `if constexpr`, array bounds, templates;
// in constant expressions name them through the type, `Dims<C>::head_dim`). Dims<configs::Dynamic>:
// the same names as runtime members filled from a ModelShape. Both construct from a ModelShape; the
// preset one ignores it (the loader checks the shape against the preset: compare_shapes).
#pragma once
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/presets.hpp>

namespace dsv41 {

template <class C>
struct Dims {
  static constexpr bool is_static = true;
  static constexpr int vocab = C::vocab_size, hidden = C::hidden_size, hc = C::hc_mult;
  static constexpr int heads = C::num_attention_heads, head_dim = C::head_dim, rope_dim = C::qk_rope_head_dim;
  static constexpr int q_lora_rank = C::q_lora_rank, o_groups = C::o_groups, o_lora_rank = C::o_lora_rank;
  static constexpr int window = C::sliding_window;
  static constexpr int index_heads = C::index_n_heads, index_head_dim = C::index_head_dim, index_topk = C::index_topk;
  static constexpr int moe_inter = C::moe_intermediate_size, engram_head_dim = C::engram_head_dim;
  static constexpr int n_layers = C::num_hidden_layers, n_dspark = configs::n_dspark<C>;
  static constexpr int dspark_block = C::dspark_block_size;

  constexpr Dims() = default;
  explicit Dims(const ModelShape&) {}
};

template <>
struct Dims<configs::Dynamic> {
  static constexpr bool is_static = false;
  int vocab = 0, hidden = 0, hc = 0;
  int heads = 0, head_dim = 0, rope_dim = 0;
  int q_lora_rank = 0, o_groups = 0, o_lora_rank = 0;
  int window = 0;
  int index_heads = 0, index_head_dim = 0, index_topk = 0;
  int moe_inter = 0, engram_head_dim = 0;
  int n_layers = 0, n_dspark = 0;
  int dspark_block = 0;

  constexpr Dims() = default;
  explicit Dims(const ModelShape& s)
      : vocab(s.vocab_size), hidden(s.hidden_size), hc(s.hc_mult),
        heads(s.num_attention_heads), head_dim(s.head_dim), rope_dim(s.qk_rope_head_dim),
        q_lora_rank(s.q_lora_rank), o_groups(s.o_groups), o_lora_rank(s.o_lora_rank),
        window(s.sliding_window),
        index_heads(s.index_n_heads), index_head_dim(s.index_head_dim), index_topk(s.index_topk),
        moe_inter(s.moe_intermediate_size), engram_head_dim(s.engram_head_dim),
        n_layers(s.num_hidden_layers), n_dspark(s.n_dspark()),
        dspark_block(s.dspark_block_size) {}
  // The runtime copy of a preset's sizes (for comparing or for handing to runtime-shaped code).
  template <class C>
    requires(Dims<C>::is_static)
  constexpr explicit Dims(Dims<C>)
      : vocab(Dims<C>::vocab), hidden(Dims<C>::hidden), hc(Dims<C>::hc),
        heads(Dims<C>::heads), head_dim(Dims<C>::head_dim), rope_dim(Dims<C>::rope_dim),
        q_lora_rank(Dims<C>::q_lora_rank), o_groups(Dims<C>::o_groups), o_lora_rank(Dims<C>::o_lora_rank),
        window(Dims<C>::window),
        index_heads(Dims<C>::index_heads), index_head_dim(Dims<C>::index_head_dim), index_topk(Dims<C>::index_topk),
        moe_inter(Dims<C>::moe_inter), engram_head_dim(Dims<C>::engram_head_dim),
        n_layers(Dims<C>::n_layers), n_dspark(Dims<C>::n_dspark),
        dspark_block(Dims<C>::dspark_block) {}

  constexpr bool operator==(const Dims&) const = default;
};

using DynamicDims = Dims<configs::Dynamic>;

static_assert(Dims<configs::V41Flash>::head_dim == 512 && Dims<configs::V41Flash>::n_dspark == 3);

}  // namespace dsv41
