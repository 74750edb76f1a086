// The layer unit's steps on the CPU: Engram (SPEC §4.7), MoE (§4.6) and the mHC seams (§4.1).
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/parallel/communicator.hpp>

namespace dsv41::cpu {

// §4.7 Engram on all streams of H [S, hc, d]; ids [S, cols] are this layer's table rows. Parallel: w holds rows
// [engram_row_first, + engram_rows) of the table; the others' lookups stay zero here and comm sums them over
// ranks (one holder per row: exact). comm null: w holds the whole table (table_rows).
inline Status engram(const ModelShape& s, const LayerWeights& w, const int64_t* ids, int ids_stride,
                     const int32_t* tokens, float* H, int S, int64_t table_rows, parallel::Communicator* comm = nullptr) {
  const int hc = s.hc_mult, d = s.hidden_size, hd = s.engram_head_dim, cols = s.n_engram_cols();
  if (!comm && (w.engram_row_first != 0 || w.engram_rows != table_rows))
    return error(Code::invalid_argument, "engram: a share of the table and no communicator");
  std::vector<float> rows(size_t(S) * cols * hd, 0.f);
  for (int t = 0; t < S; ++t)
    for (int c = 0; c < cols; ++c) {
      const int64_t rid = ids[size_t(t) * ids_stride + c] - w.engram_row_first;
      float* dst = rows.data() + (size_t(t) * cols + c) * hd;
      if (rid < 0 || rid >= w.engram_rows) continue;  // outside the table, or another rank's row
      const uint8_t* q = w.engram_table + size_t(rid) * hd;
      const uint8_t* sc = w.engram_table_scale + size_t(rid) * (hd / 32);
      for (int i = 0; i < hd; ++i) dst[i] = bf16(num::e4m3_to_f32(q[i]) * num::ue8m0_to_f32(sc[i / 32]));
    }
  if (comm) DSV41_TRY(comm->all_reduce_sum(rows.data(), rows.size(), parallel::Elem::f32, nullptr));
  std::vector<float> kv(size_t(S) * (hc + 1) * d);
  linear(w.engram_wkv, rows.data(), S, kv.data());
  const float eps = float(s.rms_norm_eps), inv_sqrt_d = float(std::pow(double(d), -0.5));
  for (int t = 0; t < S; ++t) {
    const bool image = s.image_token_id >= 0 && tokens[t] == s.image_token_id;
    const float* value = kv.data() + (size_t(t) * (hc + 1) + hc) * d;
    for (int k = 0; k < hc; ++k) {
      float* h = H + (size_t(t) * hc + k) * d;
      const float* key = kv.data() + (size_t(t) * (hc + 1) + k) * d;
      const float* wk = w.engram_qk.data() + size_t(k) * d;
      float hh = 0.f, kk = 0.f, dot = 0.f;
      for (int i = 0; i < d; ++i) { hh += h[i] * h[i]; kk += key[i] * key[i]; dot += h[i] * wk[i] * key[i]; }
      const float rstd = (1.0f / std::sqrt(hh / d + eps)) * (1.0f / std::sqrt(kk / d + eps));
      dot = dot * rstd * inv_sqrt_d;
      const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
      float gate = 1.f / (1.f + std::exp(-std::copysign(mag, dot)));
      if (image) gate = 0.f;
      for (int i = 0; i < d; ++i) h[i] = bf16(h[i] + gate * value[i]);
    }
  }
  return Status::Ok();
}

// §4.6 MoE on x [S, d] (BF16 values); out [S, d] BF16. Each token's routed outputs go to its slots [S, k, d];
// the combine sums them in ascending expert id, then adds the shared expert, one BF16 rounding.
// Expert parallel: w holds experts [expert_first, expert_first + experts.size()); this rank fills the slots of
// those, comm sums the slots over ranks (each slot has one writer, the others add zeros: exact), and every rank
// combines as one rank would, so any world size gives the bits of world size 1. comm null: w holds every expert.
inline Status moe(const ModelShape& s, const LayerRole& role, const LayerWeights& w, const float* x,
                  const int32_t* tokens, int S, float* out, parallel::Communicator* comm = nullptr) {
  const int d = s.hidden_size, E = role.n_experts, k = role.top_k;
  const int e0 = w.expert_first, e1 = w.expert_first + int(w.experts.size());
  if (e0 < 0 || e1 > E || (!comm && (e0 != 0 || e1 != E)))
    return error(Code::invalid_argument, "moe: layer " + std::to_string(role.id) + " holds experts [" +
                                             std::to_string(e0) + ", " + std::to_string(e1) + ") of " +
                                             std::to_string(E) + (comm ? "" : " and has no communicator"));
  std::vector<float> logits(size_t(S) * E);
  linear(w.gate, x, S, logits.data(), Lin::F32);
  std::vector<int> sel(size_t(S) * k);
  std::vector<float> wt(size_t(S) * k);
  for (int t = 0; t < S; ++t) {
    const bool image = !w.gate_bias_vl.empty() && s.image_token_id >= 0 && tokens && tokens[t] == s.image_token_id;
    const float* bias = image ? w.gate_bias_vl.data() : w.gate_bias.data();
    route(logits.data() + size_t(t) * E, bias, E, k, s.norm_topk_prob, float(s.routed_scaling_factor),
          sel.data() + size_t(t) * k, wt.data() + size_t(t) * k);
  }
  std::vector<float> slots(size_t(S) * k * d, 0.f);
  const float lim = float(s.swiglu_limit);
  for (int e = e0; e < e1; ++e) {
    std::vector<int> at;  // slot t·k + i of each row routed to e
    std::vector<float> rw;
    for (int t = 0; t < S; ++t)
      for (int i = 0; i < k; ++i)
        if (sel[size_t(t) * k + i] == e) { at.push_back(t * k + i); rw.push_back(wt[size_t(t) * k + i]); }
    if (at.empty()) continue;
    const int M = int(at.size());
    std::vector<float> xs(size_t(M) * d);
    for (int m = 0; m < M; ++m) std::copy_n(x + size_t(at[m] / k) * d, d, xs.data() + size_t(m) * d);
    std::vector<float> ys(size_t(M) * d);
    expert_ffn(w.experts[size_t(e - e0)], xs.data(), M, rw.data(), lim, ys.data());
    for (int m = 0; m < M; ++m) std::copy_n(ys.data() + size_t(m) * d, d, slots.data() + size_t(at[m]) * d);
  }
  if (comm) DSV41_TRY(comm->all_reduce_sum(slots.data(), slots.size(), parallel::Elem::f32, nullptr));
  std::vector<float> sh(size_t(S) * d);
  expert_ffn(w.shared, x, S, nullptr, lim, sh.data());
  std::vector<int> order(static_cast<size_t>(k));
  std::vector<float> y(static_cast<size_t>(d));
  for (int t = 0; t < S; ++t) {
    for (int i = 0; i < k; ++i) order[size_t(i)] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return sel[size_t(t) * k + a] < sel[size_t(t) * k + b]; });
    std::fill(y.begin(), y.end(), 0.f);
    for (int i : order)
      for (int j = 0; j < d; ++j) y[size_t(j)] += slots[(size_t(t) * k + i) * d + j];
    for (int j = 0; j < d; ++j) out[size_t(t) * d + j] = bf16(y[size_t(j)] + sh[size_t(t) * d + j]);
  }
  return Status::Ok();
}

// §4.1 mHC on the CPU: the three seams of a block (blocks/layer_unit.hpp mhc_block), per row.
struct BlockWork {
  int rows = 0;
  std::vector<HcMix> mix_attn, mix_ffn;
  std::vector<float> H1;                        // [rows, hc, d] streams between attention and MoE
  std::vector<float> xa, a, xf, f;              // [rows, d]
  float *x_attn = nullptr, *attn_out = nullptr, *x_ffn = nullptr, *ffn_out = nullptr;
  explicit BlockWork(int S, int hc, int d)
      : rows(S), mix_attn(size_t(S)), mix_ffn(size_t(S)), H1(size_t(S) * hc * d), xa(size_t(S) * d), a(size_t(S) * d),
        xf(size_t(S) * d), f(size_t(S) * d), x_attn(xa.data()), attn_out(a.data()), x_ffn(xf.data()), ffn_out(f.data()) {}
};

// Mixes of H (attention's hc_attn) and the attention input: x_attn = norm(hc_pre(H, pre)).
inline void mhc_pre(const ModelShape& s, const LayerWeights& w, const float* H, const float* pre, BlockWork& b) {
  const int hc = s.hc_mult, d = s.hidden_size;
  std::vector<float> tmp(static_cast<size_t>(d));
  for (int t = 0; t < b.rows; ++t) {
    const float* Ht = H + size_t(t) * hc * d;
    b.mix_attn[t] = hc_mixes(Ht, hc, d, w.hc_attn, float(s.rms_norm_eps), s.hc_sinkhorn_iters, float(s.hc_eps));
    hc_pre(Ht, pre + size_t(t) * hc, hc, d, tmp.data());
    rmsnorm(tmp.data(), w.attn_norm.data(), 1, d, float(s.rms_norm_eps), b.xa.data() + size_t(t) * d);
  }
}

// H1 = hc_post(attention output, H); mixes of H1 (hc_ffn) and the MoE input x_ffn = norm(hc_pre(H1, pre_attn)).
inline void mhc_seam(const ModelShape& s, const LayerWeights& w, const float* H, BlockWork& b) {
  const int hc = s.hc_mult, d = s.hidden_size;
  std::vector<float> tmp(static_cast<size_t>(d));
  for (int t = 0; t < b.rows; ++t) {
    float* H1t = b.H1.data() + size_t(t) * hc * d;
    hc_post(b.a.data() + size_t(t) * d, H + size_t(t) * hc * d, b.mix_attn[t], hc, d, H1t);
    b.mix_ffn[t] = hc_mixes(H1t, hc, d, w.hc_ffn, float(s.rms_norm_eps), s.hc_sinkhorn_iters, float(s.hc_eps));
    hc_pre(H1t, b.mix_attn[t].pre.data(), hc, d, tmp.data());
    rmsnorm(tmp.data(), w.ffn_norm.data(), 1, d, float(s.rms_norm_eps), b.xf.data() + size_t(t) * d);
  }
}

// H = hc_post(MoE output, H1); pre = the MoE mixes' pre (the next unit's collapse weights).
inline void mhc_post(const ModelShape& s, float* H, float* pre, const BlockWork& b) {
  const int hc = s.hc_mult, d = s.hidden_size;
  for (int t = 0; t < b.rows; ++t) {
    hc_post(b.f.data() + size_t(t) * d, b.H1.data() + size_t(t) * hc * d, b.mix_ffn[t], hc, d, H + size_t(t) * hc * d);
    std::copy(b.mix_ffn[t].pre.begin(), b.mix_ffn[t].pre.end(), pre + size_t(t) * hc);
  }
}

}  // namespace dsv41::cpu
