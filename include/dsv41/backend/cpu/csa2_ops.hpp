// CSA2 attention of one layer on the CPU (SPEC §4.2–4.5): window KV, compressor, indexer with
// hierarchical candidates, and sparse attention over window + selected compressed entries.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/blocks/weights.hpp>

namespace dsv41::cpu {

// What index sources hand down the stack within one forward (SPEC §4.4–4.5).
struct ForwardShared {
  std::vector<std::vector<int32_t>> lists;  // per layer: [rows, index_topk], ascending, −1 = none
  std::vector<std::vector<char>> cand;      // candidate source: per row, mask over its visible entries

  // Keeps rows [off, S) (bounded replay continues with the tail only).
  void keep_tail(int off, int S, int k) {
    for (auto& l : lists)
      if (l.size() == size_t(S) * k) l.erase(l.begin(), l.begin() + size_t(off) * k);
    if (cand.size() == size_t(S)) cand.erase(cand.begin(), cand.begin() + off);
  }
};

struct AttnContext {
  const ModelShape& s;
  const LayerRole& role;
  const LayerWeights& w;
  const RopeTable& rope;
  const ForwardHooks* hooks;
  int64_t window_floor = 0;  // window entries of earlier positions are not attended (SPEC §5 replay)
  bool compress = true;      // Full layers add compressed entries for these rows
};

// Top-k of one row: the k best finite scores (ties to the lower index), returned ascending.
inline std::vector<int32_t> topk_row(const float* score, int n, int k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  std::vector<int32_t> out;
  for (int i = 0; i < k; ++i)
    if (score[idx[i]] > kNegInf) out.push_back(idx[i]);
  std::sort(out.begin(), out.end());
  return out;
}

// §4.5 candidate mask of one row over its n_vis visible entries (callers pass n = n_vis, so the result
// depends on the row alone, whatever the chunk). Exact ties between block scores (relu-dead heads give
// exact zeros) are broken as the reference's CPU torch.topk breaks them: std::nth_element (or
// std::partial_sort when k·64 ≤ blocks) on (score, block); the fixtures were made that way.
inline std::vector<char> candidate_mask(const float* score, int n, int n_vis, int topk_blocks, int block) {
  std::vector<char> mask(static_cast<size_t>(n_vis), 0);
  if (n == 0) return mask;
  const int nb = (n + block - 1) / block;
  std::vector<std::pair<float, int>> q(static_cast<size_t>(nb));
  for (int b = 0; b < nb; ++b) {
    float m = kNegInf;
    for (int j = b * block; j < std::min(n, (b + 1) * block); ++j) m = std::max(m, score[j]);
    q[b] = {m, b};
  }
  if (n_vis > 0) q[(n_vis - 1) / block].first = std::numeric_limits<float>::infinity();
  const int k = std::min(topk_blocks, nb);
  auto greater = [](const std::pair<float, int>& a, const std::pair<float, int>& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  if (int64_t(k) * 64 <= nb) std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
  else std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), greater);
  for (int i = 0; i < k; ++i)
    if (q[i].first > kNegInf)
      for (int j = q[i].second * block; j < std::min(n_vis, (q[i].second + 1) * block); ++j) mask[j] = 1;
  return mask;
}

// §4.3 compressor of a Full layer over the chunk's normalized inputs x [S, d] at positions p0..;
// appends every completed group's main entry and index key to the layer's state.
inline void compress(const AttnContext& c, LayerState& ls, const float* x, int S, int64_t p0) {
  const ModelShape& s = c.s;
  const int D = s.head_dim, d = s.hidden_size, r = c.role.ratio, dI = s.index_head_dim;
  std::vector<float> latents;  // [n_new, D]
  int64_t first_group = ls.n_entries;
  if (r == 1) {
    latents.resize(size_t(S) * D);
    std::vector<float> kv(size_t(S) * D);
    linear(c.w.c_wkv, x, S, kv.data());
    rmsnorm(kv.data(), c.w.c_norm.data(), S, D, float(s.rms_norm_eps), latents.data());
  } else {
    std::vector<float> kv(size_t(S) * D), z(size_t(S) * D);
    linear(c.w.c_wkv, x, S, kv.data(), Lin::F32);
    linear(c.w.c_wgate, x, S, z.data(), Lin::F32);
    ls.pend_kv.insert(ls.pend_kv.end(), kv.begin(), kv.end());
    ls.pend_score.insert(ls.pend_score.end(), z.begin(), z.end());
    const int n_rows = int(ls.pend_kv.size() / D), n_groups = n_rows / r;
    std::vector<float> pooled(static_cast<size_t>(D));
    for (int g = 0; g < n_groups; ++g) {
      for (int i = 0; i < D; ++i) {
        float mx = kNegInf;
        for (int t = 0; t < r; ++t) mx = std::max(mx, ls.pend_score[size_t(g * r + t) * D + i]);
        float den = 0.f, acc = 0.f;
        for (int t = 0; t < r; ++t) den += std::exp(ls.pend_score[size_t(g * r + t) * D + i] - mx);
        for (int t = 0; t < r; ++t)
          acc += ls.pend_kv[size_t(g * r + t) * D + i] * (std::exp(ls.pend_score[size_t(g * r + t) * D + i] - mx) / den);
        pooled[i] = bf16(acc);
      }
      latents.resize(latents.size() + D);
      rmsnorm(pooled.data(), c.w.c_norm.data(), 1, D, float(s.rms_norm_eps), latents.data() + latents.size() - D);
    }
    ls.pend_kv.erase(ls.pend_kv.begin(), ls.pend_kv.begin() + size_t(n_groups) * r * D);
    ls.pend_score.erase(ls.pend_score.begin(), ls.pend_score.begin() + size_t(n_groups) * r * D);
  }
  (void)d;
  (void)p0;
  const int n_new = int(latents.size() / D);
  if (n_new == 0) return;
  // Index keys from the latent before its rope; main entries from the rotated latent.
  std::vector<float> k(size_t(n_new) * dI), kn(size_t(n_new) * dI);
  linear(c.w.i_wk, latents.data(), n_new, k.data());
  rmsnorm(k.data(), c.w.i_knorm.data(), n_new, dI, float(s.rms_norm_eps), kn.data());
  const int me = num::main_entry_size(D), ie = num::index_entry_size(dI);
  ls.comp.resize(size_t(first_group + n_new) * me);
  ls.ikeys.resize(size_t(first_group + n_new) * ie);
  for (int g = 0; g < n_new; ++g) {
    const int64_t gpos = (first_group + g) * r;
    float* kr = kn.data() + size_t(g) * dI;
    c.rope.apply(kr, dI, gpos);
    num::pack_index_entry(kr, dI, ls.ikeys.data() + size_t(first_group + g) * ie);
    float* e = latents.data() + size_t(g) * D;
    c.rope.apply(e, D, gpos);
    num::pack_main_entry(e, D, ls.comp.data() + size_t(first_group + g) * me);
  }
  ls.n_entries = first_group + n_new;
}

// §4.4 indexer of a Full or Reindex layer: own scores and top-k lists [S, index_topk].
inline std::vector<int32_t> index_select(const AttnContext& c, const LayerState& src, ForwardShared& sh,
                                         const float* x, const float* qr, int S, int64_t p0) {
  const ModelShape& s = c.s;
  const int nI = s.index_n_heads, dI = s.index_head_dim, r = c.role.ratio, K = s.index_topk;
  const int n = int(src.n_entries);
  std::vector<float> q(size_t(S) * nI * dI), w(size_t(S) * nI);
  linear(c.w.i_wq_b, qr, S, q.data());
  linear(c.w.i_wproj, x, S, w.data());
  const float wscale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
  for (auto& v : w) v = bf16(v * wscale);
  for (int t = 0; t < S; ++t)
    for (int h = 0; h < nI; ++h) c.rope.apply(q.data() + (size_t(t) * nI + h) * dI, dI, p0 + t);
  for (int t = 0; t < S; ++t) num::fp4_quant_block32(q.data() + size_t(t) * nI * dI, nI * dI);
  std::vector<float> keys(size_t(n) * dI);
  const int ie = num::index_entry_size(dI);
  for (int j = 0; j < n; ++j) num::unpack_index_entry(src.ikeys.data() + size_t(j) * ie, dI, keys.data() + size_t(j) * dI);

  std::vector<float> scores(size_t(S) * n, kNegInf);
  std::vector<int32_t> lists(size_t(S) * K, -1);
  if (c.role.candidate_source) sh.cand.assign(size_t(S), {});
  for (int t = 0; t < S; ++t) {
    const int vis = int(std::min<int64_t>((p0 + t + 1) / r, n));
    float* sc = scores.data() + size_t(t) * n;
    for (int j = 0; j < vis; ++j) {
      float acc = 0.f;
      for (int h = 0; h < nI; ++h) {
        const float* qh = q.data() + (size_t(t) * nI + h) * dI;
        acc += w[size_t(t) * nI + h] * std::max(dot(qh, keys.data() + size_t(j) * dI, dI), 0.f);
      }
      sc[j] = acc;
    }
    if (c.role.candidate_source)
      sh.cand[t] = candidate_mask(sc, vis, vis, s.candidate_topk_blocks, s.candidate_block_size);
    else if (c.role.uses_candidates)
      for (int j = 0; j < vis; ++j)
        if (t >= int(sh.cand.size()) || j >= int(sh.cand[t].size()) || !sh.cand[t][j]) sc[j] = kNegInf;
  }
  if (c.hooks && c.hooks->index_scores) c.hooks->index_scores(c.hooks->ctx, c.role.id, p0, S, n, scores.data());
  for (int t = 0; t < S; ++t) {
    const int vis = int(std::min<int64_t>((p0 + t + 1) / r, n));
    auto picks = topk_row(scores.data() + size_t(t) * n, vis, K);
    std::copy(picks.begin(), picks.end(), lists.begin() + size_t(t) * K);
  }
  return lists;
}

// Grouped low-rank output: u_g = o_g · wo_a_gᵀ (BF16, no activation quant), then wo_b (FP8).
inline void output_projection(const ModelShape& s, const LayerWeights& w, const float* o, int S, float* out) {
  const int H = s.num_attention_heads, D = s.head_dim, G = s.o_groups, R = s.o_lora_rank, gw = H * D / G;
  std::vector<float> u(size_t(S) * G * R), rowbuf(static_cast<size_t>(gw));
  for (int g = 0; g < G; ++g)
    for (int rr = 0; rr < R; ++rr) {
      w.wo_a.row(g * R + rr, rowbuf.data());
      for (int t = 0; t < S; ++t) {
        const float* og = o + size_t(t) * H * D + size_t(g) * gw;
        u[size_t(t) * G * R + size_t(g) * R + rr] = bf16(dot(og, rowbuf.data(), gw));
      }
    }
  linear(w.wo_b, u.data(), S, out);
}

// §4.2 attention of one backbone layer over its normalized inputs x [S, d]; writes out [S, d].
inline void attention(const AttnContext& c, SequenceState& st, ForwardShared& sh, const float* x, int S, int64_t p0,
                      float* out) {
  const ModelShape& s = c.s;
  const int H = s.num_attention_heads, D = s.head_dim, W = s.sliding_window, d = s.hidden_size;
  const int id = c.role.id;
  LayerState& ls = st.layers[id];
  std::vector<float> qr(size_t(S) * s.q_lora_rank), tmp(size_t(S) * s.q_lora_rank);
  linear(c.w.wq_a, x, S, tmp.data());
  rmsnorm(tmp.data(), c.w.q_norm.data(), S, s.q_lora_rank, float(s.rms_norm_eps), qr.data());
  std::vector<float> q(size_t(S) * H * D);
  linear(c.w.wq_b, qr.data(), S, q.data());
  for (int t = 0; t < S; ++t)
    for (int h = 0; h < H; ++h) c.rope.apply(q.data() + (size_t(t) * H + h) * D, D, p0 + t);

  // This chunk's window entries, FP8 fake-quantized (packed into the ring after attention).
  std::vector<float> kv(size_t(S) * D), kvn(size_t(S) * D);
  linear(c.w.wkv, x, S, kv.data());
  rmsnorm(kv.data(), c.w.kv_norm.data(), S, D, float(s.rms_norm_eps), kvn.data());
  const int we = num::window_entry_size(D);
  std::vector<uint8_t> packed(size_t(S) * we);
  for (int t = 0; t < S; ++t) {
    c.rope.apply(kvn.data() + size_t(t) * D, D, p0 + t);
    num::pack_window_entry(kvn.data() + size_t(t) * D, D, packed.data() + size_t(t) * we);
  }
  // Ring entries of positions before the chunk still inside some row's window.
  const int64_t old_lo = std::max<int64_t>({0, p0 - W + 1, c.window_floor});
  std::vector<float> old(size_t(p0 - old_lo) * D);
  for (int64_t p = old_lo; p < p0; ++p)
    num::unpack_window_entry(ls.ring.data() + size_t(p % W) * we, D, old.data() + size_t(p - old_lo) * D);

  // Compressed entries and the top-k lists.
  const std::vector<int32_t>* lists = nullptr;
  const LayerState* kvsrc = nullptr;
  std::vector<int32_t> own;
  if (c.role.ratio > 0) {
    if (c.role.mode == AttnMode::Full && c.compress) compress(c, ls, x, S, p0);
    kvsrc = &st.layers[c.role.kv_source];
    if (c.role.mode == AttnMode::Full || c.role.mode == AttnMode::Reindex) {
      own = index_select(c, *kvsrc, sh, x, qr.data(), S, p0);
      if (c.hooks && c.hooks->topk) c.hooks->topk(c.hooks->ctx, id, p0, S, s.index_topk, own.data());
      sh.lists[id] = std::move(own);
    }
    lists = &sh.lists[c.role.index_source];
  }
  const int me = num::main_entry_size(D);
  std::vector<float> comp_rows;
  std::vector<int> comp_slot;  // entry index -> row in comp_rows, -1 = not decoded
  if (kvsrc) comp_slot.assign(size_t(kvsrc->n_entries), -1);

  // Decode each compressed entry that some row selected, once.
  auto selected = [&](int t, int k) -> int32_t {
    const int32_t j = (*lists)[size_t(t) * s.index_topk + k];
    const bool ok = j >= 0 && j < int32_t(comp_slot.size()) && j < (p0 + t + 1) / c.role.ratio;
    return ok ? j : -1;
  };
  if (lists)
    for (int t = 0; t < S; ++t)
      for (int k = 0; k < s.index_topk; ++k)
        if (int32_t j = selected(t, k); j >= 0 && comp_slot[j] < 0) {
          comp_slot[j] = int(comp_rows.size() / D);
          comp_rows.resize(comp_rows.size() + D);
        }
  for (size_t j = 0; j < comp_slot.size(); ++j)
    if (comp_slot[j] >= 0)
      num::unpack_main_entry(kvsrc->comp.data() + j * me, D, comp_rows.data() + size_t(comp_slot[j]) * D);
  std::vector<float> o(size_t(S) * H * D);
  const float scale = float(std::pow(double(D), -0.5));
  for (int t = 0; t < S; ++t) {
    const int64_t p = p0 + t;
    std::vector<const float*> entries;
    for (int64_t wp = std::max<int64_t>({0, p - W + 1, c.window_floor}); wp <= p; ++wp)
      entries.push_back(wp < p0 ? old.data() + size_t(wp - old_lo) * D : kvn.data() + size_t(wp - p0) * D);
    if (lists)
      for (int k = 0; k < s.index_topk; ++k)
        if (int32_t j = selected(t, k); j >= 0) entries.push_back(comp_rows.data() + size_t(comp_slot[j]) * D);
    float* ot = o.data() + size_t(t) * H * D;
    sparse_attention(q.data() + size_t(t) * H * D, H, D, entries, c.w.attn_sink.data(), scale, ot);
    for (int h = 0; h < H; ++h) c.rope.apply(ot + size_t(h) * D, D, p, /*inverse=*/true);
  }
  // The ring keeps the chunk's last W entries.
  for (int t = std::max(0, S - W); t < S; ++t)
    std::copy_n(packed.data() + size_t(t) * we, we, ls.ring.data() + size_t((p0 + t) % W) * we);

  output_projection(s, c.w, o.data(), S, out);
  (void)d;
}

}  // namespace dsv41::cpu
