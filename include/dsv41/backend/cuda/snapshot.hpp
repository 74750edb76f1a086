// Rolling a device sequence back after a speculative step: the device counterpart of state_snapshot.hpp,
// with the same contract (read that file's header). The snapshot keeps, on the device, the old bytes of the
// ring slots the step will write and the compressor's pending rows; counters and history stay on the host.
// Taking and restoring are stream-ordered copies on the model's stream: no synchronization.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::gpu {

struct DeviceLayerSnapshot {
  uint8_t* slots = nullptr;  // old bytes of ring slots pos..pos+n_slots−1, in order
  float *pend_kv = nullptr, *pend_score = nullptr;
  int n_slots = 0, n_pend = 0;
  int64_t n_entries = 0;
  int ratio = 0;             // > 0: the layer owns a compressor
};

class DeviceSnapshot {
 public:
  int64_t pos = 0;
  std::vector<int32_t> ids, history;
  size_t history_keep = 0;
  int window = 0, entry_bytes = 0, pend_width = 0;
  std::vector<DeviceLayerSnapshot> layers;

  // Saves what running ids at st.pos.. may overwrite (device copies on `stream`).
  static Result<DeviceSnapshot> take(const ModelShape& s, std::span<const LayerRole> sched, const DeviceSequence& st,
                                     std::span<const int32_t> ids, cudaStream_t stream) {
    DeviceSnapshot sn;
    sn.pos = st.pos;
    sn.ids.assign(ids.begin(), ids.end());
    sn.history = st.history;
    sn.history_keep = size_t(std::max(s.engram_max_ngram_size - 1, 0));
    sn.window = s.sliding_window;
    sn.entry_bytes = num::window_entry_size(s.head_dim);
    sn.pend_width = s.head_dim;
    const int W = sn.window, we = sn.entry_bytes, n_slots = int(std::min<size_t>(ids.size(), size_t(W)));
    sn.layers.resize(st.layers.size());
    size_t bytes = 0;
    for (size_t l = 0; l < st.layers.size(); ++l) {
      const DeviceLayerState& ls = st.layers[l];
      DeviceLayerSnapshot& o = sn.layers[l];
      o.n_slots = ls.ring ? n_slots : 0;
      o.n_entries = ls.n_entries;
      o.n_pend = ls.n_pend;
      if (l < sched.size() && sched[l].mode == AttnMode::Full && sched[l].ratio > 0) o.ratio = sched[l].ratio;
      bytes += size_t(o.n_slots) * we + (ls.pend_kv ? 2 * size_t(o.ratio) * sn.pend_width * 4 : 0);
    }
    DSV41_TRY(sn.mem_.alloc(bytes, stream));
    uint8_t* base = sn.mem_.data();
    for (size_t l = 0; l < st.layers.size(); ++l) {
      const DeviceLayerState& ls = st.layers[l];
      DeviceLayerSnapshot& o = sn.layers[l];
      o.slots = base;
      base += size_t(o.n_slots) * we;
      DSV41_TRY(copy_slots(ls.ring, o.slots, sn.pos, 0, o.n_slots, W, we, true, stream));
      if (ls.pend_kv) {
        const size_t pb = size_t(o.ratio) * sn.pend_width * 4;
        o.pend_kv = reinterpret_cast<float*>(base);
        o.pend_score = reinterpret_cast<float*>(base + pb);
        base += 2 * pb;
        DSV41_CUDA_TRY(cudaMemcpyAsync(o.pend_kv, ls.pend_kv, pb, cudaMemcpyDeviceToDevice, stream), "snapshot");
        DSV41_CUDA_TRY(cudaMemcpyAsync(o.pend_score, ls.pend_score, pb, cudaMemcpyDeviceToDevice, stream), "snapshot");
      }
    }
    return Result<DeviceSnapshot>(std::move(sn));
  }

  // Rolls st (which ran exactly ids since the snapshot) back so that the first keep ids remain. Returns how
  // many kept ids must run again: 0 after an exact partial restore, keep after a fallback to the start.
  // Also clears st.damaged (a failed forward of these ids is undone by restoring to the start).
  Result<int> restore(DeviceSequence& st, int keep, cudaStream_t stream) const {
    const int n = int(ids.size()), W = window, we = entry_bytes;
    if (keep < 0 || keep > n) return error(Code::invalid_argument, "restore: keep outside [0, " + std::to_string(n) + "]");
    if (st.layers.size() != layers.size()) return error(Code::invalid_argument, "restore: snapshot of another model");
    if (st.damaged) {  // the forward failed: counters are as before it, bytes must come back
      if (st.pos != pos) return error(Code::invalid_argument, "restore: the state did not start from the snapshot");
      DSV41_TRY(restore_start(st, stream));
      return keep;
    }
    if (st.pos != pos + n) return error(Code::invalid_argument, "restore: the state did not run exactly the snapshot's ids");
    if (keep == n) return 0;
    bool exact = keep == 0 || n <= W;
    for (size_t l = 0; exact && l < layers.size(); ++l) {
      if (layers[l].ratio == 0) continue;
      int64_t ek, pend;
      kept_groups(layers[l], keep, ek, pend);
      exact = pend == 0 || ek == st.layers[l].n_entries;  // else the rows were pooled away
    }
    if (keep == 0 || !exact) {
      DSV41_TRY(restore_start(st, stream));
      return keep;
    }
    for (size_t l = 0; l < layers.size(); ++l) {
      DeviceLayerState& ls = st.layers[l];
      const DeviceLayerSnapshot& o = layers[l];
      if (o.n_slots == n) DSV41_TRY(copy_slots(ls.ring, o.slots, pos, keep, n, W, we, false, stream));
      if (o.ratio == 0) continue;
      int64_t ek, pend;
      kept_groups(o, keep, ek, pend);
      const bool same_group = ek == ls.n_entries;  // pend > 0 implies it: the rows head the current pending rows
      ls.n_entries = ek;
      ls.n_pend = same_group ? int(pend) : 0;
    }
    std::vector<int32_t> h = history;
    h.insert(h.end(), ids.begin(), ids.begin() + keep);
    if (h.size() > history_keep) h.erase(h.begin(), h.end() - std::ptrdiff_t(history_keep));
    st.history = std::move(h);
    st.pos = pos + keep;
    return 0;
  }

 private:
  // Ring slots (p0 + j) mod W for j in [j0, j1): to the snapshot (save) or back (restore).
  static Status copy_slots(uint8_t* ring, uint8_t* slots, int64_t p0, int j0, int j1, int W, int we, bool save,
                           cudaStream_t stream) {
    for (int j = j0; j < j1;) {  // contiguous runs up to the ring's end
      const int slot = int((p0 + j) % W), run = std::min(j1 - j, W - slot);
      uint8_t* r = ring + size_t(slot) * we;
      uint8_t* s = slots + size_t(j) * we;
      DSV41_CUDA_TRY(cudaMemcpyAsync(save ? s : r, save ? r : s, size_t(run) * we, cudaMemcpyDeviceToDevice, stream),
                     "snapshot slots");
      j += run;
    }
    return Status::Ok();
  }

  Status restore_start(DeviceSequence& st, cudaStream_t stream) const {
    for (size_t l = 0; l < layers.size(); ++l) {
      DeviceLayerState& ls = st.layers[l];
      const DeviceLayerSnapshot& o = layers[l];
      DSV41_TRY(copy_slots(ls.ring, o.slots, pos, 0, o.n_slots, window, entry_bytes, false, stream));
      if (o.pend_kv) {
        const size_t pb = size_t(o.ratio) * pend_width * 4;
        DSV41_CUDA_TRY(cudaMemcpyAsync(ls.pend_kv, o.pend_kv, pb, cudaMemcpyDeviceToDevice, stream), "restore");
        DSV41_CUDA_TRY(cudaMemcpyAsync(ls.pend_score, o.pend_score, pb, cudaMemcpyDeviceToDevice, stream), "restore");
      }
      ls.n_entries = o.n_entries;
      ls.n_pend = o.n_pend;
    }
    st.history = history;
    st.pos = pos;
    st.damaged = false;
    return Status::Ok();
  }

  void kept_groups(const DeviceLayerSnapshot& o, int k, int64_t& entries, int64_t& pending) const {
    if (o.ratio == 1) {
      entries = o.n_entries + k;
      pending = 0;
    } else {
      entries = o.n_entries + (o.n_pend + k) / o.ratio;
      pending = (o.n_pend + k) % o.ratio;
    }
  }

  StreamBlock mem_;
};

}  // namespace dsv41::gpu
