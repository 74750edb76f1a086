// SPEC §4.2 CSA2 attention modes as policy types, and the one place a layer's runtime mode becomes a type.
//   Window   window entries only (ratio 0)
//   Full     a KV source: compresses its inputs, runs its own indexer, attends its own compressed entries
//   Reindex  runs its own indexer over a lower Full layer's entries
//   Reuse    attends a lower layer's entries with that layer's top-k lists
#pragma once
#include <dsv41/config/schedule.hpp>

namespace dsv41::csa2 {

struct Window {
  static constexpr AttnMode mode = AttnMode::Window;
  static constexpr bool compresses = false, indexes = false, reads_compressed = false;
};
struct Full {
  static constexpr AttnMode mode = AttnMode::Full;
  static constexpr bool compresses = true, indexes = true, reads_compressed = true;
};
struct Reindex {
  static constexpr AttnMode mode = AttnMode::Reindex;
  static constexpr bool compresses = false, indexes = true, reads_compressed = true;
};
struct Reuse {
  static constexpr AttnMode mode = AttnMode::Reuse;
  static constexpr bool compresses = false, indexes = false, reads_compressed = true;
};

// Calls f(Mode{}) with the policy of mode m; every mode-dependent step goes through here.
template <class F>
decltype(auto) dispatch(AttnMode m, F&& f) {
  switch (m) {
    case AttnMode::Full: return f(Full{});
    case AttnMode::Reindex: return f(Reindex{});
    case AttnMode::Reuse: return f(Reuse{});
    case AttnMode::Window: break;
  }
  return f(Window{});
}

}  // namespace dsv41::csa2
