// The sizes the hot CSA2 kernels take as template arguments (attention: H, D; indexer scores: nI, dI):
// a preset's, from Dims<C>, where the tensor-core kernel takes them; 0 where it does not or the shape is
// only known at run time (configs::Dynamic): those ops then dispatch on the runtime shape as before.
#pragma once
#include <type_traits>

#include <dsv41/backend/cuda/kernels/attention.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/config/dims.hpp>
#include <dsv41/config/presets.hpp>

namespace dsv41::gpu {

template <int H_, int D_, int NI_, int DI_>
struct KernelSizes {
  static constexpr int H = H_, D = D_, nI = NI_, dI = DI_;
  static constexpr bool attn_fixed = H > 0 && D > 0;
  static constexpr bool index_fixed = nI > 0 && dI > 0;
  static_assert(!attn_fixed || sparse_attention_fast_shape(H, D), "KernelSizes: H, D not taken by the fast attention");
  static_assert(!index_fixed || index_scores_fast_shape(nI, dI), "KernelSizes: nI, dI not taken by the fast indexer");
};
using RuntimeSizes = KernelSizes<0, 0, 0, 0>;

namespace detail {
template <class C, bool = Dims<C>::is_static>
struct kernel_sizes_of {
  using type = RuntimeSizes;
};
template <class C>
struct kernel_sizes_of<C, true> {
  using Dm = Dims<C>;
  static constexpr bool a = sparse_attention_fast_shape(Dm::heads, Dm::head_dim);
  static constexpr bool i = index_scores_fast_shape(Dm::index_heads, Dm::index_head_dim);
  using type = KernelSizes<a ? Dm::heads : 0, a ? Dm::head_dim : 0, i ? Dm::index_heads : 0, i ? Dm::index_head_dim : 0>;
};
}  // namespace detail

template <class C>
using kernel_sizes_t = typename detail::kernel_sizes_of<C>::type;

static_assert(std::is_same_v<kernel_sizes_t<configs::V41Flash>, KernelSizes<64, 512, 32, 128>>);
static_assert(std::is_same_v<kernel_sizes_t<configs::TinyCed>, RuntimeSizes>);  // H 4, D 64, nI 4, dI 32
static_assert(std::is_same_v<kernel_sizes_t<configs::Dynamic>, RuntimeSizes>);

}  // namespace dsv41::gpu
