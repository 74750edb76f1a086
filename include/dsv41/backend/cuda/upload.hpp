// Weights to the device once, at load: FP8/FP4 bytes and their scales as stored, BF16 as bf16, FP32 vectors as
// they are; routed experts packed at fixed strides per matrix kind; each layer's RoPE table.
#pragma once
#include <array>
#include <initializer_list>
#include <utility>
#include <vector>

#include <dsv41/backend/cuda/device_model.hpp>
#include <dsv41/blocks/rope.hpp>
#include <dsv41/blocks/weights.hpp>

namespace dsv41::gpu {

class WeightUpload {
 public:
  WeightUpload(DeviceArena& mem, Uploader& up) : wmem_(mem), up_(&up) {}

  Status up_linear(const Linear& h, DLinear& d) {
    d.kind = h.kind;
    d.out = h.out;
    d.in = h.in;
    if (h.kind == WKind::None || !h.w) return Status::Ok();
    size_t wb = 0, sb = 0;
    switch (h.kind) {
      case WKind::BF16: wb = size_t(h.out) * h.in * 2; break;
      case WKind::F32: wb = size_t(h.out) * h.in * 4; break;
      case WKind::FP8: wb = size_t(h.out) * h.in; sb = size_t((h.out + 31) / 32) * ((h.in + 31) / 32); break;
      case WKind::FP4: wb = size_t(h.out) * h.in / 2; sb = size_t(h.out) * (h.in / 32); break;
      case WKind::None: break;
    }
    DSV41_TRY(wmem_.upload(d.w, h.w, wb, *up_));
    if (sb) DSV41_TRY(wmem_.upload(d.s, h.s, sb, *up_));
    return Status::Ok();
  }
  Status up_vec(const std::vector<float>& v, const float*& d) {
    if (v.empty()) { d = nullptr; return Status::Ok(); }
    return wmem_.upload(d, v.data(), v.size(), *up_);
  }
  // Routed experts' matrix m (0 = w1, 1 = w2, 2 = w3) of every expert, packed at fixed strides.
  Status up_experts(const std::vector<std::array<Linear, 3>>& ex, int m, const uint8_t*& w, const uint8_t*& s,
                    int64_t& gw, int64_t& gs) {
    if (ex.empty()) return Status::Ok();
    const Linear& l0 = ex[0][m];
    gw = int64_t(l0.out) * l0.in / 2;
    gs = int64_t(l0.out) * (l0.in / 32);
    uint8_t *dw = nullptr, *ds = nullptr;
    DSV41_TRY(wmem_.alloc(dw, size_t(gw) * ex.size()));
    DSV41_TRY(wmem_.alloc(ds, size_t(gs) * ex.size()));
    for (size_t e = 0; e < ex.size(); ++e) {
      const Linear& l = ex[e][m];
      if (l.kind != WKind::FP4 || l.out != l0.out || l.in != l0.in || !l.w || !l.s)
        return error(Code::format_error, "CUDA upload: routed experts must be FP4 of one shape");
      DSV41_TRY(up_->copy(dw + e * size_t(gw), l.w, size_t(gw)));
      DSV41_TRY(up_->copy(ds + e * size_t(gs), l.s, size_t(gs)));
    }
    w = dw;
    s = ds;
    return Status::Ok();
  }

  // Every weight of the model: the global ones, then each layer's (backbone, then DSpark stages).
  Status all(const ModelShape& shape, const std::vector<LayerRole>& sched, const Weights& hw, DLinear& embed, DLinear& head,
             const float*& norm, std::vector<DLayer>& layers) {
    DSV41_TRY(up_linear(hw.embed, embed));
    DSV41_TRY(up_linear(hw.head, head));
    DSV41_TRY(up_vec(hw.norm, norm));
    layers.resize(hw.layers.size());
    for (size_t i = 0; i < hw.layers.size(); ++i) {
      const LayerWeights& h = hw.layers[i];
      DLayer& L = layers[i];
      for (auto [src, dst] : std::initializer_list<std::pair<const Linear*, DLinear*>>{
               {&h.wq_a, &L.wq_a}, {&h.wq_b, &L.wq_b}, {&h.wkv, &L.wkv}, {&h.wo_a, &L.wo_a}, {&h.wo_b, &L.wo_b},
               {&h.c_wkv, &L.c_wkv}, {&h.c_wgate, &L.c_wgate}, {&h.i_wk, &L.i_wk}, {&h.i_wq_b, &L.i_wq_b},
               {&h.i_wproj, &L.i_wproj}, {&h.gate, &L.gate}, {&h.engram_wkv, &L.engram_wkv},
               {&h.main_proj, &L.main_proj}, {&h.markov_embed, &L.markov_embed}, {&h.markov_head, &L.markov_head},
               {&h.conf_proj, &L.conf_proj}, {&h.shared[0], &L.shared_w1}, {&h.shared[1], &L.shared_w2}, {&h.shared[2], &L.shared_w3}})
        DSV41_TRY(up_linear(*src, *dst));
      for (auto [src, dst] : std::initializer_list<std::pair<const std::vector<float>*, const float**>>{
               {&h.q_norm, &L.q_norm}, {&h.kv_norm, &L.kv_norm}, {&h.attn_sink, &L.attn_sink},
               {&h.attn_norm, &L.attn_norm}, {&h.ffn_norm, &L.ffn_norm}, {&h.c_norm, &L.c_norm},
               {&h.i_knorm, &L.i_knorm}, {&h.gate_bias, &L.gate_bias}, {&h.gate_bias_vl, &L.gate_bias_vl},
               {&h.engram_qk, &L.engram_qk}, {&h.main_norm, &L.main_norm}, {&h.norm, &L.norm},
               {&h.hc_attn.fn, &L.hc_attn_fn}, {&h.hc_attn.base, &L.hc_attn_base}, {&h.hc_attn.scale, &L.hc_attn_scale},
               {&h.hc_ffn.fn, &L.hc_ffn_fn}, {&h.hc_ffn.base, &L.hc_ffn_base}, {&h.hc_ffn.scale, &L.hc_ffn_scale}})
        DSV41_TRY(up_vec(*src, *dst));
      DSV41_TRY(up_experts(h.experts, 0, L.ew1, L.es1, L.w13_stride, L.s13_stride));
      DSV41_TRY(up_experts(h.experts, 2, L.ew3, L.es3, L.w13_stride, L.s13_stride));
      DSV41_TRY(up_experts(h.experts, 1, L.ew2, L.es2, L.w2_stride, L.s2_stride));
      L.expert_first = h.expert_first;
      L.experts_held = int(h.experts.size());
      if (h.engram_table) {
        const int hd = shape.engram_head_dim;
        L.engram_rows = h.engram_rows;
        L.engram_row_first = h.engram_row_first;
        DSV41_TRY(wmem_.upload(L.engram_table, h.engram_table, size_t(h.engram_rows) * hd, *up_));
        DSV41_TRY(wmem_.upload(L.engram_scale, h.engram_table_scale, size_t(h.engram_rows) * (hd / 32), *up_));
      }
      const RopeTable rt = rope_table_for(shape, sched[i].ratio > 0);
      DSV41_TRY(up_vec(rt.freqs, L.rope_freqs));
    }
    return Status::Ok();
  }

 private:
  DeviceArena& wmem_;
  Uploader* up_;
};

}  // namespace dsv41::gpu
