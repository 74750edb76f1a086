// CSA2 attention on the GPU (SPEC §4.2–4.5): the steps blocks/csa2_attention.hpp calls, over every row of a forward.
// Projections run over all rows at once; window entries, the compressor, the indexer and attention reach each
// sequence's caches: per sequence for chunks, in one launch per kernel for a decode batch (per-row pointer tables),
// the compressor per sequence in both.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/batch.hpp>
#include <dsv41/backend/cuda/kernel_sizes.hpp>
#include <dsv41/backend/cuda/kernels/attention.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/backend/cuda/unit_ops.hpp>
#include <dsv41/backend/cuda/wo_a_blas.hpp>
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/kv_cache.hpp>

namespace dsv41::gpu {

// Projections of a layer's inputs that the compressor and the indexer need, over all rows of a forward.
struct SideProjections {
  bf16_t* lat = nullptr;   // ratio 1: compressor latents [S, D] (normed); index keys kn [S, dI] (normed)
  bf16_t* kn = nullptr;
  float *ckv = nullptr, *cz = nullptr;  // ratio > 1: compressor kv and gate [S, D] FP32
  uint8_t *qp = nullptr, *qe = nullptr;  // indexer queries, FP4 [S, nI·dI/2] + UE8M0 [S, nI·dI/32]
  float* wf = nullptr;                   // indexer head weights [S, nI]
};

// The intermediate rows of one layer's attention.
struct AttentionWork {
  explicit AttentionWork(Scratch s) : sc(std::move(s)) {}
  Scratch sc;
  uint8_t *xc = nullptr, *xe = nullptr, *qrc = nullptr, *qre = nullptr;  // FP8 x and qr (codes, UE8M0 exponents)
  bf16_t *q = nullptr, *kvn = nullptr, *o = nullptr;                    // [S, H, D], [S, D] window entries, [S, H, D]
  int *widx = nullptr, *cidx = nullptr;                                 // entry lists [S, W], [S, index_topk]
  SideProjections sp;
  std::vector<Scratch> per_seq;       // chunks: each sequence's window pool [ring ; the chunk's entries]
  std::vector<uint8_t*> window_pool;  // per sequence: where its rows' window entries are read
  uint64_t* table = nullptr;          // a decode batch's per-row pointer table (after the compressor)
};

class Csa2Ops : public UnitOps {
 protected:
  using UnitOps::UnitOps;

  // §4.2 queries: q = wq_b(norm(wq_a x)) after RoPE, with FP8 x and qr kept for the other projections.
  Status attn_queries(int l, const Batch& b, const bf16_t* x, AttentionWork& w) const {
    const DLayer& L = layers_[size_t(l)];
    const int S = b.rows(), H = s_.num_attention_heads, D = s_.head_dim, d = s_.hidden_size, ql = s_.q_lora_rank;
    bf16_t *tmp = nullptr, *qr = nullptr;
    mark("attn projections");
    DSV41_TRY(act_quant(x, S, d, w.xc, w.xe, w.sc));
    DSV41_TRY(w.sc.get(tmp, size_t(S) * ql));
    DSV41_TRY(w.sc.get(qr, size_t(S) * ql));
    DSV41_TRY(linear_fp8(w.xc, w.xe, S, L.wq_a, tmp, ql));
    DSV41_TRY(norm(tmp, L.q_norm, S, ql, qr));
    DSV41_TRY(act_quant(qr, S, ql, w.qrc, w.qre, w.sc));
    DSV41_TRY(w.sc.get(w.q, size_t(S) * H * D));
    DSV41_TRY(linear_fp8(w.qrc, w.qre, S, L.wq_b, w.q, int64_t(H) * D));
    DSV41_TRY(w.sc.get(w.o, size_t(S) * H * D));
    return rope_at(w.q, S, H, D, s_.qk_rope_head_dim, L.rope_freqs, b.in.pos, false, stream_);
  }

  // §4.2 the rows' window entries. Decode stores the new entry in the ring first (its slot held position p − W,
  // which no row attends); a chunk attends a pool [ring ; chunk entries] and stores the ring after attention.
  Status attn_window_entries(int l, const Batch& b, AttentionWork& w, const StackPass& pass) const {
    const DLayer& L = layers_[size_t(l)];
    const int S = b.rows(), D = s_.head_dim, W = s_.sliding_window, we = kv::WindowEntry::bytes(D);
    bf16_t* kv = nullptr;
    DSV41_TRY(w.sc.get(kv, size_t(S) * D));
    DSV41_TRY(w.sc.get(w.kvn, size_t(S) * D));
    DSV41_TRY(linear_fp8(w.xc, w.xe, S, L.wkv, kv, D));
    DSV41_TRY(norm(kv, L.kv_norm, S, D, w.kvn));
    DSV41_TRY(rope_at(w.kvn, S, 1, D, s_.qk_rope_head_dim, L.rope_freqs, b.in.pos, false, stream_));
    DSV41_TRY(w.sc.get(w.widx, size_t(S) * W));
    if (b.decode_batch()) return Status::Ok();  // packed with the batch's pointer table (attn_sparse)
    for (const SequenceRows& g : b.segs) {
      DeviceLayerState& ls = g.st->layers[size_t(l)];
      const bool decode = g.n == 1;
      uint8_t* pool = ls.ring;
      const bf16_t* kv_g = w.kvn + size_t(g.row0) * D;
      w.per_seq.emplace_back(scratch());
      if (decode) {
        glue::pack_window_kernel<<<glue::blocks_for(D / 32), glue::kThreads, 0, stream_>>>(kv_g, D, 0, 1, D, ls.ring, 0,
                                                                                         g.p0, W, true);
      } else {
        DSV41_TRY(w.per_seq.back().get(pool, size_t(W + g.n) * we));
        DSV41_CUDA_TRY(cudaMemcpyAsync(pool, ls.ring, size_t(W) * we, cudaMemcpyDeviceToDevice, stream_), "ring copy");
        glue::pack_window_kernel<<<glue::blocks_for(int64_t(g.n) * (D / 32)), glue::kThreads, 0, stream_>>>(
            kv_g, D, 0, g.n, D, pool, W, g.p0, W, false);
      }
      DSV41_TRY(launch_status("pack window"));
      w.window_pool.push_back(pool);
      glue::window_idx_kernel<<<glue::blocks_for(int64_t(g.n) * W), glue::kThreads, 0, stream_>>>(
          g.n, g.p0, nullptr, W, pass.window_floor, decode, w.widx + size_t(g.row0) * W);
      DSV41_TRY(launch_status("window idx"));
    }
    return Status::Ok();
  }

  // §4.3 the compressor of a Full layer: projections over all rows, then each sequence's groups.
  Status attn_compress(int l, const Batch& b, const bf16_t* x, AttentionWork& w) const {
    mark("compressor+indexer");
    DSV41_TRY(compress_project(l, x, b.rows(), w.sc, w.sp));
    if (b.step) return compress_step(l, b.step->layer[size_t(l)], b.rows(), w.sp, w.sc);
    for (const SequenceRows& g : b.segs) {
      Scratch ss = scratch();
      DSV41_TRY(compress(l, *g.st, w.sp, g.row0, g.n, ss));
    }
    return Status::Ok();
  }

  // The attention and index-score kernels at KS's compile-time sizes where it has them (a preset's), else the
  // dispatch on the runtime shape.
  template <class KS>
  Status attend(const SparseAttnParams& p) const {
    if constexpr (KS::attn_fixed) return sparse_attention_fixed<KS::H, KS::D>(p, stream_);
    else return sparse_attention_any(p, stream_);
  }
  template <class KS>
  Status score_index(const IndexScoreParams& p) const {
    if constexpr (KS::index_fixed) return index_scores_fixed<KS::nI, KS::dI>(p, stream_);
    else return index_scores_any(p, stream_);
  }

  // §4.4–4.5 the indexer of a Full or Reindex layer: its own top-k lists, into the handoff.
  template <class KS = RuntimeSizes>
  Status attn_index(int l, Batch& b, const bf16_t* x, AttentionWork& w) const {
    const int S = b.rows(), K = s_.index_topk;
    const LayerRole& role = sched_[size_t(l)];
    mark("compressor+indexer");
    DSV41_TRY(index_project(l, x, w.qrc, w.qre, b.in.pos, S, w.sc, w.sp));
    DSV41_TRY(b.fs.get(b.handoff.lists[size_t(l)], size_t(S) * K));
    if (b.decode_batch()) {
      int nmax = 0;
      DSV41_TRY(batch_table(l, b, w, nmax));
      return index_select_rows<KS>(l, S, b.handoff.cand[0], b.fs, w.sp, b.in.pos,
                               reinterpret_cast<const uint8_t* const*>(w.table + 3 * S),
                               reinterpret_cast<const int*>(w.table + 4 * S), nmax, b.handoff.lists[size_t(l)], w.sc);
    }
    for (size_t i = 0; i < b.segs.size(); ++i) {
      const SequenceRows& g = b.segs[i];
      Scratch ss = scratch();
      int32_t* own = b.handoff.lists[size_t(l)] + size_t(g.row0) * K;
      DSV41_TRY(index_select<KS>(l, g.st->layers[size_t(role.kv_source)], b.handoff.cand[i], b.fs, w.sp, g.row0, g.n, g.p0,
                             b.hooks, own, ss));
      if (b.hooks && b.hooks->topk) DSV41_TRY(hook_topk(b.hooks, l, g.p0, g.n, own));
    }
    return Status::Ok();
  }

  // §3.6 attention of every row over its window entries and, where the layer reads compressed entries, the entries
  // its index source's lists select; chunks then store their last W entries in the ring.
  template <class KS = RuntimeSizes>
  Status attn_sparse(int l, Batch& b, AttentionWork& w, bool reads_compressed) const {
    const LayerRole& role = sched_[size_t(l)];
    const DLayer& L = layers_[size_t(l)];
    const int S = b.rows(), H = s_.num_attention_heads, D = s_.head_dim, W = s_.sliding_window, K = s_.index_topk;
    const int we = kv::WindowEntry::bytes(D);
    const int32_t* lists = reads_compressed ? b.handoff.lists[size_t(role.index_source)] : nullptr;
    if (reads_compressed && !lists)
      return error(Code::internal, "CUDA forward: layer " + std::to_string(l) + " has no top-k list");
    if (reads_compressed) DSV41_TRY(w.sc.get(w.cidx, size_t(S) * K));
    mark("attention");
    SparseAttnParams ap;
    ap.sink = L.attn_sink;
    ap.scale = float(std::pow(double(D), -0.5));
    ap.H = H;
    ap.D = D;
    ap.n_win = W;
    if (b.decode_batch()) {
      int nmax = 0;
      DSV41_TRY(batch_table(l, b, w, nmax));
      auto* rings = reinterpret_cast<uint8_t* const*>(w.table);
      glue::pack_window_rows_kernel<<<glue::blocks_for(int64_t(S) * (D / 32)), glue::kThreads, 0, stream_>>>(
          w.kvn, S, D, rings, b.in.pos, W);
      DSV41_TRY(launch_status("pack window rows"));
      glue::window_idx_kernel<<<glue::blocks_for(int64_t(S) * W), glue::kThreads, 0, stream_>>>(S, 0, b.in.pos, W, 0, true,
                                                                                              w.widx);
      DSV41_TRY(launch_status("window idx"));
      if (reads_compressed) {
        glue::comp_idx_kernel<<<glue::blocks_for(int64_t(S) * K), glue::kThreads, 0, stream_>>>(
            lists, S, K, 0, b.in.pos, role.ratio, 0, reinterpret_cast<const int64_t*>(w.table + 2 * S), w.cidx);
        DSV41_TRY(launch_status("comp idx"));
        ap.comp_pools = reinterpret_cast<const uint8_t* const*>(w.table + S);
        ap.comp_idx = w.cidx;
        ap.n_comp = K;
      }
      ap.q = w.q;
      ap.win_pools = reinterpret_cast<const uint8_t* const*>(w.table);
      ap.win_idx = w.widx;
      ap.R = S;
      ap.out = w.o;
      return attend<KS>(ap);
    }
    for (size_t i = 0; i < b.segs.size(); ++i) {
      const SequenceRows& g = b.segs[i];
      DeviceLayerState& ls = g.st->layers[size_t(l)];
      const uint8_t* cpool = nullptr;
      if (reads_compressed) {
        const DeviceLayerState& src = g.st->layers[size_t(role.kv_source)];
        glue::comp_idx_kernel<<<glue::blocks_for(int64_t(g.n) * K), glue::kThreads, 0, stream_>>>(
            lists + size_t(g.row0) * K, g.n, K, g.p0, nullptr, role.ratio, src.n_entries, nullptr, w.cidx + size_t(g.row0) * K);
        DSV41_TRY(launch_status("comp idx"));
        cpool = src.comp;
      }
      SparseAttnParams p = ap;
      p.q = w.q + size_t(g.row0) * H * D;
      p.win_pool = w.window_pool[i];
      p.win_idx = w.widx + size_t(g.row0) * W;
      p.comp_pool = cpool;
      p.comp_idx = cpool ? w.cidx + size_t(g.row0) * K : nullptr;
      p.n_comp = cpool ? K : 0;
      p.R = g.n;
      p.out = w.o + size_t(g.row0) * H * D;
      DSV41_TRY(attend<KS>(p));
      if (g.n > 1) {
        const int t0 = std::max(0, g.n - W);
        glue::ring_store_kernel<<<glue::blocks_for(int64_t(g.n - t0) * we), glue::kThreads, 0, stream_>>>(
            w.window_pool[i], W, t0, g.n, we, ls.ring, g.p0, W);
        DSV41_TRY(launch_status("ring store"));
      }
    }
    return Status::Ok();
  }

  // RoPE undone on the attention output, then the grouped output projection.
  Status attn_output(int l, const Batch& b, AttentionWork& w, bf16_t* out) const {
    const DLayer& L = layers_[size_t(l)];
    const int S = b.rows();
    mark("attn output");
    DSV41_TRY(rope_at(w.o, S, s_.num_attention_heads, s_.head_dim, s_.qk_rope_head_dim, L.rope_freqs, b.in.pos, true, stream_));
    return output_projection(L, w.o, S, out, w.sc);
  }

  // A decode batch's pointer table, one row per sequence, built once per layer after the compressor (its entry
  // counts include this step's): rings | compressed-entry pools | entry counts (u64) | index-key pools | counts (i32).
  Status batch_table(int l, const Batch& b, AttentionWork& w, int& nmax) const {
    if (b.step) {  // written by the host before the step (decode_graph.hpp)
      w.table = b.step->layer[size_t(l)];
      nmax = b.step->nmax[size_t(l)];
      return Status::Ok();
    }
    const LayerRole& role = sched_[size_t(l)];
    const int S = int(b.segs.size());
    std::vector<uint64_t> table(size_t(S) * 4 + (size_t(S) + 1) / 2);
    auto* n_host = reinterpret_cast<int32_t*>(table.data() + 4 * size_t(S));
    nmax = 0;
    for (const SequenceRows& g : b.segs) {
      table[size_t(g.row0)] = reinterpret_cast<uint64_t>(g.st->layers[size_t(l)].ring);
      if (role.ratio > 0) {
        const DeviceLayerState& src = g.st->layers[size_t(role.kv_source)];
        table[size_t(S) + g.row0] = reinterpret_cast<uint64_t>(src.comp);
        table[size_t(2 * S) + g.row0] = uint64_t(src.n_entries);
        table[size_t(3 * S) + g.row0] = reinterpret_cast<uint64_t>(src.ikeys);
        n_host[g.row0] = int32_t(src.n_entries);
        nmax = std::max(nmax, int(src.n_entries));
      }
    }
    if (w.table) return Status::Ok();
    DSV41_TRY(w.sc.get(w.table, table.size()));
    return put_bytes(table.data(), table.size() * 8, w.table);
  }

  // u_g = o_g · wo_a_gᵀ (BF16, no activation quant), then wo_b (FP8).
  Status output_projection(const DLayer& w, const bf16_t* o, int S, bf16_t* out, Scratch& sc) const {
    const int G = s_.o_groups, R = s_.o_lora_rank, gw = s_.num_attention_heads * s_.head_dim / G;
    bf16_t* u = nullptr;
    uint8_t *uc = nullptr, *ue = nullptr;
    DSV41_TRY(sc.get(u, size_t(S) * G * R));
    if (glue::wo_a_rows_fits(S, G, R, gw)) {
      DSV41_TRY(glue::wo_a_rows(o, S, G, R, gw, w.wo_a.w, w.wo_a.s, u, stream_));
    } else if (wo_a_blas_fits(S, G, R, gw) && blas_ready()) {
      bf16_t* wdeq = nullptr;
      DSV41_TRY(sc.get(wdeq, size_t(G) * R * gw));
      DSV41_TRY(wo_a_blas(blas_, o, S, G, R, gw, w.wo_a.w, w.wo_a.s, wdeq, u, stream_));
    } else if (S >= kTiledRowsWoA && gemm_f32_ctas(S, s_.o_lora_rank, s_.o_groups) >= kTiledMinCtas) {
      GemmF32Params gp;
      gp.A = o;
      gp.lda = int64_t(G) * gw;
      gp.a_goff = gw;
      gp.W = w.wo_a.w;
      gp.Ws = w.wo_a.s;
      gp.M = S;
      gp.N = R;
      gp.K = gw;
      gp.G = G;
      gp.yb = u;
      gp.ldy = int64_t(G) * R;
      DSV41_TRY(gemm_f32(gp, stream_));
    } else {
      glue::wo_a_kernel<<<glue::blocks_for(int64_t(S) * G * R * 32), glue::kThreads, 0, stream_>>>(o, S, G, R, gw, w.wo_a.w,
                                                                                           w.wo_a.s, u);
      DSV41_TRY(launch_status("wo_a"));
    }
    DSV41_TRY(act_quant(u, S, G * R, uc, ue, sc));
    return linear_fp8(uc, ue, S, w.wo_b, out, s_.hidden_size);
  }

  // §4.3 compressor projections of a Full layer over all rows: ratio 1 gives the latents and index keys
  // (normed, before RoPE); ratio > 1 the FP32 kv and gate rows that segments pool with their pending rows.
  Status compress_project(int l, const bf16_t* x, int S, Scratch& sc, SideProjections& sp) const {
    const DLayer& w = layers_[l];
    const int D = s_.head_dim, dI = s_.index_head_dim;
    if (sched_[l].ratio == 1) {
      bf16_t *kv = nullptr, *k = nullptr;
      DSV41_TRY(sc.get(kv, size_t(S) * D));
      DSV41_TRY(sc.get(sp.lat, size_t(S) * D));
      DSV41_TRY(linear_bf16(x, S, w.c_wkv, nullptr, kv, D));
      DSV41_TRY(norm(kv, w.c_norm, S, D, sp.lat));
      DSV41_TRY(sc.get(k, size_t(S) * dI));
      DSV41_TRY(sc.get(sp.kn, size_t(S) * dI));
      DSV41_TRY(linear_bf16(sp.lat, S, w.i_wk, nullptr, k, dI));
      return norm(k, w.i_knorm, S, dI, sp.kn);
    }
    DSV41_TRY(sc.get(sp.ckv, size_t(S) * D));
    DSV41_TRY(sc.get(sp.cz, size_t(S) * D));
    DSV41_TRY(linear_bf16(x, S, w.c_wkv, sp.ckv, nullptr, D));
    return linear_bf16(x, S, w.c_wgate, sp.cz, nullptr, D);
  }

  // §4.3 the compressor of a Full layer for one segment's rows [r0, r0 + n): new compressed entries and
  // index keys appended to the sequence's caches; ratio > 1 pools whole groups with the pending rows.
  Status compress(int l, DeviceSequence& st, const SideProjections& sp, int r0, int n, Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const DLayer& w = layers_[l];
    DeviceLayerState& ls = st.layers[l];
    const int D = s_.head_dim, dI = s_.index_head_dim, r = role.ratio, rd = s_.qk_rope_head_dim;
    const int64_t first = ls.n_entries;
    bf16_t *lat = nullptr, *kn = nullptr;
    int n_new = 0;
    if (r == 1) {
      lat = sp.lat + size_t(r0) * D;
      kn = sp.kn + size_t(r0) * dI;
      n_new = n;
    } else {
      const kv::CompressCounters after = kv::compress_counters(r, first, ls.n_pend, n);
      const float* kv = sp.ckv + size_t(r0) * D;
      const float* z = sp.cz + size_t(r0) * D;
      const int n_groups = int(after.entries - first), rem = after.pending;
      if (n_groups > 0) {
        bf16_t *pooled = nullptr, *k = nullptr;
        DSV41_TRY(sc.get(pooled, size_t(n_groups) * D));
        DSV41_TRY(sc.get(lat, size_t(n_groups) * D));
        glue::compress_pool_kernel<<<glue::blocks_for(int64_t(n_groups) * D), glue::kThreads, 0, stream_>>>(
            ls.pend_kv, ls.pend_score, ls.n_pend, kv, z, r, D, n_groups, pooled);
        DSV41_TRY(launch_status("compress pool"));
        DSV41_TRY(norm(pooled, w.c_norm, n_groups, D, lat));
        DSV41_TRY(sc.get(k, size_t(n_groups) * dI));
        DSV41_TRY(sc.get(kn, size_t(n_groups) * dI));
        DSV41_TRY(linear_bf16(lat, n_groups, w.i_wk, nullptr, k, dI));
        DSV41_TRY(norm(k, w.i_knorm, n_groups, dI, kn));
      }
      if (rem > 0) {
        glue::compress_pending_kernel<<<glue::blocks_for(int64_t(rem) * D), glue::kThreads, 0, stream_>>>(
            ls.pend_kv, ls.pend_score, ls.n_pend, kv, z, n_groups * r, rem, D);
        DSV41_TRY(launch_status("compress pending"));
      }
      ls.n_pend = rem;
      n_new = n_groups;
    }
    if (n_new == 0) return Status::Ok();
    if (first + n_new > ls.cap) return error(Code::internal, "compressor: entry capacity exceeded");
    glue::rope_strided_kernel<<<glue::blocks_for(int64_t(n_new) * (rd / 2)), glue::kThreads, 0, stream_>>>(
        kn, n_new, 1, dI, rd, w.rope_freqs, first * r, r);
    glue::pack_index_kernel<<<glue::blocks_for(int64_t(n_new) * (dI / 32)), glue::kThreads, 0, stream_>>>(kn, n_new, dI,
                                                                                                  ls.ikeys, first);
    glue::rope_strided_kernel<<<glue::blocks_for(int64_t(n_new) * (rd / 2)), glue::kThreads, 0, stream_>>>(
        lat, n_new, 1, D, rd, w.rope_freqs, first * r, r);
    glue::pack_main_kernel<<<glue::blocks_for(int64_t(n_new) * (D / 16)), glue::kThreads, 0, stream_>>>(lat, n_new, D, ls.comp,
                                                                                                first);
    DSV41_TRY(launch_status("compressed entries"));
    ls.n_entries = first + n_new;
    return Status::Ok();
  }

  // §4.3 the compressor of a decode batch whose counters are in device memory (StepTables: tab, the layer's table),
  // in one launch per kernel for all S rows: compress()'s kernels row by row, each row's group completing or not
  // on the device. The host advances its counters after the step (decode_graph.hpp), not here.
  Status compress_step(int l, const uint64_t* tab, int S, const SideProjections& sp, Scratch& sc) const {
    const LayerRole& role = sched_[size_t(l)];
    const DLayer& w = layers_[size_t(l)];
    const int D = s_.head_dim, dI = s_.index_head_dim, r = role.ratio, rd = s_.qk_rope_head_dim;
    auto col = [&](int k) { return tab + StepTables::comp_col(S, k); };
    auto* comp = reinterpret_cast<uint8_t* const*>(col(0));
    auto* ikeys = reinterpret_cast<uint8_t* const*>(col(1));
    auto* first = reinterpret_cast<const int64_t*>(col(4));
    bf16_t *lat = sp.lat, *kn = sp.kn;
    int* done = nullptr;
    if (r > 1) {
      bf16_t *pooled = nullptr, *k = nullptr;
      DSV41_TRY(sc.get(pooled, size_t(S) * D));
      DSV41_TRY(sc.get(lat, size_t(S) * D));
      DSV41_TRY(sc.get(done, size_t(S)));
      glue::compress_rows_kernel<<<glue::blocks_for(int64_t(S) * D), glue::kThreads, 0, stream_>>>(
          reinterpret_cast<float* const*>(col(2)), reinterpret_cast<float* const*>(col(3)),
          reinterpret_cast<const int64_t*>(col(5)), sp.ckv, sp.cz, r, D, S, pooled, done);
      DSV41_TRY(launch_status("compress rows"));
      DSV41_TRY(norm(pooled, w.c_norm, S, D, lat));
      DSV41_TRY(sc.get(k, size_t(S) * dI));
      DSV41_TRY(sc.get(kn, size_t(S) * dI));
      DSV41_TRY(linear_bf16(lat, S, w.i_wk, nullptr, k, dI));
      DSV41_TRY(norm(k, w.i_knorm, S, dI, kn));
    }
    glue::rope_entries_rows_kernel<<<glue::blocks_for(int64_t(S) * (rd / 2)), glue::kThreads, 0, stream_>>>(
        kn, S, dI, rd, w.rope_freqs, first, r, done);
    glue::pack_index_rows_kernel<<<glue::blocks_for(int64_t(S) * (dI / 32)), glue::kThreads, 0, stream_>>>(kn, S, dI, ikeys,
                                                                                                     first, done);
    glue::rope_entries_rows_kernel<<<glue::blocks_for(int64_t(S) * (rd / 2)), glue::kThreads, 0, stream_>>>(
        lat, S, D, rd, w.rope_freqs, first, r, done);
    glue::pack_main_rows_kernel<<<glue::blocks_for(int64_t(S) * (D / 16)), glue::kThreads, 0, stream_>>>(lat, S, D, comp,
                                                                                                   first, done);
    return launch_status("compressed entries (rows)");
  }

  // §4.4 indexer projections of a Full or Reindex layer over all rows: FP4 queries (after RoPE) and weights.
  Status index_project(int l, const bf16_t* x, const uint8_t* qrc, const uint8_t* qre, const int64_t* d_pos, int S,
                       Scratch& sc, SideProjections& sp) const {
    const DLayer& w = layers_[l];
    const int nI = s_.index_n_heads, dI = s_.index_head_dim;
    bf16_t *qi = nullptr, *wb = nullptr;
    DSV41_TRY(sc.get(qi, size_t(S) * nI * dI));
    DSV41_TRY(linear_fp8(qrc, qre, S, w.i_wq_b, qi, int64_t(nI) * dI));
    DSV41_TRY(rope_at(qi, S, nI, dI, s_.qk_rope_head_dim, w.rope_freqs, d_pos, false, stream_));
    DSV41_TRY(sc.get(sp.qp, size_t(S) * nI * dI / 2));
    DSV41_TRY(sc.get(sp.qe, size_t(S) * nI * dI / 32));
    DSV41_TRY(quant_fp4_b32(qi, int64_t(nI) * dI, S, nI * dI, sp.qp, sp.qe, stream_));
    DSV41_TRY(sc.get(wb, size_t(S) * nI));
    DSV41_TRY(sc.get(sp.wf, size_t(S) * nI));
    DSV41_TRY(linear_bf16(x, S, w.i_wproj, nullptr, wb, nI));
    const float wscale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
    glue::index_weights_kernel<<<glue::blocks_for(int64_t(S) * nI), glue::kThreads, 0, stream_>>>(wb, S * nI, wscale, sp.wf);
    return launch_status("index weights");
  }

  // §4.4–4.5 top-k lists [n, index_topk] of one segment's rows (r0..) of a Full or Reindex layer, into `lists`.
  template <class KS = RuntimeSizes>
  Status index_select(int l, const DeviceLayerState& src, CandidateMask& cand, Scratch& fs, const SideProjections& sp, int r0, int n,
                      int64_t p0, const ForwardHooks* hooks, int32_t* lists, Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const int nI = s_.index_n_heads, dI = s_.index_head_dim, r = role.ratio, K = s_.index_topk;
    const int ne = int(src.n_entries);
    float* scores = nullptr;
    int* vis = nullptr;
    DSV41_TRY(sc.get(vis, size_t(n)));
    glue::fill_vis_kernel<<<glue::blocks_for(n), glue::kThreads, 0, stream_>>>(n, p0, r, ne, vis);
    DSV41_TRY(launch_status("index vis"));
    DSV41_TRY(sc.get(scores, size_t(n) * std::max(ne, 1)));
    IndexScoreParams ip;
    ip.q = sp.qp + size_t(r0) * nI * dI / 2;
    ip.qe = sp.qe + size_t(r0) * nI * dI / 32;
    ip.w = sp.wf + size_t(r0) * nI;
    ip.keys = src.ikeys;
    ip.n = ne;
    ip.vis = vis;
    ip.R = n;
    ip.nI = nI;
    ip.dI = dI;
    ip.scores = scores;
    DSV41_TRY(score_index<KS>(ip));
    DSV41_TRY(candidates(role, cand, fs, scores, n, ne, vis, sc));
    if (hooks && hooks->index_scores) {
      std::vector<float> h(size_t(n) * ne);
      if (ne > 0) {
        DSV41_CUDA_TRY(cudaMemcpyAsync(h.data(), scores, h.size() * 4, cudaMemcpyDeviceToHost, stream_), "scores copy");
        DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "scores copy");
      }
      hooks->index_scores(hooks->ctx, l, p0, n, ne, h.data());
    }
    return topk(scores, n, ne, vis, K, lists, stream_);
  }

  // §4.5 on index scores [R, n] (rows with vis[r] visible entries): the candidate source chooses its candidate
  // blocks into `cand` (in the forward's scratch fs); layers above it mask every score outside them.
  Status candidates(const LayerRole& role, CandidateMask& cand, Scratch& fs, float* scores, int R, int n, const int* vis,
                    Scratch& sc) const {
    const int blk = s_.candidate_block_size;
    if (role.candidate_source && n > 0) {
      const int nb = (n + blk - 1) / blk;
      stdsel::Pair* work = nullptr;
      DSV41_TRY(sc.get(work, size_t(R) * nb));
      DSV41_TRY(fs.get(cand.sel, size_t(R) * nb));
      DSV41_TRY(fs.get(cand.vis, size_t(R)));
      DSV41_CUDA_TRY(cudaMemcpyAsync(cand.vis, vis, size_t(R) * 4, cudaMemcpyDeviceToDevice, stream_), "cand vis");
      cand.nb = nb;
      cand.has = true;
      glue::candidate_fast_kernel<256><<<R, 256, 0, stream_>>>(scores, n, vis, s_.candidate_topk_blocks, blk, work, nb,
                                                              cand.sel);
      return launch_status("candidates");
    }
    if (role.candidate_source) {
      cand.has = false;  // no visible entries: every row's mask is empty
      return Status::Ok();
    }
    if (!role.uses_candidates || n == 0) return Status::Ok();
    if (!cand.has) {  // no mask this forward (cpu: rows beyond the mask's) → nothing eligible
      DSV41_TRY(fs.get(cand.sel, size_t(R)));
      DSV41_TRY(fs.get(cand.vis, size_t(R)));
      DSV41_CUDA_TRY(cudaMemsetAsync(cand.vis, 0, size_t(R) * 4, stream_), "cand vis");
      cand.nb = 1;
      cand.has = true;
    }
    glue::apply_candidates_kernel<<<glue::blocks_for(int64_t(R) * n), glue::kThreads, 0, stream_>>>(scores, R, n, vis, cand.sel,
                                                                                           cand.vis, cand.nb, blk);
    return launch_status("apply candidates");
  }

  // §4.4–4.5 the indexer of a decode batch (one row per sequence) in one launch of each kernel: row t scores
  // keys_rows[t] (n_rows[t] keys; nmax the most), lists [S, index_topk]. The candidate mask of the batch is
  // kept in `cand` (rows of all sequences).
  template <class KS = RuntimeSizes>
  Status index_select_rows(int l, int S, CandidateMask& cand, Scratch& fs, const SideProjections& sp, const int64_t* d_pos,
                           const uint8_t* const* keys_rows, const int* n_rows, int nmax, int32_t* lists,
                           Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const int nI = s_.index_n_heads, dI = s_.index_head_dim, K = s_.index_topk;
    int* vis = nullptr;
    float* scores = nullptr;
    DSV41_TRY(sc.get(vis, size_t(S)));
    glue::fill_vis_rows_kernel<<<glue::blocks_for(S), glue::kThreads, 0, stream_>>>(S, d_pos, role.ratio, n_rows, vis);
    DSV41_TRY(launch_status("index vis"));
    DSV41_TRY(sc.get(scores, size_t(S) * std::max(nmax, 1)));
    IndexScoreParams ip;
    ip.q = sp.qp;
    ip.qe = sp.qe;
    ip.w = sp.wf;
    ip.keys_rows = keys_rows;
    ip.n_rows = n_rows;
    ip.n = nmax;
    ip.vis = vis;
    ip.R = S;
    ip.nI = nI;
    ip.dI = dI;
    ip.scores = scores;
    DSV41_TRY(score_index<KS>(ip));
    DSV41_TRY(candidates(role, cand, fs, scores, S, nmax, vis, sc));
    return topk(scores, S, nmax, vis, K, lists, stream_);
  }

};

}  // namespace dsv41::gpu
