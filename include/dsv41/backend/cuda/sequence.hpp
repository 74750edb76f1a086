// A sequence on the device (SPEC §6 caches at their packed byte sizes) and the draft's device outputs.
#pragma once
#include <cstdint>
#include <vector>

#include <dsv41/backend/cuda/device_memory.hpp>

namespace dsv41::gpu {

class DeviceModel;

// One layer's device state (SPEC §6): W window entries; KV sources also their compressed entries, index
// keys and (ratio > 1) the pending rows of the unfinished group. Counters are host-side: they follow
// from the positions alone, so no device value is ever read back.
struct DeviceLayerState {
  uint8_t* ring = nullptr;     // [W, D + D/32]
  uint8_t* comp = nullptr;     // [cap, D/2 + D/16]
  uint8_t* ikeys = nullptr;    // [cap, dI/2 + dI/32]
  float* pend_kv = nullptr;    // [ratio, D] FP32
  float* pend_score = nullptr; // [ratio, D] FP32 (the gate's scores)
  int64_t n_entries = 0, cap = 0;
  int n_pend = 0;
};

// A sequence on the device. Move-only; frees its memory on destruction (which synchronizes).
class DeviceSequence {
 public:
  DeviceSequence() = default;
  DeviceSequence(DeviceSequence&&) noexcept = default;
  DeviceSequence& operator=(DeviceSequence&&) noexcept = default;

  int64_t pos = 0;                  // positions already processed
  int64_t max_positions = 0;
  std::vector<int32_t> history;     // last N−1 token ids (Engram), host-side
  std::vector<DeviceLayerState> layers;  // backbone layers then DSpark stages
  // Set when a multi-token forward failed part-way: it may have overwritten ring slots or pending rows that a
  // retry needs. Further forwards are refused until a snapshot taken before it is restored (gpu/snapshot.hpp).
  bool damaged = false;

  size_t global_cache_bytes() const { return global_bytes_; }  // compressed KV + index keys, at capacity
  size_t window_bytes() const { return window_bytes_; }
  const void* owner() const { return owner_; }

 private:
  friend class DeviceModel;
  DeviceArena mem_;
  size_t global_bytes_ = 0, window_bytes_ = 0;
  const void* owner_ = nullptr;
};

// Device outputs of draft(), caller-owned.
struct DraftBuffers {
  int32_t* ids = nullptr;       // [block + 1]
  float* logits = nullptr;      // [block, V]
  float* confidence = nullptr;  // [block]
};

}  // namespace dsv41::gpu
