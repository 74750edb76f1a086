// DSpark on the GPU (SPEC §4.9): the draft stages' rings seeded from the main model's taps, the draft block's
// attention, the drafts' head (shared head, Markov bias, greedy chain, confidence), and the head of main rows.
#pragma once
#include <cmath>
#include <span>
#include <vector>

#include <dsv41/backend/cuda/batch.hpp>
#include <dsv41/backend/cuda/csa2_ops.hpp>
#include <dsv41/blocks/forward_types.hpp>

namespace dsv41::gpu {

// The block of a DSpark draft: [y, noise, ...] as residual streams.
struct DraftWork {
  explicit DraftWork(Scratch s) : sc(std::move(s)) {}
  Scratch sc;
  int32_t* ids = nullptr;  // [block] on the device
  Streams streams;
};

class DsparkOps : public Csa2Ops {
 protected:
  using Csa2Ops::Csa2Ops;

  Result<DraftWork> make_draft_block(int32_t y) const {
    const int B = s_.dspark_block_size, hc = s_.hc_mult, d = s_.hidden_size;
    DraftWork dw(scratch());
    std::vector<int32_t> ids(size_t(B), s_.dspark_noise_token_id);
    ids[0] = y;
    DSV41_TRY(dw.sc.get(dw.ids, B));
    DSV41_TRY(put_bytes(ids.data(), size_t(B) * 4, dw.ids));
    DSV41_TRY(dw.sc.get(dw.streams.H, size_t(B) * hc * d));
    DSV41_TRY(dw.sc.get(dw.streams.pre, size_t(B) * hc));
    dw.streams.rows = B;
    glue::embed_kernel<<<B, 128, 0, stream_>>>(w_.embed.bf16(), dw.ids, hc, d, dw.streams.H, dw.streams.pre);
    DSV41_TRY(launch_status("draft embed"));
    return Result<DraftWork>(std::move(dw));
  }

  // The drafts from the last stage's streams, into device buffers (no synchronization).
  Status draft_outputs(DraftWork& dw, const DraftBuffers& out) const {
    const int B = s_.dspark_block_size, hc = s_.hc_mult, d = s_.hidden_size, L = s_.num_hidden_layers;
    const int V = s_.vocab_size, R = s_.dspark_markov_rank;
    bf16_t *xb = nullptr, *xn = nullptr;
    DSV41_TRY(dw.sc.get(xb, size_t(B) * d));
    DSV41_TRY(dw.sc.get(xn, size_t(B) * d));
    const DLayer& last = layers_[size_t(L + s_.n_dspark() - 1)];
    DSV41_TRY(collapse_norm(dw.streams.H, dw.streams.pre, hc, hc, d, last.norm, eps(), xb, xn, B, stream_));
    DSV41_TRY(linear_bf16(xn, B, w_.head, out.logits, nullptr, V));
    DSV41_CUDA_TRY(cudaMemcpyAsync(out.ids, dw.ids, 4, cudaMemcpyDeviceToDevice, stream_), "draft y");
    for (int i = 0; i < B; ++i) {
      glue::markov_add_kernel<<<glue::blocks_for(V), glue::kThreads, 0, stream_>>>(
          last.markov_embed.bf16(), last.markov_head.bf16(), out.ids, i, V, R, out.logits + size_t(i) * V);
      glue::argmax_kernel<<<1, 1024, 0, stream_>>>(out.logits + size_t(i) * V, V, out.ids + i + 1);
    }
    DSV41_TRY(launch_status("draft markov"));
    glue::confidence_kernel<<<B, 128, 0, stream_>>>(xb, last.markov_embed.bf16(), out.ids, last.conf_proj.bf16(), d, R,
                                                     out.confidence);
    return launch_status("draft confidence");
  }

  // The same into host vectors (synchronizes).
  Status draft_outputs(DraftWork& dw, DraftResult& res) const {
    const int B = s_.dspark_block_size, V = s_.vocab_size;
    DraftBuffers b;
    DSV41_TRY(dw.sc.get(b.ids, size_t(B) + 1));
    DSV41_TRY(dw.sc.get(b.logits, size_t(B) * V));
    DSV41_TRY(dw.sc.get(b.confidence, size_t(B)));
    DSV41_TRY(draft_outputs(dw, b));
    res.ids.resize(size_t(B) + 1);
    res.logits.resize(size_t(B) * V);
    res.confidence.resize(size_t(B));
    DSV41_CUDA_TRY(cudaMemcpyAsync(res.ids.data(), b.ids, (size_t(B) + 1) * 4, cudaMemcpyDeviceToHost, stream_), "draft copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(res.logits.data(), b.logits, size_t(B) * V * 4, cudaMemcpyDeviceToHost, stream_),
                   "draft copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(res.confidence.data(), b.confidence, size_t(B) * 4, cudaMemcpyDeviceToHost, stream_),
                   "draft copy");
    return cuda_status(cudaStreamSynchronize(stream_), "draft");
  }

  // §4.9 seeds each DSpark stage's ring with the window entries of every segment's last W rows, from the taps.
  // step: a decode batch whose per-step inputs are in device memory (the stages' rings from its tables).
  Status seed_dspark(std::span<const SequenceRows> segs, const bf16_t* taps, const int64_t* d_pos,
                     const StepTables* step = nullptr) const {
    const int d = s_.hidden_size, D = s_.head_dim, W = s_.sliding_window, L = s_.num_hidden_layers, nt = n_taps();
    int S = 0;
    for (const SequenceRows& g : segs) S = std::max(S, g.row0 + g.n);
    const DLayer& first = layers_[L];
    Scratch sc(pool_, stream_);
    uint8_t *tc = nullptr, *te = nullptr, *mc = nullptr, *me = nullptr;
    bf16_t *mx = nullptr, *mxn = nullptr, *kv = nullptr, *kvn = nullptr;
    DSV41_TRY(act_quant(taps, S, nt * d, tc, te, sc));
    DSV41_TRY(sc.get(mx, size_t(S) * d));
    DSV41_TRY(sc.get(mxn, size_t(S) * d));
    DSV41_TRY(linear_fp8(tc, te, S, first.main_proj, mx, d));
    DSV41_TRY(norm(mx, first.main_norm, S, d, mxn));
    DSV41_TRY(act_quant(mxn, S, d, mc, me, sc));
    DSV41_TRY(sc.get(kv, size_t(S) * D));
    DSV41_TRY(sc.get(kvn, size_t(S) * D));
    for (int stage = 0; stage < s_.n_dspark(); ++stage) {
      const int l = L + stage;
      DSV41_TRY(linear_fp8(mc, me, S, layers_[l].wkv, kv, D));
      DSV41_TRY(norm(kv, layers_[l].kv_norm, S, D, kvn));
      DSV41_TRY(rope_at(kvn, S, 1, D, s_.qk_rope_head_dim, layers_[l].rope_freqs, d_pos, false, stream_));
      if (step) {  // one row per sequence: row t's entry at slot pos[t] mod W of its ring
        glue::pack_window_rows_kernel<<<glue::blocks_for(int64_t(S) * (D / 32)), glue::kThreads, 0, stream_>>>(
            kvn, S, D, reinterpret_cast<uint8_t* const*>(step->layer[size_t(l)]), d_pos, W);
        DSV41_TRY(launch_status("dspark seed (rows)"));
        continue;
      }
      for (const SequenceRows& g : segs) {
        const int t0 = std::max(0, g.n - W);
        glue::pack_window_kernel<<<glue::blocks_for(int64_t(g.n - t0) * (D / 32)), glue::kThreads, 0, stream_>>>(
            kvn + size_t(g.row0) * D, D, t0, g.n, D, g.st->layers[l].ring, 0, g.p0, W, true);
        DSV41_TRY(launch_status("dspark seed"));
      }
    }
    return Status::Ok();
  }

  // DSpark stage attention: block rows at positions p+1.. attend to the ring (positions ≤ p) and every block row.
  Status draft_attention(const DeviceSequence& st, int l, const bf16_t* x, int64_t p, bf16_t* out) const {
    const int B = s_.dspark_block_size, H = s_.num_attention_heads, D = s_.head_dim, W = s_.sliding_window;
    const int d = s_.hidden_size, ql = s_.q_lora_rank, we = num::window_entry_size(D);
    const DLayer& w = layers_[l];
    Scratch sc(pool_, stream_);
    uint8_t *xc = nullptr, *xe = nullptr, *qrc = nullptr, *qre = nullptr, *pool = nullptr;
    bf16_t *tmp = nullptr, *qr = nullptr, *q = nullptr, *kv = nullptr, *kvn = nullptr, *o = nullptr;
    int* idx = nullptr;
    DSV41_TRY(act_quant(x, B, d, xc, xe, sc));
    DSV41_TRY(sc.get(tmp, size_t(B) * ql));
    DSV41_TRY(sc.get(qr, size_t(B) * ql));
    DSV41_TRY(linear_fp8(xc, xe, B, w.wq_a, tmp, ql));
    DSV41_TRY(norm(tmp, w.q_norm, B, ql, qr));
    DSV41_TRY(act_quant(qr, B, ql, qrc, qre, sc));
    DSV41_TRY(sc.get(q, size_t(B) * H * D));
    DSV41_TRY(linear_fp8(qrc, qre, B, w.wq_b, q, int64_t(H) * D));
    DSV41_TRY(rope_rows(q, B, H, D, w, p + 1));
    DSV41_TRY(sc.get(kv, size_t(B) * D));
    DSV41_TRY(sc.get(kvn, size_t(B) * D));
    DSV41_TRY(linear_fp8(xc, xe, B, w.wkv, kv, D));
    DSV41_TRY(norm(kv, w.kv_norm, B, D, kvn));
    DSV41_TRY(rope_rows(kvn, B, 1, D, w, p + 1));
    DSV41_TRY(sc.get(pool, size_t(W + B) * we));
    DSV41_CUDA_TRY(cudaMemcpyAsync(pool, st.layers[l].ring, size_t(W) * we, cudaMemcpyDeviceToDevice, stream_),
                   "draft ring copy");
    glue::pack_window_kernel<<<glue::blocks_for(int64_t(B) * (D / 32)), glue::kThreads, 0, stream_>>>(kvn, D, 0, B, D, pool, W,
                                                                                               0, W, false);
    DSV41_TRY(sc.get(idx, size_t(B) * (W + B)));
    glue::draft_idx_kernel<<<glue::blocks_for(int64_t(B) * (W + B)), glue::kThreads, 0, stream_>>>(B, p, W, idx);
    DSV41_TRY(launch_status("draft entries"));
    DSV41_TRY(sc.get(o, size_t(B) * H * D));
    SparseAttnParams ap;
    ap.q = q;
    ap.win_pool = pool;
    ap.win_idx = idx;
    ap.n_win = W + B;
    ap.sink = w.attn_sink;
    ap.scale = float(std::pow(double(D), -0.5));
    ap.R = B;
    ap.H = H;
    ap.D = D;
    ap.out = o;
    DSV41_TRY(sparse_attention_any(ap, stream_));
    DSV41_TRY(rope_rows(o, B, H, D, w, p + 1, true));
    return output_projection(w, o, B, out, sc);
  }

  // The Markov term of a draft for previous token t (FP32 [V], on the host: speculative sampling). Synchronizes.
  Status markov_bias(int32_t t, std::vector<float>& bias) const {
    if (s_.n_dspark() == 0) return error(Code::unsupported, "markov_bias: this model has no DSpark stages");
    if (t < 0 || t >= s_.vocab_size) return error(Code::invalid_argument, "markov_bias: token outside the vocabulary");
    const DLayer& last = layers_[s_.num_hidden_layers + s_.n_dspark() - 1];
    const int V = s_.vocab_size;
    bias.assign(size_t(V), 0.f);
    {
      Scratch sc(pool_, stream_);
      int32_t* d_t = nullptr;
      float* d_b = nullptr;
      DSV41_TRY(sc.get(d_t, 1));
      DSV41_TRY(sc.get(d_b, size_t(V)));
      DSV41_TRY(put_bytes(&t, 4, d_t));
      DSV41_CUDA_TRY(cudaMemsetAsync(d_b, 0, size_t(V) * 4, stream_), "markov bias");
      glue::markov_add_kernel<<<glue::blocks_for(V), glue::kThreads, 0, stream_>>>(
          last.markov_embed.bf16(), last.markov_head.bf16(), d_t, 0, V, s_.dspark_markov_rank, d_b);
      DSV41_TRY(launch_status("markov bias"));
      DSV41_CUDA_TRY(cudaMemcpyAsync(bias.data(), d_b, size_t(V) * 4, cudaMemcpyDeviceToHost, stream_), "markov bias");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "markov bias");
    return Status::Ok();
  }

  // Head of device rows: logits [rows, V] FP32 = head(norm(hc_pre(H, pre))).
  Status head_rows(const bf16_t* H, const float* pre, int rows, float* logits) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    Scratch sc(pool_, stream_);
    bf16_t* xn = nullptr;
    DSV41_TRY(sc.get(xn, size_t(rows) * d));
    DSV41_TRY(collapse_norm(H, pre, hc, hc, d, w_.norm, eps(), nullptr, xn, rows, stream_));
    return linear_bf16(xn, rows, w_.head, logits, nullptr, s_.vocab_size);
  }

  // The head of host rows (the golden check's head test). Synchronizes; NaN on error.
  void head(const float* H, const float* pre, int first, int last, float* logits) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, V = s_.vocab_size, rows = last - first;
    Status st = [&]() -> Status {
      std::vector<uint16_t> hb(size_t(rows) * hc * d);
      for (size_t i = 0; i < hb.size(); ++i) hb[i] = num::bf16_bits(H[size_t(first) * hc * d + i]);
      Scratch sc(pool_, stream_);
      bf16_t* dH = nullptr;
      float *dp = nullptr, *dl = nullptr;
      DSV41_TRY(sc.get(dH, hb.size()));
      DSV41_TRY(sc.get(dp, size_t(rows) * hc));
      DSV41_TRY(sc.get(dl, size_t(rows) * V));
      DSV41_CUDA_TRY(cudaMemcpyAsync(dH, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, stream_), "head upload");
      DSV41_CUDA_TRY(cudaMemcpyAsync(dp, pre + size_t(first) * hc, size_t(rows) * hc * 4, cudaMemcpyHostToDevice, stream_),
                     "head upload");
      DSV41_TRY(head_rows(dH, dp, rows, dl));
      DSV41_CUDA_TRY(cudaMemcpyAsync(logits, dl, size_t(rows) * V * 4, cudaMemcpyDeviceToHost, stream_), "head copy");
      DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "head");
      return Status::Ok();
    }();
    if (!st.ok()) std::fill(logits, logits + size_t(rows) * V, std::nanf(""));
  }
};

}  // namespace dsv41::gpu
