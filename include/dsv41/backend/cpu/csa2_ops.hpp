// CSA2 attention on the CPU (SPEC §4.2–4.5), the readable statement of each step the blocks call
// (blocks/csa2_attention.hpp): queries, window entries, compressor, indexer with hierarchical candidates,
// sparse attention over window + selected compressed entries, the grouped output projection.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/blocks/rope.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/parallel/communicator.hpp>

namespace dsv41::cpu {

// What index sources hand down the stack within one forward (SPEC §4.4–4.5).
struct IndexHandoff {
  std::vector<std::vector<int32_t>> lists;  // per layer: [rows, index_topk], ascending, −1 = none
  std::vector<std::vector<char>> cand;      // candidate source: per row, mask over its visible entries

  // Keeps rows [off, S) (bounded replay continues with the tail only).
  void keep_tail(int off, int S, int k) {
    for (auto& l : lists)
      if (l.size() == size_t(S) * k) l.erase(l.begin(), l.begin() + size_t(off) * k);
    if (cand.size() == size_t(S)) cand.erase(cand.begin(), cand.begin() + off);
  }
};

// One layer's attention within a forward: its role, weights, RoPE table, and the rows at positions p0..p0+S−1.
// Tensor parallel: w holds heads [w.head_first, + heads()) only; q and o hold those heads.
struct AttnLayer {
  const ModelShape& s;
  const LayerRole& role;
  const LayerWeights& w;
  const RopeTable& rope;
  const ForwardHooks* hooks;
  int S = 0;
  int64_t p0 = 0;
  int heads() const { return int(w.attn_sink.size()); }
};

// The intermediate values of one layer's attention.
struct AttentionWork {
  std::vector<float> qr, q;        // [S, q_lora_rank] normed; [S, H, D] after RoPE
  std::vector<float> kv;           // [S, D] this chunk's window entries (FP8 values, after RoPE)
  std::vector<uint8_t> packed;     // [S, WindowEntry] the same, packed (stored in the ring after attention)
  std::vector<float> old;          // ring entries of positions old_lo..p0−1 still inside some row's window
  int64_t old_lo = 0;
  std::vector<float> o;            // [S, H, D] attention output (RoPE undone)
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


// §4.2 queries: q = wq_b(norm(wq_a x)) with RoPE at each row's position.
inline void queries(const AttnLayer& c, const float* x, AttentionWork& w) {
  const ModelShape& s = c.s;
  const int S = c.S, H = c.heads(), D = s.head_dim;
  std::vector<float> tmp(size_t(S) * s.q_lora_rank);
  w.qr.resize(size_t(S) * s.q_lora_rank);
  linear(c.w.wq_a, x, S, tmp.data());
  rmsnorm(tmp.data(), c.w.q_norm.data(), S, s.q_lora_rank, float(s.rms_norm_eps), w.qr.data());
  w.q.resize(size_t(S) * H * D);
  linear(c.w.wq_b, w.qr.data(), S, w.q.data());
  for (int t = 0; t < S; ++t)
    for (int h = 0; h < H; ++h) c.rope.apply(w.q.data() + (size_t(t) * H + h) * D, D, c.p0 + t);
}

// §4.2 the rows' window entries (FP8, after RoPE), and the ring entries before the chunk that rows still see.
inline void window_entries(const AttnLayer& c, const LayerState& ls, const float* x, AttentionWork& w,
                           const StackPass& pass) {
  const ModelShape& s = c.s;
  const int S = c.S, D = s.head_dim, W = s.sliding_window, we = kv::WindowEntry::bytes(D);
  std::vector<float> raw(size_t(S) * D);
  w.kv.resize(size_t(S) * D);
  linear(c.w.wkv, x, S, raw.data());
  rmsnorm(raw.data(), c.w.kv_norm.data(), S, D, float(s.rms_norm_eps), w.kv.data());
  w.packed.resize(size_t(S) * we);
  for (int t = 0; t < S; ++t) {
    c.rope.apply(w.kv.data() + size_t(t) * D, D, c.p0 + t);
    kv::WindowEntry::pack(w.kv.data() + size_t(t) * D, D, w.packed.data() + size_t(t) * we);
  }
  w.old_lo = std::max<int64_t>({0, c.p0 - W + 1, pass.window_floor});
  w.old.resize(size_t(std::max<int64_t>(c.p0 - w.old_lo, 0)) * D);
  for (int64_t p = w.old_lo; p < c.p0; ++p)
    kv::WindowEntry::unpack(ls.ring.data() + size_t(p % W) * we, D, w.old.data() + size_t(p - w.old_lo) * D);
}

// §4.3 compressor of a Full layer over the rows' normalized inputs x [S, d]; appends every completed group's
// main KV entry and index key to the layer's state.
inline void compress(const AttnLayer& c, LayerState& ls, const float* x) {
  const ModelShape& s = c.s;
  const int S = c.S, D = s.head_dim, r = c.role.ratio, dI = s.index_head_dim;
  std::vector<float> latents;  // [n_new, D]
  const int64_t first_group = ls.n_entries;
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
  const int n_new = int(latents.size() / D);
  if (n_new == 0) return;
  // Index keys from the latent before its rope; main entries from the rotated latent.
  std::vector<float> k(size_t(n_new) * dI), kn(size_t(n_new) * dI);
  linear(c.w.i_wk, latents.data(), n_new, k.data());
  rmsnorm(k.data(), c.w.i_knorm.data(), n_new, dI, float(s.rms_norm_eps), kn.data());
  const int me = kv::MainKvEntry::bytes(D), ie = kv::IndexKey::bytes(dI);
  ls.comp.resize(size_t(first_group + n_new) * me);
  ls.ikeys.resize(size_t(first_group + n_new) * ie);
  for (int g = 0; g < n_new; ++g) {
    const int64_t gpos = (first_group + g) * r;
    float* kr = kn.data() + size_t(g) * dI;
    c.rope.apply(kr, dI, gpos);
    kv::IndexKey::pack(kr, dI, ls.ikeys.data() + size_t(first_group + g) * ie);
    float* e = latents.data() + size_t(g) * D;
    c.rope.apply(e, D, gpos);
    kv::MainKvEntry::pack(e, D, ls.comp.data() + size_t(first_group + g) * me);
  }
  ls.n_entries = first_group + n_new;
}

// §4.4 indexer of a Full or Reindex layer over the entries of its KV source: its own top-k lists [S, index_topk];
// §4.5 the candidate source chooses each row's candidate blocks, layers above it score only inside them.
inline std::vector<int32_t> index_select(const AttnLayer& c, const LayerState& src, IndexHandoff& sh, const float* x,
                                         const float* qr) {
  const ModelShape& s = c.s;
  const int S = c.S, nI = s.index_n_heads, dI = s.index_head_dim, r = c.role.ratio, K = s.index_topk;
  const int64_t p0 = c.p0;
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
  const int ie = kv::IndexKey::bytes(dI);
  for (int j = 0; j < n; ++j) kv::IndexKey::unpack(src.ikeys.data() + size_t(j) * ie, dI, keys.data() + size_t(j) * dI);

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

// §3.6 attention of every row over its window entries and, for layers that read compressed entries, the entries its
// index source's lists select (decoded once each); then RoPE undone. The ring keeps the chunk's last W entries.
inline void sparse_attention(const AttnLayer& c, SequenceState& st, const IndexHandoff& sh, AttentionWork& w,
                             bool reads_compressed, const StackPass& pass) {
  const ModelShape& s = c.s;
  const int S = c.S, H = c.heads(), D = s.head_dim, W = s.sliding_window, K = s.index_topk;
  const int64_t p0 = c.p0;
  LayerState& ls = st.layers[size_t(c.role.id)];
  const std::vector<int32_t>* lists = reads_compressed ? &sh.lists[size_t(c.role.index_source)] : nullptr;
  const LayerState* kvsrc = reads_compressed ? &st.layers[size_t(c.role.kv_source)] : nullptr;
  const int me = kv::MainKvEntry::bytes(D);
  std::vector<float> comp_rows;
  std::vector<int> comp_slot;  // entry index -> row in comp_rows, −1 = not decoded
  if (kvsrc) comp_slot.assign(size_t(kvsrc->n_entries), -1);
  auto selected = [&](int t, int k) -> int32_t {
    if (lists->size() < size_t(t + 1) * K) return -1;
    const int32_t j = (*lists)[size_t(t) * K + k];
    const bool ok = j >= 0 && j < int32_t(comp_slot.size()) && j < (p0 + t + 1) / c.role.ratio;
    return ok ? j : -1;
  };
  if (lists)
    for (int t = 0; t < S; ++t)
      for (int k = 0; k < K; ++k)
        if (int32_t j = selected(t, k); j >= 0 && comp_slot[j] < 0) {
          comp_slot[j] = int(comp_rows.size() / D);
          comp_rows.resize(comp_rows.size() + D);
        }
  for (size_t j = 0; j < comp_slot.size(); ++j)
    if (comp_slot[j] >= 0)
      kv::MainKvEntry::unpack(kvsrc->comp.data() + j * me, D, comp_rows.data() + size_t(comp_slot[j]) * D);
  w.o.resize(size_t(S) * H * D);
  const float scale = float(std::pow(double(D), -0.5));
  std::vector<const float*> entries;
  for (int t = 0; t < S; ++t) {
    const int64_t p = p0 + t;
    entries.clear();
    for (int64_t wp = std::max<int64_t>({0, p - W + 1, pass.window_floor}); wp <= p; ++wp)
      entries.push_back(wp < p0 ? w.old.data() + size_t(wp - w.old_lo) * D : w.kv.data() + size_t(wp - p0) * D);
    if (lists)
      for (int k = 0; k < K; ++k)
        if (int32_t j = selected(t, k); j >= 0) entries.push_back(comp_rows.data() + size_t(comp_slot[j]) * D);
    float* ot = w.o.data() + size_t(t) * H * D;
    cpu::sparse_attention(w.q.data() + size_t(t) * H * D, H, D, entries, c.w.attn_sink.data(), scale, ot);
    for (int h = 0; h < H; ++h) c.rope.apply(ot + size_t(h) * D, D, p, /*inverse=*/true);
  }
  const int we = kv::WindowEntry::bytes(D);
  for (int t = std::max(0, S - W); t < S; ++t)
    std::copy_n(w.packed.data() + size_t(t) * we, we, ls.ring.data() + size_t((p0 + t) % W) * we);
}

// Grouped low-rank output: u_g = o_g · wo_a_gᵀ (BF16, no activation quant), then wo_b (FP8). o [S, heads held, D].
// Tensor parallel: w holds groups [group_first, + wo_a.out / R) (their heads are o's); comm gathers every rank's
// u_g (each computed by one rank: exact) and every rank applies the whole wo_b.
inline Status output_projection(const ModelShape& s, const LayerWeights& w, const float* o, int S, float* out,
                                parallel::Communicator* comm = nullptr) {
  const int G = s.o_groups, R = s.o_lora_rank, Gl = w.wo_a.out / R, gw = s.num_attention_heads / G * s.head_dim;
  const int Hd = Gl * gw;  // o's row width
  if (Gl != G && (!comm || Gl * comm->size() != G))
    return error(Code::invalid_argument, "output projection: a share of the groups and no matching communicator");
  std::vector<float> u(size_t(S) * Gl * R), rowbuf(static_cast<size_t>(gw));
  for (int g = 0; g < Gl; ++g)
    for (int rr = 0; rr < R; ++rr) {
      w.wo_a.row(g * R + rr, rowbuf.data());
      for (int t = 0; t < S; ++t) {
        const float* og = o + size_t(t) * Hd + size_t(g) * gw;
        u[size_t(t) * Gl * R + size_t(g) * R + rr] = bf16(dot(og, rowbuf.data(), gw));
      }
    }
  if (Gl != G) {  // [rank][S][Gl·R] -> [S][G·R], rank r's groups at r·Gl
    std::vector<float> all(size_t(S) * G * R), full(size_t(S) * G * R);
    DSV41_TRY(comm->all_gather(u.data(), all.data(), u.size(), parallel::Elem::f32, nullptr));
    for (int r = 0; r < comm->size(); ++r)
      for (int t = 0; t < S; ++t)
        std::copy_n(all.data() + (size_t(r) * S + t) * Gl * R, size_t(Gl) * R,
                    full.data() + size_t(t) * G * R + size_t(r) * Gl * R);
    u = std::move(full);
  }
  linear(w.wo_b, u.data(), S, out);
  return Status::Ok();
}

}  // namespace dsv41::cpu
