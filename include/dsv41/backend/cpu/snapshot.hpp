// Rolling a SequenceState back after a speculative step (SPEC §4.9). Before the state runs n ids in
// one forward, snapshot() saves what that forward can overwrite or append to: the old bytes of the ring
// slots it will write (every backbone layer and DSpark stage), compressor pending rows, compressed entry
// and index key counts, the Engram history and pos. restore(state, snap, keep) then leaves exactly the
// first `keep` of the n ids processed.
//
// Exact partial restore: the kept positions' ring slots, compressed entries, index keys and pending rows
// are the ones the forward wrote, which equal what running only the kept ids writes as far as the forward
// is chunk-invariant (its rows are causal); the rest is put back from the snapshot. Two cases make that
// impossible; there restore() falls back to the start and reports that the kept ids must run again
// (rollback() runs them in one forward):
//  - the kept positions end inside a compressor group that a rejected position completed: the forward
//    pooled the kept rows of that group and dropped them (ratio 2: every other keep, on average);
//  - n > W and 0 < keep < n: the forward overwrote ring slots of kept positions.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41 {

struct LayerSnapshot {
  std::vector<uint8_t> slots;              // old bytes of the ring slots of positions pos..pos+min(n, W)−1, in order
  std::vector<float> pend_kv, pend_score;  // compressor rows pending before the step
  int64_t n_entries = 0;
  size_t comp_bytes = 0, ikey_bytes = 0;
  int ratio = 0;                           // > 0: the layer owns a compressor (a Full layer, SPEC §4.3)
};

struct Snapshot {
  int64_t pos = 0;                 // the state's pos before the step
  std::vector<int32_t> ids;        // the n ids the step runs
  std::vector<int32_t> history;    // Engram history before the step
  size_t history_keep = 0;         // N−1
  int window = 0, entry_bytes = 0; // W and the bytes of one ring slot
  int pend_width = 0;              // floats per pending row (head_dim)
  int main_bytes = 0, ikey_bytes = 0;  // bytes of one compressed entry / index key
  std::vector<LayerSnapshot> layers;
};

// Saves what running ids at st.pos.. may overwrite. sched: the model's layer schedule (backbone + DSpark).
inline Snapshot snapshot(const ModelShape& s, std::span<const LayerRole> sched, const SequenceState& st,
                         std::span<const int32_t> ids) {
  Snapshot sn;
  sn.pos = st.pos;
  sn.ids.assign(ids.begin(), ids.end());
  sn.history = st.history;
  sn.history_keep = size_t(std::max(s.engram_max_ngram_size - 1, 0));
  sn.window = s.sliding_window;
  sn.entry_bytes = num::window_entry_size(s.head_dim);
  sn.pend_width = s.head_dim;
  sn.main_bytes = num::main_entry_size(s.head_dim);
  sn.ikey_bytes = num::index_entry_size(s.index_head_dim);
  const int W = sn.window, we = sn.entry_bytes;
  const int n_slots = int(std::min<size_t>(ids.size(), size_t(W)));
  sn.layers.resize(st.layers.size());
  for (size_t l = 0; l < st.layers.size(); ++l) {
    const LayerState& ls = st.layers[l];
    LayerSnapshot& o = sn.layers[l];
    if (l < sched.size() && sched[l].mode == AttnMode::Full && sched[l].ratio > 0) o.ratio = sched[l].ratio;
    if (ls.ring.size() == size_t(W) * we) {
      o.slots.resize(size_t(n_slots) * we);
      for (int j = 0; j < n_slots; ++j)
        std::copy_n(ls.ring.data() + size_t((st.pos + j) % W) * we, we, o.slots.data() + size_t(j) * we);
    }
    o.pend_kv = ls.pend_kv;
    o.pend_score = ls.pend_score;
    o.n_entries = ls.n_entries;
    o.comp_bytes = ls.comp.size();
    o.ikey_bytes = ls.ikeys.size();
  }
  return sn;
}


namespace detail {

// Puts every layer back as it was before the step.
inline void restore_start(SequenceState& st, const Snapshot& sn) {
  const int W = sn.window, we = sn.entry_bytes;
  for (size_t l = 0; l < sn.layers.size(); ++l) {
    LayerState& ls = st.layers[l];
    const LayerSnapshot& o = sn.layers[l];
    const int n_slots = int(o.slots.size() / size_t(we));
    for (int j = 0; j < n_slots; ++j)
      std::copy_n(o.slots.data() + size_t(j) * we, we, ls.ring.data() + size_t((sn.pos + j) % W) * we);
    ls.comp.resize(o.comp_bytes);
    ls.ikeys.resize(o.ikey_bytes);
    ls.n_entries = o.n_entries;
    ls.pend_kv = o.pend_kv;
    ls.pend_score = o.pend_score;
  }
  st.history = sn.history;
  st.pos = sn.pos;
}

// Compressed entries after keeping k positions, and the pending rows left over.
inline void kept_groups(const LayerSnapshot& o, int pend_width, int k, int64_t& entries, int64_t& pending) {
  const int64_t c0 = int64_t(o.pend_kv.size()) / pend_width;
  if (o.ratio == 1) {
    entries = o.n_entries + k;
    pending = 0;
  } else {
    entries = o.n_entries + (c0 + k) / o.ratio;
    pending = (c0 + k) % o.ratio;
  }
}

}  // namespace detail

// Rolls st (which ran exactly sn.ids since sn was taken) back so that the first keep ids remain.
// Returns how many kept ids must run again: 0 after an exact partial restore, keep after a fallback to the
// start (see the header comment).
inline Result<int> restore(SequenceState& st, const Snapshot& sn, int keep) {
  const int n = int(sn.ids.size()), W = sn.window;
  if (keep < 0 || keep > n) return error(Code::invalid_argument, "restore: keep outside [0, " + std::to_string(n) + "]");
  if (st.pos != sn.pos + n || st.layers.size() != sn.layers.size())
    return error(Code::invalid_argument, "restore: the state did not run exactly the snapshot's ids");
  if (keep == n) return 0;
  bool exact = keep == 0 || n <= W;
  for (size_t l = 0; exact && l < sn.layers.size(); ++l) {
    const LayerSnapshot& o = sn.layers[l];
    if (o.ratio == 0) continue;
    int64_t ek, pend;
    detail::kept_groups(o, sn.pend_width, keep, ek, pend);
    exact = pend == 0 || ek == st.layers[l].n_entries;  // else the rows were pooled away
  }
  if (keep == 0 || !exact) {
    detail::restore_start(st, sn);
    return keep;
  }
  // Exact partial restore (n <= W here): rejected positions' ring slots get their old bytes back.
  const int we = sn.entry_bytes;
  for (size_t l = 0; l < sn.layers.size(); ++l) {
    LayerState& ls = st.layers[l];
    const LayerSnapshot& o = sn.layers[l];
    if (o.slots.size() == size_t(n) * we)
      for (int j = keep; j < n; ++j)
        std::copy_n(o.slots.data() + size_t(j) * we, we, ls.ring.data() + size_t((sn.pos + j) % W) * we);
    if (o.ratio == 0) continue;
    int64_t ek, pend;
    detail::kept_groups(o, sn.pend_width, keep, ek, pend);
    ls.comp.resize(size_t(ek) * sn.main_bytes);
    ls.ikeys.resize(size_t(ek) * sn.ikey_bytes);
    // pend > 0 implies ek equals the current count: the rows are the head of the current pending rows.
    const bool same_group = ek == ls.n_entries;
    ls.n_entries = ek;
    ls.pend_kv.resize(same_group ? size_t(pend) * sn.pend_width : 0);
    ls.pend_score.resize(same_group ? size_t(pend) * sn.pend_width : 0);
  }
  std::vector<int32_t> h = sn.history;
  h.insert(h.end(), sn.ids.begin(), sn.ids.begin() + keep);
  if (h.size() > sn.history_keep) h.erase(h.begin(), h.end() - std::ptrdiff_t(sn.history_keep));
  st.history = std::move(h);
  st.pos = sn.pos + keep;
  return 0;
}

}  // namespace dsv41
