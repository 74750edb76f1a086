// rollback(): restore a SequenceState after a speculative step and re-run what restore() asks for.
// The snapshot itself lives in state_snapshot.hpp (no model dependency).
#pragma once
#include <span>

#include <dsv41/model/model.hpp>
#include <dsv41/backend/cpu/snapshot.hpp>

namespace dsv41 {

template <class C, class B>
Snapshot snapshot(const Model<C, B>& m, const SequenceState& st, std::span<const int32_t> ids) {
  return snapshot(m.shape(), m.schedule(), st, ids);
}

// The snapshot as a Result, the form both backends share (the CUDA one allocates device memory).
template <class C, class B>
Result<Snapshot> take_snapshot(const Model<C, B>& m, const SequenceState& st, std::span<const int32_t> ids) {
  return snapshot(m.shape(), m.schedule(), st, ids);
}

// restore(), then the re-run it may ask for: st ends as if it had run only the first keep ids.
template <class C, class B>
Status rollback(const Model<C, B>& m, SequenceState& st, const Snapshot& sn, int keep) {
  auto r = restore(st, sn, keep);
  if (!r.ok()) return r.status();
  if (*r == 0) return Status::Ok();
  ForwardResult unused;
  return m.forward(st, std::span<const int32_t>(sn.ids.data(), size_t(*r)), unused);
}

}  // namespace dsv41
