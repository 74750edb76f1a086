// Optional observation points of a forward pass (function pointer + context; all may be null).
// The golden check uses them to feed each layer unit its golden inputs and golden top-k lists;
// without hooks the same code runs unchanged.
#pragma once
#include <cstdint>

namespace dsv41 {

struct ForwardHooks {
  void* ctx = nullptr;
  // Before layer unit l (before its Engram): may overwrite H [S, hc, d] and pre [S, hc].
  void (*unit_input)(void* ctx, int layer, int64_t start, int rows, float* H, float* pre) = nullptr;
  // After layer unit l: the unit's outputs.
  void (*unit_output)(void* ctx, int layer, int64_t start, int rows, const float* H, const float* pre) = nullptr;
  // An index source's own scores [rows, n] (−inf = not eligible), as ranked.
  void (*index_scores)(void* ctx, int layer, int64_t start, int rows, int n, const float* scores) = nullptr;
  // An index source's own top-k lists [rows, k] (ascending, −1 = none); may overwrite them.
  void (*topk)(void* ctx, int layer, int64_t start, int rows, int k, int32_t* lists) = nullptr;
  // The Engram row ids [rows, n_engram_layers, cols].
  void (*engram_ids)(void* ctx, int64_t start, int rows, int n, const int64_t* ids) = nullptr;
  // DSpark taps [rows, n_targets·d] before they seed the draft stages; may overwrite them.
  void (*taps)(void* ctx, int64_t start, int rows, int width, float* taps) = nullptr;
  // Before DSpark stage k of a draft (k = n_dspark: before the head), the block's streams H [rows, hc, d] and
  // pre [rows, hc]; may overwrite them.
  void (*draft_stage)(void* ctx, int stage, int rows, float* H, float* pre) = nullptr;
};

}  // namespace dsv41
