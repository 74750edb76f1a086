// The CPU backend's forward pass (SPEC §4): embedding, the encoder and decoder stacks of layer units,
// the head, and the DSpark draft stages (§4.9). Runtime-shaped: any valid ModelShape.
#pragma once
#include <algorithm>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/backend/cpu/csa2_ops.hpp>
#include <dsv41/backend/cpu/unit_ops.hpp>
#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/engram/hash.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/backend/cpu/snapshot.hpp>
#include <dsv41/blocks/weights.hpp>

namespace dsv41::cpu {

// A contiguous run of backbone layers: the encoder (before the first ratio-1 layer) or the decoder.
struct Stack {
  int first = 0, last = 0;  // [first, last)
};

class Forward {
 public:
  Forward(const ModelShape& s, const Weights& w, std::vector<int32_t> token_map, engram::HashPlan plan)
      : s_(s), w_(w), sched_(make_schedule(s)), token_map_(std::move(token_map)), plan_(std::move(plan)) {
    const int dec = first_decoder_layer(s);
    encoder_ = {0, dec};
    decoder_ = {dec, s.num_hidden_layers};
    for (const auto& r : sched_) ropes_.push_back(rope_table_for(s, r.ratio > 0));
  }

  const ModelShape& shape() const { return s_; }
  const std::vector<LayerRole>& schedule() const { return sched_; }
  Stack encoder() const { return encoder_; }
  Stack decoder() const { return decoder_; }

  // Runs ids at positions st.pos.. and advances the state (any chunk length; decode is S = 1).
  Status forward(SequenceState& st, std::span<const int32_t> ids, ForwardResult& res, bool all_logits = false,
                 const ForwardHooks* hooks = nullptr) const {
    ForwardOptions o;
    o.all_logits = all_logits;
    o.hooks = hooks;
    return forward(st, ids, res, o);
  }

  // Out of memory anywhere in the forward is an error of this call; the state is put back as it was.
  Status forward(SequenceState& st, std::span<const int32_t> ids, ForwardResult& res, const ForwardOptions& o) const {
    DSV41_TRY(check_input(st, ids, st.pos + int64_t(ids.size())));
    Snapshot before;
    try {
      before = snapshot(s_, sched_, st, ids);
    } catch (const std::bad_alloc&) {
      return error(Code::out_of_memory, "forward: out of memory");
    }
    try {
      return forward_unguarded(st, ids, res, o);
    } catch (const std::bad_alloc&) {
      (void)restore(st, before, 0);
      res = ForwardResult{};
      return error(Code::out_of_memory, "forward: out of memory after " + std::to_string(st.pos) +
                                            " positions; the sequence is unchanged");
    }
  }

 private:
  Status forward_unguarded(SequenceState& st, std::span<const int32_t> ids, ForwardResult& res,
                           const ForwardOptions& o) const {
    const int S = int(ids.size());
    if (o.bounded_replay) DSV41_TRY(check_bounded_replay(s_, sched_));
    Rows r;
    DSV41_TRY(start_rows(st, ids, st.history, st.pos, o.hooks, r));
    res.taps.assign(size_t(S) * n_taps() * s_.hidden_size, 0.f);
    ForwardShared sh;
    sh.lists.resize(sched_.size());
    const int W = s_.sliding_window;
    if (!o.bounded_replay || S <= W || decoder_.first + 1 >= decoder_.last) {
      run_layers(0, s_.num_hidden_layers, st, sh, r, res.taps.data(), o.hooks, Pass{});
    } else {
      // Layers 0..decoder.first see every token; the rest of the decoder only the last W.
      run_layers(0, decoder_.first + 1, st, sh, r, res.taps.data(), o.hooks, Pass{});
      const int off = S - W;
      r.keep_tail(off, s_, plan_);
      sh.keep_tail(off, S, s_.index_topk);
      Pass tail;
      tail.window_floor = r.p0;
      run_layers(decoder_.first + 1, s_.num_hidden_layers, st, sh, r, res.taps.data() + size_t(off) * n_taps() * s_.hidden_size,
                 o.hooks, tail);
    }
    finish_rows(st, r, ids, res, o);
    return Status::Ok();
  }

 public:
  // SPEC §5 Encoder SWA Bounded Replay: rebuilds every layer's window (and the DSpark rings) from the
  // last tokens after the rings were dropped, reusing the stored global KV; positions do not advance.
  // `recent` holds the sequence's last tokens, at least min(pos, W + N − 1) of them (N: Engram n-gram).
  Status replay_window(SequenceState& st, std::span<const int32_t> recent, ForwardResult& res,
                       const ForwardHooks* hooks = nullptr) const {
    auto split = split_replay(s_, st.pos, recent);
    if (!split.ok()) return split.status();
    const auto [S, rows, before] = *split;
    DSV41_TRY(check_input(st, rows, st.pos));
    Rows r;
    std::vector<int32_t> hist(before.begin(), before.end());
    DSV41_TRY(start_rows(st, rows, hist, st.pos - S, hooks, r));
    res.taps.assign(size_t(S) * n_taps() * s_.hidden_size, 0.f);
    ForwardShared sh;
    sh.lists.resize(sched_.size());
    Pass replay;
    replay.window_floor = r.p0;
    replay.compress = false;
    run_layers(0, s_.num_hidden_layers, st, sh, r, res.taps.data(), hooks, replay);
    res.logits.assign(size_t(s_.vocab_size), 0.f);
    head(r.H.data(), r.pre.data(), S - 1, S, res.logits.data());
    if (s_.n_dspark() > 0) seed_dspark(st, res.taps.data(), S, r.p0);
    return Status::Ok();
  }

  // The final collapse, norm and head of rows [first, last) of H [.., hc, d]; logits FP32.
  void head(const float* H, const float* pre, int first, int last, float* logits) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    std::vector<float> x(size_t(last - first) * d), tmp(static_cast<size_t>(d));
    for (int t = first; t < last; ++t) {
      hc_pre(H + size_t(t) * hc * d, pre + size_t(t) * hc, hc, d, tmp.data());
      rmsnorm(tmp.data(), w_.norm.data(), 1, d, float(s_.rms_norm_eps), x.data() + size_t(t - first) * d);
    }
    linear(w_.head, x.data(), last - first, logits, Lin::F32);
  }

  // §4.9 DSpark draft after the main model predicted y for position st.pos (the last processed is st.pos−1).
  Status draft(const SequenceState& st, int32_t y, DraftResult& out) const {
    const int B = s_.dspark_block_size, hc = s_.hc_mult, d = s_.hidden_size, L = s_.num_hidden_layers;
    if (s_.n_dspark() == 0) return error(Code::unsupported, "draft: this model has no DSpark stages");
    if (st.pos == 0) return error(Code::invalid_argument, "draft: run the prompt first");
    if (y < 0 || y >= s_.vocab_size) return error(Code::invalid_argument, "draft: token outside the vocabulary");
    const int64_t p = st.pos - 1;
    std::vector<float> H, pre;
    std::vector<int32_t> ids(size_t(B), s_.dspark_noise_token_id);
    ids[0] = y;
    embed_streams(ids, H, pre);
    for (int stage = 0; stage < s_.n_dspark(); ++stage) {
      const int l = L + stage;
      const LayerRole& role = sched_[l];
      block(s_, role, w_.layers[l], H.data(), pre.data(), nullptr, B,
            [&](const float* x, float* o) { draft_attention(st, l, x, p, o); });
    }
    const LayerWeights& last = w_.layers[L + s_.n_dspark() - 1];
    std::vector<float> xb(size_t(B) * d), xn(size_t(B) * d);
    for (int i = 0; i < B; ++i) hc_pre(H.data() + size_t(i) * hc * d, pre.data() + size_t(i) * hc, hc, d, xb.data() + size_t(i) * d);
    rmsnorm(xb.data(), last.norm.data(), B, d, float(s_.rms_norm_eps), xn.data());
    const int V = s_.vocab_size, R = s_.dspark_markov_rank;
    out.logits.assign(size_t(B) * V, 0.f);
    linear(w_.head, xn.data(), B, out.logits.data(), Lin::F32);
    out.ids.assign(size_t(B) + 1, 0);
    out.confidence.assign(size_t(B), 0.f);
    out.ids[0] = y;
    std::vector<float> e(static_cast<size_t>(R)), bias(static_cast<size_t>(V)), cat(static_cast<size_t>(d + R));
    for (int i = 0; i < B; ++i) {
      last.markov_embed.row(out.ids[i], e.data());
      linear(last.markov_head, e.data(), 1, bias.data(), Lin::F32);
      float* li = out.logits.data() + size_t(i) * V;
      for (int v = 0; v < V; ++v) li[v] += bias[v];
      out.ids[i + 1] = int32_t(std::max_element(li, li + V) - li);
      std::copy_n(xb.data() + size_t(i) * d, d, cat.data());
      std::copy(e.begin(), e.end(), cat.begin() + d);
      linear(last.conf_proj, cat.data(), 1, &out.confidence[i], Lin::F32);
    }
    return Status::Ok();
  }

  // The Markov term draft adds to logits_i for out_i = t: markov.embed[t] · markov.headᵀ, FP32 [V].
  Status markov_bias(int32_t t, std::vector<float>& bias) const {
    if (s_.n_dspark() == 0) return error(Code::unsupported, "markov_bias: this model has no DSpark stages");
    if (t < 0 || t >= s_.vocab_size) return error(Code::invalid_argument, "markov_bias: token outside the vocabulary");
    const LayerWeights& last = w_.layers[s_.num_hidden_layers + s_.n_dspark() - 1];
    std::vector<float> e(static_cast<size_t>(s_.dspark_markov_rank));
    last.markov_embed.row(t, e.data());
    bias.assign(size_t(s_.vocab_size), 0.f);
    linear(last.markov_head, e.data(), 1, bias.data(), Lin::F32);
    return Status::Ok();
  }

 private:
  // The rows of one forward: residual streams, collapse coefficients, token and Engram ids.
  struct Rows {
    int S = 0;
    int64_t p0 = 0;
    std::vector<int32_t> ids;
    std::vector<int64_t> hash;  // [S, n_engram_layers·cols]
    std::vector<float> H, pre;  // [S, hc, d], [S, hc]
    void keep_tail(int off, const ModelShape& s, const engram::HashPlan& plan) {
      const size_t hw = size_t(s.hc_mult) * s.hidden_size, hp = size_t(plan.n_layers() * plan.cols());
      H.erase(H.begin(), H.begin() + size_t(off) * hw);
      pre.erase(pre.begin(), pre.begin() + size_t(off) * s.hc_mult);
      ids.erase(ids.begin(), ids.begin() + off);
      if (!hash.empty()) hash.erase(hash.begin(), hash.begin() + size_t(off) * hp);
      S -= off;
      p0 += off;
    }
  };
  struct Pass {
    int64_t window_floor = 0;  // window entries below this position are not attended
    bool compress = true;      // Full layers add compressed entries (false when replaying stored ones)
  };

  int n_taps() const { return int(s_.dspark_target_layer_ids.size()); }

  Status check_input(const SequenceState& st, std::span<const int32_t> ids, int64_t end) const {
    if (st.layers.size() != sched_.size()) return error(Code::invalid_argument, "forward: state made for another model");
    return check_tokens(s_, ids, end, st.max_positions);
  }


  Status start_rows(const SequenceState& st, std::span<const int32_t> ids, std::span<const int32_t> history, int64_t p0,
                    const ForwardHooks* hooks, Rows& r) const {
    const int S = int(ids.size());
    (void)st;
    r.S = S;
    r.p0 = p0;
    r.ids.assign(ids.begin(), ids.end());
    if (!plan_.layers.empty()) {
      r.hash.resize(size_t(S) * plan_.n_layers() * plan_.cols());
      DSV41_TRY(engram::hash_ids(plan_, token_map_, s_.image_token_id, ids, history, r.hash));
      if (hooks && hooks->engram_ids) hooks->engram_ids(hooks->ctx, p0, S, int(plan_.n_layers() * plan_.cols()), r.hash.data());
    }
    embed_streams(ids, r.H, r.pre);
    return Status::Ok();
  }

  // Embeddings of ids expanded to the hc residual streams: H [n, hc, d] (each stream the embedding), pre [n, hc]
  // (1 for stream 0, else 0).
  void embed_streams(std::span<const int32_t> ids, std::vector<float>& H, std::vector<float>& pre) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    H.assign(ids.size() * hc * d, 0.f);
    pre.assign(ids.size() * hc, 0.f);
    std::vector<float> row(static_cast<size_t>(d));
    for (size_t t = 0; t < ids.size(); ++t) {
      w_.embed.row(ids[t], row.data());
      for (int k = 0; k < hc; ++k) std::copy(row.begin(), row.end(), H.begin() + (t * hc + k) * d);
      pre[t * hc] = 1.f;
    }
  }

  void run_layers(int first, int last, SequenceState& st, ForwardShared& sh, Rows& r, float* taps,
                  const ForwardHooks* hooks, const Pass& pass) const {
    for (Stack stack : {encoder_, decoder_})
      for (int l = std::max(first, stack.first); l < std::min(last, stack.last); ++l)
        unit(l, st, sh, r.ids.data(), r.hash.empty() ? nullptr : r.hash.data(), r.H.data(), r.pre.data(), r.S, r.p0, taps,
             hooks, pass);
  }

  // Head, DSpark rings and the state's position and history after a forward's rows ran.
  void finish_rows(SequenceState& st, Rows& r, std::span<const int32_t> ids, ForwardResult& res,
                   const ForwardOptions& o) const {
    const int S = int(ids.size()), d = s_.hidden_size;
    const int first_row = o.all_logits ? 0 : r.S - 1;
    res.logits.assign(size_t(r.S - first_row) * s_.vocab_size, 0.f);
    head(r.H.data(), r.pre.data(), first_row, r.S, res.logits.data());
    if (o.hooks && o.hooks->taps) o.hooks->taps(o.hooks->ctx, st.pos, S, n_taps() * d, res.taps.data());
    if (s_.n_dspark() > 0) {
      const int off = S - r.S;  // bounded replay: only the tail has decoder taps
      seed_dspark(st, res.taps.data() + size_t(off) * n_taps() * d, r.S, r.p0);
    }
    st.pos += S;
    const size_t keep = size_t(std::max<int64_t>(s_.engram_max_ngram_size - 1, 0));
    st.history.insert(st.history.end(), ids.begin(), ids.end());
    if (st.history.size() > keep) st.history.erase(st.history.begin(), st.history.end() - keep);
  }

  void unit(int l, SequenceState& st, ForwardShared& sh, const int32_t* ids, const int64_t* hash, float* H, float* pre,
            int S, int64_t p0, float* taps, const ForwardHooks* hooks, const Pass& pass) const {
    const LayerRole& role = sched_[l];
    const LayerWeights& w = w_.layers[l];
    const int hc = s_.hc_mult, d = s_.hidden_size;
    if (hooks && hooks->unit_input) hooks->unit_input(hooks->ctx, l, p0, S, H, pre);
    if (role.engram_slot >= 0) {
      const int cols = int(plan_.cols()), stride = int(plan_.n_layers()) * cols;
      engram(s_, w, hash + size_t(role.engram_slot) * cols, stride, ids, H, S);
    }
    if (role.tap_slot >= 0) {
      const int nt = int(s_.dspark_target_layer_ids.size());
      for (int t = 0; t < S; ++t)
        for (int i = 0; i < d; ++i) {
          float acc = 0.f;
          for (int k = 0; k < hc; ++k) acc += H[(size_t(t) * hc + k) * d + i];
          taps[(size_t(t) * nt + role.tap_slot) * d + i] = bf16(acc / float(hc));
        }
    }
    AttnContext ctx{s_, role, w, ropes_[l], hooks, pass.window_floor, pass.compress};
    block(s_, role, w, H, pre, ids, S, [&](const float* x, float* o) { attention(ctx, st, sh, x, S, p0, o); });
    if (hooks && hooks->unit_output) hooks->unit_output(hooks->ctx, l, p0, S, H, pre);
  }

  // Writes each DSpark stage's window entry for the main positions p0..p0+S−1 from the taps.
  void seed_dspark(SequenceState& st, const float* taps, int S, int64_t p0) const {
    const int d = s_.hidden_size, D = s_.head_dim, W = s_.sliding_window, L = s_.num_hidden_layers;
    const LayerWeights& first = w_.layers[L];
    std::vector<float> mx(size_t(S) * d), mxn(size_t(S) * d);
    linear(first.main_proj, taps, S, mx.data());
    rmsnorm(mx.data(), first.main_norm.data(), S, d, float(s_.rms_norm_eps), mxn.data());
    const int we = num::window_entry_size(D);
    std::vector<float> kv(size_t(S) * D), kvn(size_t(S) * D);
    for (int stage = 0; stage < s_.n_dspark(); ++stage) {
      const int l = L + stage;
      linear(w_.layers[l].wkv, mxn.data(), S, kv.data());
      rmsnorm(kv.data(), w_.layers[l].kv_norm.data(), S, D, float(s_.rms_norm_eps), kvn.data());
      for (int t = std::max(0, S - W); t < S; ++t) {
        float* e = kvn.data() + size_t(t) * D;
        ropes_[l].apply(e, D, p0 + t);
        num::pack_window_entry(e, D, st.layers[l].ring.data() + size_t((p0 + t) % W) * we);
      }
    }
  }

  // DSpark stage attention: block rows at positions p+1.. attend to the ring (positions ≤ p) and every block row.
  void draft_attention(const SequenceState& st, int l, const float* x, int64_t p, float* out) const {
    const int B = s_.dspark_block_size, H = s_.num_attention_heads, D = s_.head_dim, W = s_.sliding_window;
    const LayerWeights& w = w_.layers[l];
    const RopeTable& rope = ropes_[l];
    std::vector<float> tmp(size_t(B) * s_.q_lora_rank), qr(size_t(B) * s_.q_lora_rank), q(size_t(B) * H * D);
    linear(w.wq_a, x, B, tmp.data());
    rmsnorm(tmp.data(), w.q_norm.data(), B, s_.q_lora_rank, float(s_.rms_norm_eps), qr.data());
    linear(w.wq_b, qr.data(), B, q.data());
    std::vector<float> kv(size_t(B) * D), kvn(size_t(B) * D);
    linear(w.wkv, x, B, kv.data());
    rmsnorm(kv.data(), w.kv_norm.data(), B, D, float(s_.rms_norm_eps), kvn.data());
    for (int i = 0; i < B; ++i) {
      for (int h = 0; h < H; ++h) rope.apply(q.data() + (size_t(i) * H + h) * D, D, p + 1 + i);
      rope.apply(kvn.data() + size_t(i) * D, D, p + 1 + i);
      num::fp8_quant_block32(kvn.data() + size_t(i) * D, D);
    }
    const int we = num::window_entry_size(D);
    const int64_t lo = std::max<int64_t>(0, p - W + 1);
    std::vector<float> ring(size_t(p + 1 - lo) * D);
    for (int64_t wp = lo; wp <= p; ++wp)
      num::unpack_window_entry(st.layers[l].ring.data() + size_t(wp % W) * we, D, ring.data() + size_t(wp - lo) * D);
    std::vector<const float*> entries;
    for (int64_t wp = lo; wp <= p; ++wp) entries.push_back(ring.data() + size_t(wp - lo) * D);
    for (int i = 0; i < B; ++i) entries.push_back(kvn.data() + size_t(i) * D);
    std::vector<float> o(size_t(B) * H * D);
    const float scale = float(std::pow(double(D), -0.5));
    for (int i = 0; i < B; ++i) {
      float* oi = o.data() + size_t(i) * H * D;
      sparse_attention(q.data() + size_t(i) * H * D, H, D, entries, w.attn_sink.data(), scale, oi);
      for (int h = 0; h < H; ++h) rope.apply(oi + size_t(h) * D, D, p + 1 + i, true);
    }
    output_projection(s_, w, o.data(), B, out);
  }

 private:
  const ModelShape& s_;
  const Weights& w_;
  std::vector<LayerRole> sched_;
  std::vector<RopeTable> ropes_;
  std::vector<int32_t> token_map_;
  engram::HashPlan plan_;
  Stack encoder_, decoder_;
};

}  // namespace dsv41::cpu
