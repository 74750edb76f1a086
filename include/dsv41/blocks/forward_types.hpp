// What a forward pass takes and gives on either backend, and the checks both backends make of its input.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <dsv41/blocks/hooks.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41 {

struct ForwardResult {
  std::vector<float> logits;  // [rows, V] FP32: every row when all_logits, else the last
  std::vector<float> taps;    // [S, n_targets·d] BF16 values: DSpark inputs of every row
};

struct DraftResult {
  std::vector<int32_t> ids;       // [block + 1]: y, then the drafts
  std::vector<float> logits;      // [block, V], Markov bias included
  std::vector<float> confidence;  // [block] logits (before the sigmoid)
};

struct ForwardOptions {
  bool all_logits = false;      // logits of every row, else of the last
  // SPEC §5 Decoder SWA Bounded Replay (approximate by design): layers up to the decoder's first
  // run every token; the later decoder layers run only the last W, their window floored there.
  bool bounded_replay = false;
  const ForwardHooks* hooks = nullptr;
  // SPEC §4.10 image spans among this forward's rows (blocks/vision.hpp): their rows take the image embeddings.
  std::span<const ImageSpan> images;
};

// Tokens for a forward that ends at position `end` of a state of max_positions: not empty, in the vocabulary,
// within capacity (both backends).
inline Status check_tokens(const ModelShape& s, std::span<const int32_t> ids, int64_t end, int64_t max_positions) {
  if (ids.empty()) return error(Code::invalid_argument, "forward: no tokens");
  if (end > max_positions)
    return error(Code::out_of_range, "forward: " + std::to_string(end) + " positions exceed the state's capacity of " +
                                         std::to_string(max_positions));
  for (int32_t id : ids)
    if (id < 0 || id >= s.vocab_size)
      return error(Code::invalid_argument, "forward: token id " + std::to_string(id) + " outside the vocabulary");
  return Status::Ok();
}

// SPEC §5 decoder bounded replay needs every decoder layer after the first to read the first's global KV.
inline Status check_bounded_replay(const ModelShape& s, std::span<const LayerRole> sched) {
  for (int l = first_decoder_layer(s) + 1; l < s.num_hidden_layers; ++l)
    if (sched[size_t(l)].mode == AttnMode::Full)
      return error(Code::unsupported, "bounded replay: decoder layer " + std::to_string(l) +
                                          " makes its own global KV, so every token must reach it");
  return Status::Ok();
}

// SPEC §5 window replay of a sequence at `pos` from its last tokens `recent` (at least min(pos, W + N − 1)):
// the rows to run (the last min(W, pos)) and the Engram history before them (at most N − 1 ids).
struct ReplaySplit {
  int S = 0;
  std::span<const int32_t> rows, before;
};
inline Result<ReplaySplit> split_replay(const ModelShape& s, int64_t pos, std::span<const int32_t> recent) {
  const int W = s.sliding_window, N1 = std::max(s.engram_max_ngram_size - 1, 0);
  const int64_t need = std::min<int64_t>(pos, W + N1);
  if (int64_t(recent.size()) < need || int64_t(recent.size()) > pos)
    return error(Code::invalid_argument, "replay_window: pass the last " + std::to_string(need) + " tokens of the sequence");
  ReplaySplit r;
  r.S = int(std::min<int64_t>(W, pos));
  r.rows = recent.subspan(recent.size() - size_t(r.S));
  r.before = recent.subspan(0, recent.size() - size_t(r.S));
  if (r.before.size() > size_t(N1)) r.before = r.before.subspan(r.before.size() - size_t(N1));
  return r;
}

}  // namespace dsv41
