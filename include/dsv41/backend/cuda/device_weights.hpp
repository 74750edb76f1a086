// Weights on the device, in their storage formats (see Linear in blocks/weights.hpp).
#pragma once
#include <cstdint>

#include <dsv41/blocks/weights.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

// A weight matrix on the device, in its storage format (see Linear in blocks/weights.hpp).
struct DLinear {
  WKind kind = WKind::None;
  int out = 0, in = 0;
  const uint8_t* w = nullptr;
  const uint8_t* s = nullptr;
  const bf16_t* bf16() const { return reinterpret_cast<const bf16_t*>(w); }
};

struct DLayer {
  DLinear wq_a, wq_b, wkv, wo_a, wo_b, c_wkv, c_wgate, i_wk, i_wq_b, i_wproj, gate, engram_wkv, main_proj;
  DLinear markov_embed, markov_head, conf_proj;
  DLinear shared_w1, shared_w2, shared_w3;  // the shared expert (FP8)
  const float *q_norm = nullptr, *kv_norm = nullptr, *attn_sink = nullptr, *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *c_norm = nullptr, *i_knorm = nullptr, *gate_bias = nullptr, *gate_bias_vl = nullptr;
  const float *engram_qk = nullptr, *main_norm = nullptr, *norm = nullptr;
  const float *hc_attn_fn = nullptr, *hc_attn_base = nullptr, *hc_attn_scale = nullptr;  // mHC around attention
  const float *hc_ffn_fn = nullptr, *hc_ffn_base = nullptr, *hc_ffn_scale = nullptr;     // mHC around the MoE
  // routed experts, each matrix kind packed over experts at fixed strides (bytes)
  const uint8_t *ew1 = nullptr, *es1 = nullptr, *ew3 = nullptr, *es3 = nullptr, *ew2 = nullptr, *es2 = nullptr;
  int64_t w13_stride = 0, s13_stride = 0, w2_stride = 0, s2_stride = 0;
  int expert_first = 0, experts_held = 0;  // the packed experts: expert_first .. + experts_held (a rank's share)
  const uint8_t *engram_table = nullptr, *engram_scale = nullptr;
  int64_t engram_rows = 0, engram_row_first = 0;  // rows held: engram_row_first .. + engram_rows
  const float* rope_freqs = nullptr;  // [qk_rope_head_dim / 2]
};

}  // namespace dsv41::gpu
