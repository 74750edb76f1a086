// Layer roles derived from the shape (SPEC §1): attention mode, sources, Engram, DSpark taps.
// The role rules are written once, as constexpr code over spans (ScheduleView); make_schedule()
// runs them on a ModelShape, configs::schedule<C>() (presets.hpp) on a preset at compile time.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>

namespace dsv41 {

enum class AttnMode { Window, Full, Reindex, Reuse };

constexpr const char* mode_name(AttnMode m) {
  switch (m) {
    case AttnMode::Window: return "window";
    case AttnMode::Full: return "full";
    case AttnMode::Reindex: return "reindex";
    case AttnMode::Reuse: return "reuse";
  }
  return "?";
}

struct LayerRole {
  int id = 0;             // 0..L-1 backbone, L.. DSpark stages
  bool dspark = false;    // a DSpark stage (mtp.{id-L})
  int ratio = 0;          // compress ratio; 0 = window only
  AttnMode mode = AttnMode::Window;
  int kv_source = -1;     // layer whose compressed KV this layer reads
  int index_source = -1;  // layer whose top-k list this layer uses (itself for Full/Reindex)
  bool candidate_source = false;
  bool uses_candidates = false;  // Full/Reindex above the candidate source: scores restricted to the mask
  int engram_slot = -1;   // index into engram_layer_ids, -1 when none
  int tap_slot = -1;      // index into dspark_target_layer_ids, -1 when none
  bool encoder = false;   // before the first ratio-1 layer
  int n_experts = 0, top_k = 0;

  constexpr bool compresses() const { return mode == AttnMode::Full; }  // writes compressed KV + index keys
  constexpr bool runs_indexer() const { return mode == AttnMode::Full || mode == AttnMode::Reindex; }
  constexpr bool reads_compressed() const { return ratio > 0; }  // attends over kv_source's entries
  constexpr bool is_window_only() const { return ratio == 0; }
  constexpr bool has_engram() const { return engram_slot >= 0; }
  constexpr bool is_tap() const { return tap_slot >= 0; }  // feeds DSpark its hidden state
  constexpr bool is_decoder() const { return !dspark && !encoder; }

  constexpr bool operator==(const LayerRole&) const = default;
};

// What the role rules read, as views (borrowed: the arrays must outlive the view).
struct ScheduleView {
  int n_layers = 0;  // backbone layers L
  int n_dspark = 0;  // DSpark stages after them
  std::span<const int> compress_ratios;  // at least L + n_dspark entries
  std::span<const int> kv_source_layer_ids, index_source_layer_ids;
  std::span<const int> engram_layer_ids, dspark_target_layer_ids;
  int candidate_source_layer_id = -1;
  int n_routed_experts = 0, num_experts_per_tok = 0;
  int dspark_n_routed_experts = 0, dspark_num_experts_per_tok = 0;

  constexpr int size() const { return n_layers + n_dspark; }
};

inline ScheduleView schedule_view(const ModelShape& s) {
  ScheduleView v;
  v.n_layers = s.num_hidden_layers;
  v.n_dspark = s.n_dspark();
  v.compress_ratios = s.compress_ratios;
  v.kv_source_layer_ids = s.kv_source_layer_ids;
  v.index_source_layer_ids = s.index_source_layer_ids;
  v.engram_layer_ids = s.engram_layer_ids;
  v.dspark_target_layer_ids = s.dspark_target_layer_ids;
  v.candidate_source_layer_id = s.candidate_source_layer_id;
  v.n_routed_experts = s.n_routed_experts;
  v.num_experts_per_tok = s.num_experts_per_tok;
  v.dspark_n_routed_experts = s.dspark_n_routed_experts;
  v.dspark_num_experts_per_tok = s.dspark_num_experts_per_tok;
  return v;
}

// The encoder is the run of layers before the first backbone layer with ratio 1; the decoder is the rest.
constexpr int first_decoder_layer(const ScheduleView& v) {
  for (int l = 0; l < v.n_layers; ++l)
    if (v.compress_ratios[l] == 1) return l;
  return v.n_layers;
}

inline int first_decoder_layer(const ModelShape& s) { return first_decoder_layer(schedule_view(s)); }

// The role rules (SPEC §1). Writes v.size() roles into out (out.size() must be at least that).
constexpr void fill_schedule(const ScheduleView& v, std::span<LayerRole> out) {
  auto index_of = [](std::span<const int> ids, int x) {
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == x) return int(i);
    return -1;
  };
  const int L = v.n_layers, dec = first_decoder_layer(v);
  for (int l = 0; l < v.size(); ++l) {
    LayerRole r;
    r.id = l;
    r.dspark = l >= L;
    r.ratio = v.compress_ratios[l];
    r.n_experts = r.dspark ? v.dspark_n_routed_experts : v.n_routed_experts;
    r.top_k = r.dspark ? v.dspark_num_experts_per_tok : v.num_experts_per_tok;
    if (!r.dspark) {
      r.encoder = l < dec;
      r.engram_slot = index_of(v.engram_layer_ids, l);
      r.tap_slot = index_of(v.dspark_target_layer_ids, l);
      if (r.ratio > 0) {
        for (int k : v.kv_source_layer_ids) if (k <= l && k > r.kv_source) r.kv_source = k;
        for (int k : v.index_source_layer_ids) if (k <= l && k > r.index_source) r.index_source = k;
        if (r.kv_source == l) r.mode = AttnMode::Full;
        else if (r.index_source == l) r.mode = AttnMode::Reindex;
        else r.mode = AttnMode::Reuse;
        r.candidate_source = l == v.candidate_source_layer_id;
        r.uses_candidates = r.runs_indexer() && v.candidate_source_layer_id >= 0 && v.candidate_source_layer_id < l;
      }
    }
    out[std::size_t(l)] = r;
  }
}

inline std::vector<LayerRole> make_schedule(const ModelShape& s) {
  const ScheduleView v = schedule_view(s);
  std::vector<LayerRole> out(std::size_t(v.size() > 0 ? v.size() : 0));
  fill_schedule(v, out);
  return out;
}

inline std::string weight_prefix(const ModelShape& s, int layer) {
  return layer < s.num_hidden_layers ? "layers." + std::to_string(layer)
                                     : "mtp." + std::to_string(layer - s.num_hidden_layers);
}

}  // namespace dsv41
