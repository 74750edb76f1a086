// Runs code written against the CPU model's SequenceState on a CUDA model (a test bridge).
#pragma once
#include <map>
#include <memory>
#include <span>

#include <dsv41/model/gpu/sequence.hpp>
#include <dsv41/model/state.hpp>

namespace dsv41::gpu {


// Runs code written against the CPU model's SequenceState (golden::run) on a CUDA model: each SequenceState
// object stands for a device sequence, found by its address; a forward at position 0 starts a fresh one.
// A test bridge (golden.hpp declares its states as SequenceState), not for serving.
template <class M>
class HostStateBridge {
 public:
  explicit HostStateBridge(const M& m) : m_(m) {}
  const ModelShape& shape() const { return m_.shape(); }
  const auto& backend() const { return m_.backend(); }

  SequenceState new_sequence(int64_t max_positions) const {
    SequenceState s;
    s.max_positions = max_positions;
    return s;
  }

  Status forward(SequenceState& st, std::span<const int32_t> ids, cpu::ForwardResult& res, bool all_logits = false,
                 const ForwardHooks* hooks = nullptr) const {
    auto& slot = seqs_[&st];
    if (st.pos == 0 || !slot) {
      if (st.pos != 0) return error(Code::invalid_argument, "bridge: unknown sequence");
      auto q = m_.new_sequence(st.max_positions);
      if (!q.ok()) return q.status();
      slot = std::make_unique<DeviceSequence>(std::move(q).value());
    }
    if (slot->pos != st.pos) return error(Code::invalid_argument, "bridge: sequence out of step");
    DSV41_TRY(m_.forward(*slot, ids, res, all_logits, hooks));
    st.pos = slot->pos;
    st.history = slot->history;
    return Status::Ok();
  }

  Status draft(const SequenceState& st, int32_t y, cpu::DraftResult& out) const {
    auto it = seqs_.find(&st);
    if (it == seqs_.end() || !it->second || it->second->pos != st.pos)
      return error(Code::invalid_argument, "bridge: unknown sequence");
    return m_.draft(*it->second, y, out);
  }

 private:
  const M& m_;
  mutable std::map<const SequenceState*, std::unique_ptr<DeviceSequence>> seqs_;
};

}  // namespace dsv41::gpu
