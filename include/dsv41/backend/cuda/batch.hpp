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

// A decode batch's per-step inputs in device memory (decode_graph.hpp): the host writes them before each step, so
// one captured step replays across steps. Per layer (then per DSpark stage) a table of S rows per column: what
// Csa2Ops::batch_table uploads otherwise (rings | the KV source's compressed-entry pools | its entry counts after
// this step (u64) | its index-key pools | those counts (i32, (S + 1) / 2 words)), then, for a KV source, its own
// compressor state: compressed-entry pools | index-key pools | pending kv | pending scores | entries before this
// step (i64) | pending rows (i64). DSpark stages use the rings column only.
struct StepTables {
  static size_t head_words(int S) { return 4 * size_t(S) + (size_t(S) + 1) / 2; }
  static size_t words(int S) { return head_words(S) + 6 * size_t(S); }
  static size_t comp_col(int S, int k) { return head_words(S) + size_t(k) * S; }  // compressor column k (0..5)
  RowInputs in;                   // ids, positions (and Engram row ids) of the S rows
  std::vector<uint64_t*> layer;   // per layer and DSpark stage: words(S) words
  std::vector<int> nmax;          // per layer: the most entries a row's KV source may hold while the graph is valid
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
  const StepTables* step = nullptr;           // a decode batch whose per-step inputs are in device memory

  int rows() const { return now; }
  int64_t first_position() const { return segs[0].p0; }
  Streams streams() const { return {H, pre, now}; }
  const int32_t* tokens() const { return in.ids; }
  bool decode_batch() const {
    if (step) return true;
    if (segs.size() < 2) return false;
    for (const auto& g : segs)
      if (g.n != 1) return false;
    return true;
  }
};

}  // namespace dsv41::gpu
