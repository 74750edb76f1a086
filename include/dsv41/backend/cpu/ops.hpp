// The CPU backend: the ops the blocks ask for (blocks/backend_ops.hpp) on host memory, FP32 arrays holding
// BF16-rounded values where the reference holds BF16. Runtime-shaped: any valid ModelShape. One sequence per
// forward; a decode batch runs its sequences one after another.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cpu/csa2_ops.hpp>
#include <dsv41/backend/cpu/math.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/backend/cpu/snapshot.hpp>
#include <dsv41/backend/cpu/unit_ops.hpp>
#include <dsv41/backend/cpu/vision_ops.hpp>
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/blocks/rope.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/engram/hash.hpp>
#include <dsv41/parallel/communicator.hpp>
#include <dsv41/parallel/partition.hpp>

namespace dsv41::cpu {

class Ops {
 public:
  using State = SequenceState;
  using Snapshot = dsv41::Snapshot;
  using BlockWork = cpu::BlockWork;
  using AttentionWork = cpu::AttentionWork;
  struct Context {};                               // nothing to run on but the calling thread
  static constexpr bool on_host = true;            // states and outputs in host memory
  static constexpr bool keeps_host_weights = true; // computes on the checkpoint's mapping
  static constexpr bool batches_decode = false;    // a decode step runs its sequences one by one
  static constexpr bool splits_head = true;        // parallel: each rank computes its vocabulary rows' logits

  // Where a forward's logits go: the caller's ForwardResult.
  struct LogitsSink {
    ForwardResult* res = nullptr;
    ForwardResult& target(bool = true) const { return *res; }
    Status read(std::vector<float>& dst) const {
      if (&dst != &res->logits) dst = std::move(res->logits);
      return Status::Ok();
    }
  };

  // Residual streams: H [rows, hc, d], pre [rows, hc].
  struct Streams {
    float* H = nullptr;
    float* pre = nullptr;
    int rows = 0;
  };

  // The rows of one forward of one sequence, at positions p0..p0+S−1.
  struct Batch {
    SequenceState* st = nullptr;
    const ForwardHooks* hooks = nullptr;
    int S = 0, dropped = 0;     // rows now; rows dropped by keep_tail (bounded replay)
    int64_t p0 = 0;
    std::span<const int32_t> all_ids;  // every row's id (the caller's)
    std::vector<int32_t> ids;          // the rows' ids now
    std::vector<int64_t> hash;  // [S, n_engram_layers·cols]
    std::vector<float> H, pre;  // [S, hc, d], [S, hc]
    std::vector<float>* taps = nullptr;    // [all rows, n_targets·d]
    std::vector<float>* logits = nullptr;  // [S or 1, V] out, or null
    bool all_logits = false;
    IndexHandoff handoff;
    std::span<const ImageSpan> images;     // image spans among the rows (checked), merged by embed

    int rows() const { return S; }
    int64_t first_position() const { return p0; }
    Streams streams() { return {H.data(), pre.data(), S}; }
    const int32_t* tokens() const { return ids.data(); }
  };

  // The block of a DSpark draft: [y, noise, ...] as residual streams.
  struct DraftWork {
    std::vector<int32_t> ids;
    std::vector<float> H, pre;
    Streams streams;
    int32_t y = 0;
  };

  Ops(const ModelShape& s, const Weights& w, std::vector<int32_t> token_map, engram::HashPlan plan)
      : s_(s), w_(w), sched_(make_schedule(s)), token_map_(std::move(token_map)), plan_(std::move(plan)) {
    for (const auto& r : sched_) ropes_.push_back(rope_table_for(s, r.ratio > 0));
  }

  static Result<std::unique_ptr<Ops>> create(const ModelShape& s, const Weights& w, engram::Setup eg, Context) {
    return Result<std::unique_ptr<Ops>>(std::make_unique<Ops>(s, w, std::move(eg.token_map), std::move(eg.plan)));
  }

  const ModelShape& shape() const { return s_; }
  const std::vector<LayerRole>& schedule() const { return sched_; }

  // Runs as rank plan.rank of plan.world (issue 16): the weights hold the plan's routed experts, Engram table rows,
  // head rows and (LoadOptions::split_attention) attention heads (bind_weights with the plan); comm combines them. Every rank computes everything else, so every
  // rank ends with the same streams and logits. comm must outlive the ops.
  Status set_parallel(const parallel::Plan& plan, parallel::Communicator* comm) {
    if (!comm || comm->size() != plan.world || comm->rank() != plan.rank)
      return error(Code::invalid_argument, "parallel: the communicator is not the plan's rank");
    if (w_.head_first != plan.vocab.begin || w_.head.out != plan.vocab.size())
      return error(Code::invalid_argument, "parallel: the head's rows are not the plan's");
    for (size_t l = 0; l < sched_.size(); ++l) {
      const LayerWeights& L = w_.layers[l];
      const parallel::Range r = plan.experts_of(sched_[l]);
      if (L.expert_first != r.begin || int(L.experts.size()) != r.size())
        return error(Code::invalid_argument, "parallel: layer " + std::to_string(l) + "'s experts are not the plan's");
      if (L.head_first != plan.heads.begin || int(L.attn_sink.size()) != plan.heads.size() ||
          L.group_first != plan.groups.begin || L.wo_a.out != plan.groups.size() * s_.o_lora_rank)
        return error(Code::invalid_argument, "parallel: layer " + std::to_string(l) + "'s heads are not the plan's");
      const int slot = sched_[l].engram_slot;
      if (slot >= 0 && parallel::Range64{L.engram_row_first, L.engram_row_first + L.engram_rows} !=
                           plan.engram_rows(s_.engram_num_embeddings[size_t(slot)]))
        return error(Code::invalid_argument, "parallel: layer " + std::to_string(l) + "'s Engram rows are not the plan's");
    }
    par_ = plan;
    comm_ = comm;
    return Status::Ok();
  }
  const parallel::Plan& parallel_plan() const { return par_; }

  SequenceState new_sequence(int64_t max_positions) const { return SequenceState(s_, max_positions); }
  Status drop_windows(SequenceState& st) const {
    st.drop_windows();
    return Status::Ok();
  }
  Result<LogitsSink> logits_sink(ForwardResult* res, int) const { return LogitsSink{res}; }
  Status synchronize() const { return Status::Ok(); }
  Result<Snapshot> take_snapshot(const SequenceState& st, std::span<const int32_t> ids) const {
    return snapshot(s_, sched_, st, ids);
  }
  Result<int> restore(SequenceState& st, const Snapshot& sn, int keep) const { return dsv41::restore(st, sn, keep); }

  Status check_state(const SequenceState& st) const {
    if (st.layers.size() != sched_.size()) return error(Code::invalid_argument, "forward: state made for another model");
    return Status::Ok();
  }

  // ---- batches ----

  Batch new_batch() const { return Batch{}; }

  // Rows ids at positions p0.. of st, with the Engram history before them; res receives logits and taps.
  Status begin(Batch& b, SequenceState& st, std::span<const int32_t> ids, std::span<const int32_t> history, int64_t p0,
               const ForwardHooks* hooks, bool all_logits, ForwardResult& res) const {
    const int S = int(ids.size());
    b.st = &st;
    b.hooks = hooks;
    b.S = S;
    b.p0 = p0;
    b.all_ids = ids;
    b.ids.assign(ids.begin(), ids.end());
    b.all_logits = all_logits;
    b.logits = &res.logits;
    b.taps = &res.taps;
    res.taps.assign(size_t(S) * n_taps() * s_.hidden_size, 0.f);
    if (!plan_.layers.empty()) {
      b.hash.resize(size_t(S) * plan_.n_layers() * plan_.cols());
      DSV41_TRY(engram::hash_ids(plan_, token_map_, s_.image_token_id, ids, history, b.hash));
      if (hooks && hooks->engram_ids) hooks->engram_ids(hooks->ctx, p0, S, int(plan_.n_layers() * plan_.cols()), b.hash.data());
    }
    b.handoff.lists.resize(sched_.size());
    return Status::Ok();
  }

  // Runs f (the forward of st's rows); out of memory anywhere in it is an error and puts st back as it was.
  template <class F>
  Status guarded(std::span<SequenceState* const> seqs, std::span<const int32_t> ids, F&& f) const {
    if (seqs.size() != 1) return error(Code::unsupported, "CPU forward: one sequence at a time");
    SequenceState& st = *seqs[0];
    Snapshot before;
    try {
      before = snapshot(s_, sched_, st, ids);
    } catch (const std::bad_alloc&) {
      return error(Code::out_of_memory, "forward: out of memory");
    }
    try {
      return f();
    } catch (const std::bad_alloc&) {
      (void)restore(st, before, 0);
      return error(Code::out_of_memory, "forward: out of memory after " + std::to_string(st.pos) +
                                            " positions; the sequence is unchanged");
    }
  }

  // The state's position and Engram history after the forward of the batch's ids.
  Status advance(Batch& b) const {
    SequenceState& st = *b.st;
    const std::span<const int32_t> ids = b.all_ids;
    st.pos += int64_t(ids.size());
    const size_t keep = size_t(std::max<int64_t>(s_.engram_max_ngram_size - 1, 0));
    st.history.insert(st.history.end(), ids.begin(), ids.end());
    if (st.history.size() > keep) st.history.erase(st.history.begin(), st.history.end() - std::ptrdiff_t(keep));
    return Status::Ok();
  }

  // ---- the stack's steps ----

  // Embeddings of the ids expanded to the hc residual streams (each stream the embedding; pre 1 for stream 0);
  // image span rows take the image_* vectors and the aligner rows (SPEC §4.10).
  Status embed(Batch& b) const {
    embed_streams(b.ids, b.H, b.pre);
    if (b.images.empty()) return Status::Ok();
    const int hc = s_.hc_mult, d = s_.hidden_size;
    std::vector<float> E(size_t(b.S) * d);
    for (int t = 0; t < b.S; ++t) std::copy_n(b.H.begin() + std::ptrdiff_t(size_t(t) * hc * d), d, E.begin() + std::ptrdiff_t(size_t(t) * d));
    merge_image_spans(s_, w_.vision, b.images, b.p0, E.data());
    for (int t = 0; t < b.S; ++t)
      for (int k = 0; k < hc; ++k)
        std::copy_n(E.begin() + std::ptrdiff_t(size_t(t) * d), d, b.H.begin() + std::ptrdiff_t((size_t(t) * hc + k) * d));
    return Status::Ok();
  }

  // The image spans of the batch's rows (blocks::forward checked them with check_image_spans).
  Status set_images(Batch& b, std::span<const ImageSpan> spans) const {
    if (!spans.empty() && !w_.vision) return error(Code::unsupported, "forward: this model has no vision weights");
    b.images = spans;
    return Status::Ok();
  }

  // ---- vision (SPEC §4.10; blocks/vision.hpp) ----

  Result<VisionWork> vision_work(const ImageInput& in) const {
    if (!w_.vision) return error(Code::unsupported, "encode_image: this model has no vision weights");
    return Result<VisionWork>(cpu::vision_work(s_, in));
  }
  Status patch_embed(VisionWork& w, const ImageInput& in) const {
    cpu::patch_embed(w_.vision, in, w);
    return Status::Ok();
  }
  Status vision_norm(int l, int k, VisionWork& w) const {
    const VisionBlockWeights& B = w_.vision.blocks[size_t(l)];
    rmsnorm(w.x.data(), (k == 1 ? B.norm1 : B.norm2).data(), w.n, s_.vision.hidden_size, 1e-6f, w.h.data());
    return Status::Ok();
  }
  Status vision_qkv(int l, VisionWork& w) const {
    const VisionBlockWeights& B = w_.vision.blocks[size_t(l)];
    vision_linear(B.wqkv, B.bqkv, w.h.data(), w.n, w.qkv.data());
    return Status::Ok();
  }
  Status vision_rope2d(VisionWork& w) const {
    cpu::vision_rope2d(s_, w);
    return Status::Ok();
  }
  Status vision_attention(VisionWork& w) const {
    cpu::vision_attention(s_, w);
    return Status::Ok();
  }
  Status vision_wo(int l, VisionWork& w) const {
    cpu::vision_wo(w_.vision.blocks[size_t(l)], w);
    return Status::Ok();
  }
  Status vision_mlp(int l, VisionWork& w) const {
    cpu::vision_mlp(w_.vision.blocks[size_t(l)], w);
    return Status::Ok();
  }
  Status vision_final_norm(VisionWork& w) const {
    rmsnorm(w.x.data(), w_.vision.norm.data(), w.n, s_.vision.hidden_size, 1e-6f, w.tower.data());
    return Status::Ok();
  }
  Status vision_merge(VisionWork& w) const {
    cpu::vision_merge(s_, w);
    return Status::Ok();
  }
  Status vision_aligner(VisionWork& w) const {
    cpu::vision_aligner(s_, w_.vision, w);
    return Status::Ok();
  }
  Status vision_read(VisionWork& w, VisionResult& out) const {
    out.tower = std::move(w.tower);
    out.embeds = std::move(w.embeds);
    return Status::Ok();
  }

  // Keeps rows [off, S) (SPEC §5 decoder bounded replay).
  Status keep_tail(Batch& b, int off) const {
    const size_t hw = size_t(s_.hc_mult) * s_.hidden_size, hp = size_t(plan_.n_layers() * plan_.cols());
    b.H.erase(b.H.begin(), b.H.begin() + std::ptrdiff_t(size_t(off) * hw));
    b.pre.erase(b.pre.begin(), b.pre.begin() + std::ptrdiff_t(size_t(off) * s_.hc_mult));
    b.ids.erase(b.ids.begin(), b.ids.begin() + off);
    if (!b.hash.empty()) b.hash.erase(b.hash.begin(), b.hash.begin() + std::ptrdiff_t(size_t(off) * hp));
    b.handoff.keep_tail(off, b.S, s_.index_topk);
    b.S -= off;
    b.p0 += off;
    b.dropped += off;
    return Status::Ok();
  }

  // Logits of every row (all_logits) or of the last.
  Status head(Batch& b) const {
    if (!b.logits) return Status::Ok();
    const int first = b.all_logits ? 0 : b.S - 1;
    b.logits->assign(size_t(b.S - first) * s_.vocab_size, 0.f);
    return head_rows(b.H.data(), b.pre.data(), first, b.S, b.logits->data());
  }

  Status observe_taps(Batch& b) const {
    if (b.hooks && b.hooks->taps)
      b.hooks->taps(b.hooks->ctx, b.p0 - b.dropped, b.S + b.dropped, n_taps() * s_.hidden_size, b.taps->data());
    return Status::Ok();
  }

  // Each DSpark stage's window entries of the rows' positions, from the taps (bounded replay: the tail's only).
  Status seed_dspark(Batch& b) const {
    seed_dspark(*b.st, b.taps->data() + size_t(b.dropped) * n_taps() * s_.hidden_size, b.S, b.p0);
    return Status::Ok();
  }

  // ---- the layer unit's steps ----

  Status observe_unit(int l, Batch& b, UnitPoint at) const {
    if (!b.hooks) return Status::Ok();
    if (at == UnitPoint::input && b.hooks->unit_input)
      b.hooks->unit_input(b.hooks->ctx, l, b.p0, b.S, b.H.data(), b.pre.data());
    if (at == UnitPoint::output && b.hooks->unit_output)
      b.hooks->unit_output(b.hooks->ctx, l, b.p0, b.S, b.H.data(), b.pre.data());
    return Status::Ok();
  }

  Status engram(int l, Batch& b) const {
    const int cols = int(plan_.cols()), stride = int(plan_.n_layers()) * cols;
    const int slot = sched_[size_t(l)].engram_slot;
    return cpu::engram(s_, w_.layers[size_t(l)], b.hash.data() + size_t(slot) * cols, stride, b.ids.data(), b.H.data(),
                       b.S, s_.engram_num_embeddings[size_t(slot)], comm_);
  }

  // §4.9 the DSpark tap of a target layer: the mean of the streams, BF16.
  Status dspark_tap(int l, Batch& b) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, nt = n_taps(), slot = sched_[size_t(l)].tap_slot;
    float* taps = b.taps->data() + size_t(b.dropped) * nt * d;
    for (int t = 0; t < b.S; ++t)
      for (int i = 0; i < d; ++i) {
        float acc = 0.f;
        for (int k = 0; k < hc; ++k) acc += b.H[(size_t(t) * hc + k) * d + i];
        taps[(size_t(t) * nt + slot) * d + i] = bf16(acc / float(hc));
      }
    return Status::Ok();
  }

  // ---- mHC and MoE ----

  Result<BlockWork> block_work(int rows) const { return BlockWork(rows, s_.hc_mult, s_.hidden_size); }
  Status mhc_pre(int l, const Streams& s, BlockWork& w) const {
    cpu::mhc_pre(s_, w_.layers[size_t(l)], s.H, s.pre, w);
    return Status::Ok();
  }
  Status mhc_seam(int l, const Streams& s, BlockWork& w) const {
    cpu::mhc_seam(s_, w_.layers[size_t(l)], s.H, w);
    return Status::Ok();
  }
  Status mhc_post(int, const Streams& s, BlockWork& w) const {
    cpu::mhc_post(s_, s.H, s.pre, w);
    return Status::Ok();
  }
  Status moe(int l, const int32_t* tokens, const float* x, float* out, int rows) const {
    return cpu::moe(s_, sched_[size_t(l)], w_.layers[size_t(l)], x, tokens, rows, out, comm_);
  }

  // ---- CSA2 attention ----

  Result<AttentionWork> attention_work(int, Batch&) const { return AttentionWork{}; }
  Status queries(int l, Batch& b, const float* x, AttentionWork& w) const {
    cpu::queries(layer(l, b), x, w);
    return Status::Ok();
  }
  Status window_entries(int l, Batch& b, const float* x, AttentionWork& w, const StackPass& pass) const {
    cpu::window_entries(layer(l, b), b.st->layers[size_t(l)], x, w, pass);
    return Status::Ok();
  }
  Status compress(int l, Batch& b, const float* x, AttentionWork&) const {
    cpu::compress(layer(l, b), b.st->layers[size_t(l)], x);
    return Status::Ok();
  }
  Status index_select(int l, Batch& b, const float* x, AttentionWork& w) const {
    const AttnLayer c = layer(l, b);
    auto own = cpu::index_select(c, b.st->layers[size_t(c.role.kv_source)], b.handoff, x, w.qr.data());
    if (b.hooks && b.hooks->topk) b.hooks->topk(b.hooks->ctx, l, b.p0, b.S, s_.index_topk, own.data());
    b.handoff.lists[size_t(l)] = std::move(own);
    return Status::Ok();
  }
  Status sparse_attention(int l, Batch& b, AttentionWork& w, bool reads_compressed, const StackPass& pass) const {
    cpu::sparse_attention(layer(l, b), *b.st, b.handoff, w, reads_compressed, pass);
    return Status::Ok();
  }
  Status output_projection(int l, Batch& b, AttentionWork& w, float* out) const {
    return cpu::output_projection(s_, w_.layers[size_t(l)], w.o.data(), b.S, out, comm_);
  }

  // ---- DSpark ----

  Result<DraftWork> draft_block(const SequenceState&, int32_t y) const {
    DraftWork d;
    d.y = y;
    d.ids.assign(size_t(s_.dspark_block_size), s_.dspark_noise_token_id);
    d.ids[0] = y;
    embed_streams(d.ids, d.H, d.pre);
    d.streams = {d.H.data(), d.pre.data(), s_.dspark_block_size};
    return Result<DraftWork>(std::move(d));
  }

  // ForwardHooks::draft_stage before stage k (k = n_dspark: before the head).
  Status observe_stage(const ForwardHooks* hooks, int k, const Streams& s) const {
    if (hooks && hooks->draft_stage) hooks->draft_stage(hooks->ctx, k, s.rows, s.H, s.pre);
    return Status::Ok();
  }

  // DSpark stage attention: block rows at positions p+1.. attend to the ring (positions ≤ p) and every block row.
  Status draft_attention(const SequenceState& st, int l, const float* x, int64_t p, float* out) const {
    const LayerWeights& w = w_.layers[size_t(l)];
    const int B = s_.dspark_block_size, H = int(w.attn_sink.size()), D = s_.head_dim, W = s_.sliding_window;
    const RopeTable& rope = ropes_[size_t(l)];
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
    const int we = kv::WindowEntry::bytes(D);
    const int64_t lo = std::max<int64_t>(0, p - W + 1);
    std::vector<float> ring(size_t(p + 1 - lo) * D);
    for (int64_t wp = lo; wp <= p; ++wp)
      kv::WindowEntry::unpack(st.layers[size_t(l)].ring.data() + size_t(wp % W) * we, D, ring.data() + size_t(wp - lo) * D);
    std::vector<const float*> entries;
    for (int64_t wp = lo; wp <= p; ++wp) entries.push_back(ring.data() + size_t(wp - lo) * D);
    for (int i = 0; i < B; ++i) entries.push_back(kvn.data() + size_t(i) * D);
    std::vector<float> o(size_t(B) * H * D);
    const float scale = float(std::pow(double(D), -0.5));
    for (int i = 0; i < B; ++i) {
      float* oi = o.data() + size_t(i) * H * D;
      cpu::sparse_attention(q.data() + size_t(i) * H * D, H, D, entries, w.attn_sink.data(), scale, oi);
      for (int h = 0; h < H; ++h) rope.apply(oi + size_t(h) * D, D, p + 1 + i, true);
    }
    return cpu::output_projection(s_, w, o.data(), B, out, comm_);
  }

  // The drafts: shared head on the last stage's collapsed, normed rows, plus the Markov bias of the previous
  // token (greedy chain), and the confidence head.
  Status draft_head(DraftWork& dw, DraftResult& out) const {
    const int B = s_.dspark_block_size, hc = s_.hc_mult, d = s_.hidden_size;
    const LayerWeights& last = w_.layers[size_t(s_.num_hidden_layers + s_.n_dspark() - 1)];
    std::vector<float> xb(size_t(B) * d), xn(size_t(B) * d);
    for (int i = 0; i < B; ++i)
      hc_pre(dw.H.data() + size_t(i) * hc * d, dw.pre.data() + size_t(i) * hc, hc, d, xb.data() + size_t(i) * d);
    rmsnorm(xb.data(), last.norm.data(), B, d, float(s_.rms_norm_eps), xn.data());
    const int V = s_.vocab_size, R = s_.dspark_markov_rank;
    out.logits.assign(size_t(B) * V, 0.f);
    DSV41_TRY(head_logits(xn.data(), B, out.logits.data()));
    out.ids.assign(size_t(B) + 1, 0);
    out.confidence.assign(size_t(B), 0.f);
    out.ids[0] = dw.y;
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
    const LayerWeights& last = w_.layers[size_t(s_.num_hidden_layers + s_.n_dspark() - 1)];
    std::vector<float> e(static_cast<size_t>(s_.dspark_markov_rank));
    last.markov_embed.row(t, e.data());
    bias.assign(size_t(s_.vocab_size), 0.f);
    linear(last.markov_head, e.data(), 1, bias.data(), Lin::F32);
    return Status::Ok();
  }

  // The final collapse, norm and head of rows [first, last) of H [.., hc, d]; logits FP32. (A collective failing
  // leaves NaN logits: the golden check's entry point, without a Status.)
  void head(const float* H, const float* pre, int first, int last, float* logits) const {
    if (!head_rows(H, pre, first, last, logits).ok())
      std::fill_n(logits, size_t(last - first) * s_.vocab_size, std::numeric_limits<float>::quiet_NaN());
  }
  Status head_rows(const float* H, const float* pre, int first, int last, float* logits) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    std::vector<float> x(size_t(last - first) * d), tmp(static_cast<size_t>(d));
    for (int t = first; t < last; ++t) {
      hc_pre(H + size_t(t) * hc * d, pre + size_t(t) * hc, hc, d, tmp.data());
      rmsnorm(tmp.data(), w_.norm.data(), 1, d, float(s_.rms_norm_eps), x.data() + size_t(t - first) * d);
    }
    return head_logits(x.data(), last - first, logits);
  }

  // logits [M, V] FP32 of normed rows x [M, d]. Parallel: this rank's vocabulary rows, gathered from every rank
  // (each logit is one rank's dot product: the bits of one rank).
  Status head_logits(const float* x, int M, float* logits) const {
    const int V = s_.vocab_size, n = w_.head.out;
    if (!comm_ || n == V) {
      linear(w_.head, x, M, logits, Lin::F32);
      return Status::Ok();
    }
    std::vector<float> mine(size_t(M) * n), all(size_t(comm_->size()) * M * n);
    linear(w_.head, x, M, mine.data(), Lin::F32);
    DSV41_TRY(comm_->all_gather(mine.data(), all.data(), mine.size(), parallel::Elem::f32, nullptr));
    for (int r = 0; r < comm_->size(); ++r)  // [rank][M][n] -> [M][rank·n + j]
      for (int m = 0; m < M; ++m)
        std::copy_n(all.data() + (size_t(r) * M + m) * n, n, logits + size_t(m) * V + size_t(r) * n);
    return Status::Ok();
  }

 private:
  int n_taps() const { return int(s_.dspark_target_layer_ids.size()); }
  AttnLayer layer(int l, const Batch& b) const {
    return AttnLayer{s_, sched_[size_t(l)], w_.layers[size_t(l)], ropes_[size_t(l)], b.hooks, b.S, b.p0};
  }

  void embed_streams(std::span<const int32_t> ids, std::vector<float>& H, std::vector<float>& pre) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    H.assign(ids.size() * hc * d, 0.f);
    pre.assign(ids.size() * hc, 0.f);
    std::vector<float> row(static_cast<size_t>(d));
    for (size_t t = 0; t < ids.size(); ++t) {
      w_.embed.row(ids[t], row.data());
      for (int k = 0; k < hc; ++k) std::copy(row.begin(), row.end(), H.begin() + std::ptrdiff_t((t * hc + k) * d));
      pre[t * hc] = 1.f;
    }
  }

  void seed_dspark(SequenceState& st, const float* taps, int S, int64_t p0) const {
    const int d = s_.hidden_size, D = s_.head_dim, W = s_.sliding_window, L = s_.num_hidden_layers;
    const LayerWeights& first = w_.layers[size_t(L)];
    std::vector<float> mx(size_t(S) * d), mxn(size_t(S) * d);
    linear(first.main_proj, taps, S, mx.data());
    rmsnorm(mx.data(), first.main_norm.data(), S, d, float(s_.rms_norm_eps), mxn.data());
    const int we = kv::WindowEntry::bytes(D);
    std::vector<float> kv(size_t(S) * D), kvn(size_t(S) * D);
    for (int stage = 0; stage < s_.n_dspark(); ++stage) {
      const int l = L + stage;
      linear(w_.layers[size_t(l)].wkv, mxn.data(), S, kv.data());
      rmsnorm(kv.data(), w_.layers[size_t(l)].kv_norm.data(), S, D, float(s_.rms_norm_eps), kvn.data());
      for (int t = std::max(0, S - W); t < S; ++t) {
        float* e = kvn.data() + size_t(t) * D;
        ropes_[size_t(l)].apply(e, D, p0 + t);
        kv::WindowEntry::pack(e, D, st.layers[size_t(l)].ring.data() + size_t((p0 + t) % W) * we);
      }
    }
  }

  const ModelShape& s_;
  const Weights& w_;
  parallel::Plan par_;                       // world 1 unless set_parallel
  parallel::Communicator* comm_ = nullptr;
  std::vector<LayerRole> sched_;
  std::vector<RopeTable> ropes_;
  std::vector<int32_t> token_map_;
  engram::HashPlan plan_;
};

}  // namespace dsv41::cpu
