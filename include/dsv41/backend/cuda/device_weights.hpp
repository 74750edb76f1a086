// Weights on the device, in their storage formats (see Linear in model/weights.hpp).
#pragma once
#include <cstdint>

#include <dsv41/blocks/weights.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

// A weight matrix on the device, in its storage format (see Linear in model/weights.hpp).
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
  DLinear sh1, sh2, sh3;  // shared expert w1, w2, w3 (FP8)
  const float *q_norm = nullptr, *kv_norm = nullptr, *attn_sink = nullptr, *attn_norm = nullptr, *ffn_norm = nullptr;
  const float *c_norm = nullptr, *i_knorm = nullptr, *gate_bias = nullptr, *gate_bias_vl = nullptr;
  const float *engram_qk = nullptr, *main_norm = nullptr, *norm = nullptr;
  const float *hca_fn = nullptr, *hca_base = nullptr, *hca_scale = nullptr;
  const float *hcf_fn = nullptr, *hcf_base = nullptr, *hcf_scale = nullptr;
  // routed experts, each matrix kind packed over experts at fixed strides (bytes)
  const uint8_t *ew1 = nullptr, *es1 = nullptr, *ew3 = nullptr, *es3 = nullptr, *ew2 = nullptr, *es2 = nullptr;
  int64_t gw13 = 0, gs13 = 0, gw2 = 0, gs2 = 0;
  const uint8_t *engram_table = nullptr, *engram_scale = nullptr;
  int64_t engram_rows = 0;
  const float* rope_freqs = nullptr;  // [qk_rope_head_dim / 2]
};

}  // namespace dsv41::gpu
