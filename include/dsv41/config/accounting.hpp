// Parameter and cache-byte accounting derived from a shape (SPEC §1, §6).
#pragma once
#include <cstdint>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/config/tensors.hpp>

namespace dsv41 {

// Bytes of one cache entry as stored (SPEC §6).
constexpr int64_t main_kv_entry_bytes(int64_t head_dim) { return head_dim / 2 + head_dim / 16; }  // E2M1 + E4M3/16
constexpr int64_t index_key_entry_bytes(int64_t index_head_dim) { return index_head_dim / 2 + index_head_dim / 32; }
constexpr int64_t window_entry_bytes(int64_t head_dim) { return head_dim + head_dim / 32; }  // E4M3 + UE8M0/32

struct CacheBytes {
  double global_per_token = 0;        // compressed main KV + index keys, all KV sources
  double entries_per_token = 0;       // compressed entries written per token
  int64_t window_per_sequence = 0;    // every layer's ring (DSpark stages included)
  int64_t main_entry = 0, index_entry = 0, window_entry = 0;
};

inline CacheBytes cache_bytes(const ModelShape& s) {
  CacheBytes c;
  c.main_entry = main_kv_entry_bytes(s.head_dim);
  c.index_entry = index_key_entry_bytes(s.index_head_dim);
  c.window_entry = window_entry_bytes(s.head_dim);
  for (const auto& r : make_schedule(s))
    if (r.mode == AttnMode::Full) c.entries_per_token += 1.0 / r.ratio;
  c.global_per_token = c.entries_per_token * double(c.main_entry + c.index_entry);
  c.window_per_sequence = int64_t(s.num_hidden_layers + s.n_dspark()) * s.sliding_window * c.window_entry;
  return c;
}

struct ParamCounts {
  double total = 0;              // every tensor of the text model
  double vision = 0;             // the vision tower, aligner and image-span vectors (not in total)
  double engram_tables = 0;      // of which Engram hash tables
  double dspark = 0;             // of which DSpark stages
  double embed = 0, head = 0;    // embedding table and output head
  double active_layers = 0;      // activated per token over all backbone layers
  double active_decode = 0;      // one decode token: all backbone layers + final norm + head
  double active_prefill = 0;     // one prompt token in bounded-replay prefill: layers 0..first decoder layer
  double active_encoder = 0;     // layers before the first decoder layer
  double active_decoder = 0;     // layers from the first decoder layer on
  double active_embed_lookup = 0;
};

inline ParamCounts count_params(const ModelShape& s) {
  ParamCounts p;
  const int dec = first_decoder_layer(s);
  for (const auto& t : expected_tensors(s)) {
    const double n = double(t.params), a = n * t.active_fraction;
    if (t.group == TensorGroup::Vision) { p.vision += n; continue; }
    p.total += n;
    if (t.group == TensorGroup::Engram) p.engram_tables += n;
    if (t.group == TensorGroup::DSpark) { p.dspark += n; continue; }
    if (t.layer < 0) {
      if (t.name == "embed.weight") { p.embed = n; p.active_embed_lookup = a; }
      else { p.head += n; p.active_decode += a; }
      continue;
    }
    p.active_layers += a;
    p.active_decode += a;
    if (t.layer < dec) p.active_encoder += a; else p.active_decoder += a;
    if (t.layer <= dec) p.active_prefill += a;
  }
  return p;
}

}  // namespace dsv41
