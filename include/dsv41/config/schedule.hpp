// Layer roles derived from the shape (SPEC §1): attention mode, sources, Engram, DSpark taps.
#pragma once
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>

namespace dsv41 {

enum class AttnMode { Window, Full, Reindex, Reuse };

inline const char* mode_name(AttnMode m) {
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
  bool uses_candidates = false;  // Reindex above the candidate source: scores restricted to the mask
  int engram_slot = -1;   // index into engram_layer_ids, -1 when none
  int tap_slot = -1;      // index into dspark_target_layer_ids, -1 when none
  bool encoder = false;   // before the first ratio-1 layer
  int n_experts = 0, top_k = 0;
};

// The encoder is the run of layers before the first backbone layer with ratio 1; the decoder is the rest.
inline int first_decoder_layer(const ModelShape& s) {
  for (int l = 0; l < s.num_hidden_layers; ++l)
    if (s.compress_ratios[l] == 1) return l;
  return s.num_hidden_layers;
}

inline std::vector<LayerRole> make_schedule(const ModelShape& s) {
  std::vector<LayerRole> out;
  const int L = s.num_hidden_layers, dec = first_decoder_layer(s);
  auto index_of = [](const std::vector<int>& v, int x) {
    for (size_t i = 0; i < v.size(); ++i) if (v[i] == x) return (int)i;
    return -1;
  };
  for (int l = 0; l < L + s.n_dspark(); ++l) {
    LayerRole r;
    r.id = l;
    r.dspark = l >= L;
    r.ratio = s.compress_ratios[l];
    r.n_experts = r.dspark ? s.dspark_n_routed_experts : s.n_routed_experts;
    r.top_k = r.dspark ? s.dspark_num_experts_per_tok : s.num_experts_per_tok;
    if (!r.dspark) {
      r.encoder = l < dec;
      r.engram_slot = index_of(s.engram_layer_ids, l);
      r.tap_slot = index_of(s.dspark_target_layer_ids, l);
      if (r.ratio > 0) {
        for (int k : s.kv_source_layer_ids) if (k <= l && k > r.kv_source) r.kv_source = k;
        for (int k : s.index_source_layer_ids) if (k <= l && k > r.index_source) r.index_source = k;
        if (r.kv_source == l) r.mode = AttnMode::Full;
        else if (r.index_source == l) r.mode = AttnMode::Reindex;
        else r.mode = AttnMode::Reuse;
        r.candidate_source = l == s.candidate_source_layer_id;
        r.uses_candidates = (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex) &&
                            s.candidate_source_layer_id >= 0 && s.candidate_source_layer_id < l;
      }
    }
    out.push_back(r);
  }
  return out;
}

inline std::string weight_prefix(const ModelShape& s, int layer) {
  return layer < s.num_hidden_layers ? "layers." + std::to_string(layer)
                                     : "mtp." + std::to_string(layer - s.num_hidden_layers);
}

}  // namespace dsv41
