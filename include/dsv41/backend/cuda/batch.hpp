// The rows of one forward on the GPU: which sequences they belong to, their ids, positions and Engram row ids on
// the device, the residual streams, the DSpark taps, and what index sources hand down the stack. All of it lives in
// the forward's own stream-ordered scratch.
#pragma once
#include <span>
#include <vector>

#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/blocks/vision.hpp>

namespace dsv41::gpu {

// One sequence's rows within a forward: rows [row0, row0 + n) at positions p0.. of *st.
struct SequenceRows {
  DeviceSequence* st = nullptr;
  int64_t p0 = 0;
  int row0 = 0, n = 0;
};

// The candidate source's choice (SPEC §4.5) for one sequence's rows: blocks [n, nb] and visible entries per row.
struct CandidateMask {
  uint8_t* sel = nullptr;
  int* vis = nullptr;
  int nb = 1;
  bool has = false;
};

// What index sources hand down the stack within one forward (device arrays in the forward's scratch).
struct IndexHandoff {
  std::vector<int32_t*> lists;       // per layer: [rows, index_topk]
  std::vector<CandidateMask> cand;   // per sequence (a decode batch: one for all rows)
};

// Device inputs of a forward: token ids, positions and Engram row ids of every row.
struct RowInputs {
  int32_t* ids = nullptr;   // [S]
  int64_t* pos = nullptr;   // [S]
  int64_t* hash = nullptr;  // [S, n_engram_layers·cols] or null
};

// Residual streams: H [rows, hc, d] (BF16), pre [rows, hc].
struct Streams {
  bf16_t* H = nullptr;
  float* pre = nullptr;
  int rows = 0;
};

struct Batch {
  explicit Batch(Scratch sc) : fs(std::move(sc)) {}
  Scratch fs;                                 // the forward's scratch
  std::vector<SequenceRows> begun, segs;      // as begun; now (bounded replay moves the first one's start)
  std::span<const int32_t> ids;               // every row's id
  RowInputs in0, in;                          // from row 0; from the first row still running
  bf16_t *H0 = nullptr, *H = nullptr, *taps0 = nullptr, *taps = nullptr;
  float *pre0 = nullptr, *pre = nullptr;
  int S = 0, now = 0, off = 0;                // rows begun, rows now, rows dropped (bounded replay)
  IndexHandoff handoff;
  const ForwardHooks* hooks = nullptr;
  float* logits = nullptr;                    // device [rows, V] out, or null
  bool all_logits = false;
  std::span<const ImageSpan> images;          // image spans among the rows (checked), merged by embed

  int rows() const { return now; }
  int64_t first_position() const { return segs[0].p0; }
  Streams streams() const { return {H, pre, now}; }
  const int32_t* tokens() const { return in.ids; }
  bool decode_batch() const {
    if (segs.size() < 2) return false;
    for (const auto& g : segs)
      if (g.n != 1) return false;
    return true;
  }
};

}  // namespace dsv41::gpu
