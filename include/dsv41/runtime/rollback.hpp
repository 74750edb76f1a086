// Speculative steps on any backend: a snapshot before a block of ids, and the rollback to the accepted prefix
// after it (Model::snapshot / Model::rollback; the CPU's snapshot is backend/cpu/snapshot.hpp).
#pragma once
#include <span>

#include <dsv41/core/status.hpp>

namespace dsv41 {

template <class M>
auto take_snapshot(const M& m, const typename M::State& st, std::span<const int32_t> ids) {
  return m.snapshot(st, ids);
}

// st ends as if it had run only the first keep ids of the snapshot's block.
template <class M>
Status rollback(const M& m, typename M::State& st, const typename M::Snapshot& sn, int keep) {
  return m.rollback(st, sn, keep);
}

}  // namespace dsv41
