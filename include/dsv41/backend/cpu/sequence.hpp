// Per-sequence state (SPEC §6): window rings, compressor pending rows, compressed entries, index keys,
// Engram history. Caches hold exactly the packed bytes of SPEC §6. Nothing here is shared or global.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41 {

struct LayerState {
  std::vector<uint8_t> ring;        // W window entries (FP8 + UE8M0), slot = position mod W
  // KV sources only:
  std::vector<uint8_t> comp;        // compressed main KV entries (E2M1 + E4M3/16), one per group
  std::vector<uint8_t> ikeys;       // index keys (E2M1 + UE8M0/32), one per group
  std::vector<float> pend_kv, pend_score;  // ratio > 1: rows of the unfinished group, FP32 [n, D]
  int64_t n_entries = 0;            // complete groups
};

struct SequenceState {
  int64_t pos = 0;                  // positions already processed
  int64_t max_positions = 0;        // capacity chosen at creation (prompt + generation)
  std::vector<LayerState> layers;   // backbone layers then DSpark stages
  std::vector<int32_t> history;     // last N-1 token ids, oldest first (Engram)

  SequenceState() = default;
  SequenceState(const ModelShape& s, int64_t max_pos) : max_positions(max_pos) {
    const auto sched = make_schedule(s);
    layers.resize(sched.size());
    for (const auto& r : sched)
      layers[r.id].ring.assign(size_t(s.sliding_window) * num::window_entry_size(s.head_dim), 0);
  }

  // Forgets the window rings (as when a stored session keeps only its global KV); Model::replay_window
  // rebuilds them.
  void drop_windows() {
    for (auto& l : layers) std::fill(l.ring.begin(), l.ring.end(), uint8_t(0));
  }

  // Bytes held by the global caches (compressed KV + index keys) and by the window rings.
  size_t global_cache_bytes() const {
    size_t b = 0;
    for (const auto& l : layers) b += l.comp.size() + l.ikeys.size();
    return b;
  }
  size_t window_bytes() const {
    size_t b = 0;
    for (const auto& l : layers) b += l.ring.size();
    return b;
  }
};

}  // namespace dsv41
