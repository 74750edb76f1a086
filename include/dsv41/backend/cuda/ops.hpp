// The CUDA backend: the ops the blocks ask for (blocks/backend_ops.hpp) on one GPU, with the semantics and rounding
// points of the CPU's (backend/cpu/ops.hpp). Work runs on the stream given at creation; scratch comes from the
// model's stream-ordered pool, so a forward makes no device synchronization unless hooks are given (a debug path
// that copies rows to the host and back) or the caller asks for host outputs. A decode step of several sequences
// is one forward over B rows: weight-side work once for the batch, cache-side work per row through pointer tables.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <dsv41/backend/cuda/batch.hpp>
#include <dsv41/backend/cuda/dspark_ops.hpp>
#include <dsv41/backend/cuda/image_ops.hpp>
#include <dsv41/backend/cuda/kernel_sizes.hpp>
#include <dsv41/backend/cuda/kernels/shape_support.hpp>
#include <dsv41/backend/cuda/snapshot.hpp>
#include <dsv41/backend/cuda/upload.hpp>
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/dims.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/parallel/communicator.hpp>
#include <dsv41/parallel/partition.hpp>

namespace dsv41::gpu {

template <class Config = configs::Dynamic>
class Ops : public DsparkOps {
 public:
  using State = DeviceSequence;
  using Snapshot = DeviceSnapshot;
  using Batch = gpu::Batch;
  using Streams = gpu::Streams;
  using BlockWork = gpu::BlockWork;
  using AttentionWork = gpu::AttentionWork;
  using DraftWork = gpu::DraftWork;
  using Context = cudaStream_t;                      // the stream work runs on (null: the legacy default stream)
  static constexpr bool on_host = false;
  static constexpr bool keeps_host_weights = false;  // uploaded once at creation
  static constexpr bool batches_decode = true;
  static constexpr bool splits_head = false;  // parallel: every rank computes every logit (the head is not split)
  // The kernel-relevant sizes: compile-time for a preset (its hot kernels are instantiated for them), runtime for
  // configs::Dynamic.
  using Sizes = Dims<Config>;
  // The attention and indexer kernels' template sizes: the preset's where the fast kernels take them (V41Flash:
  // H 64, D 512, nI 32, dI 128), else none (run-time dispatch; configs::Dynamic, TinyCed).
  using Kernels = kernel_sizes_t<Config>;

  // Uploads the bound weights (host views of a checkpoint) once; host memory is not needed afterwards.
  static Result<std::unique_ptr<Ops>> create(const ModelShape& s, const Weights& hw, engram::Setup eg, cudaStream_t stream) {
    std::unique_ptr<Ops> f(new Ops(s, std::move(eg), stream));
    DSV41_TRY(check_supported(s));
    DSV41_TRY(f->create_pool());
    Uploader up(stream);
    WeightUpload wu(f->wmem_, up);
    DSV41_TRY(wu.all(f->s_, f->sched_, hw, f->w_.embed, f->w_.head, f->w_.norm, f->layers_));
    DSV41_TRY(upload_vision(f->s_, hw.vision, up, f->vision_));
    DSV41_TRY(up.finish());
    return Result<std::unique_ptr<Ops>>(std::move(f));
  }

  using DsparkOps::head;
  using DsparkOps::markov_bias;

  // Runs as rank plan.rank of plan.world (issue 16): the uploaded weights hold the plan's routed experts and Engram
  // table rows; the MoE and Engram combine them through comm (NcclComm over the caller's ncclComm_t, on this
  // model's stream). Attention and the head are not split. comm must outlive the ops.
  Status set_parallel(const parallel::Plan& plan, parallel::Communicator* comm) {
    if (!comm || comm->size() != plan.world || comm->rank() != plan.rank)
      return error(Code::invalid_argument, "parallel: the communicator is not the plan's rank");
    if (plan.heads.size() != s_.num_attention_heads || plan.vocab.size() != s_.vocab_size)
      return error(Code::unsupported, "parallel: the CUDA backend splits only the routed experts");
    for (size_t l = 0; l < sched_.size(); ++l) {
      const parallel::Range r = plan.experts_of(sched_[l]);
      if (layers_[l].expert_first != r.begin || layers_[l].experts_held != r.size())
        return error(Code::invalid_argument, "parallel: layer " + std::to_string(l) + "'s experts are not the plan's");
      const int slot = sched_[l].engram_slot;
      if (slot >= 0 && parallel::Range64{layers_[l].engram_row_first, layers_[l].engram_row_first + layers_[l].engram_rows} !=
                           plan.engram_rows(s_.engram_num_embeddings[size_t(slot)]))
        return error(Code::invalid_argument, "parallel: layer " + std::to_string(l) + "'s Engram rows are not the plan's");
    }
    par_ = plan;
    comm_ = comm;
    return Status::Ok();
  }
  const parallel::Plan& parallel_plan() const { return par_; }

  Status check_state(const DeviceSequence& st) const {
    if (!owns(st) || st.layers.size() != sched_.size())
      return error(Code::invalid_argument, "forward: sequence made by another model");
    if (st.damaged)
      return error(Code::invalid_argument, "forward: the sequence was damaged by an earlier failed forward; restore a snapshot");
    return Status::Ok();
  }

  // Forgets the window rings (SequenceState::drop_windows' counterpart); replay_window rebuilds them.
  Status drop_windows(DeviceSequence& st) const {
    const size_t rb = size_t(s_.sliding_window) * kv::WindowEntry::bytes(s_.head_dim);
    for (auto& ls : st.layers)
      if (ls.ring) DSV41_CUDA_TRY(cudaMemsetAsync(ls.ring, 0, rb, stream_), "drop windows");
    return Status::Ok();
  }

  Status synchronize() const { return cuda_status(cudaStreamSynchronize(stream_), "synchronize"); }

  Result<DeviceSnapshot> take_snapshot(const DeviceSequence& st, std::span<const int32_t> ids) const {
    return DeviceSnapshot::take(s_, sched_, st, ids, stream_);
  }
  Result<int> restore(DeviceSequence& st, const DeviceSnapshot& sn, int keep) const { return sn.restore(st, keep, stream_); }

  // Device logits for a host caller: rows [rows, V] in a stream-ordered block, read back with one synchronization.
  class LogitsSink {
   public:
    float* target(bool want = true) const { return want ? reinterpret_cast<float*>(buf_.data()) : nullptr; }
    Status read(std::vector<float>& dst) const {
      dst.resize(size_t(rows_) * V_);
      DSV41_CUDA_TRY(cudaMemcpyAsync(dst.data(), buf_.data(), dst.size() * 4, cudaMemcpyDeviceToHost, stream_), "logits");
      return cuda_status(cudaStreamSynchronize(stream_), "logits");
    }
    Status read_rows(std::span<std::vector<float>* const> rows) const {
      for (size_t b = 0; b < rows.size(); ++b) {
        if (!rows[b]) continue;
        rows[b]->resize(size_t(V_));
        DSV41_CUDA_TRY(cudaMemcpyAsync(rows[b]->data(), buf_.data() + b * size_t(V_) * 4, size_t(V_) * 4,
                                       cudaMemcpyDeviceToHost, stream_),
                       "logits");
      }
      return cuda_status(cudaStreamSynchronize(stream_), "decode");
    }

   private:
    friend class Ops;
    StreamBlock buf_;
    int rows_ = 0, V_ = 0;
    cudaStream_t stream_ = nullptr;
  };
  Result<LogitsSink> logits_sink(ForwardResult* res, int rows) const {
    if (res) res->taps.clear();  // taps stay on the device
    LogitsSink k;
    k.rows_ = rows;
    k.V_ = s_.vocab_size;
    k.stream_ = stream_;
    DSV41_TRY(k.buf_.alloc(size_t(rows) * s_.vocab_size * 4, stream_));
    return Result<LogitsSink>(std::move(k));
  }

  // ---- batches ----

  Batch new_batch() const { return Batch(scratch()); }

  // Rows ids at positions p0.. of st, with the Engram history before them. d_logits: device [rows, V] (every row
  // when all_logits, else the last), or null.
  Status begin(Batch& b, DeviceSequence& st, std::span<const int32_t> ids, std::span<const int32_t> history, int64_t p0,
               const ForwardHooks* hooks, bool all_logits, float* d_logits) const {
    b.begun = {SequenceRows{&st, p0, 0, int(ids.size())}};
    const std::span<const int32_t> hist[] = {history};
    return start(b, ids, hist, hooks, all_logits, d_logits);
  }

  // One row per sequence, each at its own position. d_logits: device [B, V] or null.
  Status begin_decode(Batch& b, std::span<DeviceSequence* const> seqs, std::span<const int32_t> ids, float* d_logits) const {
    std::vector<std::span<const int32_t>> hist;
    for (size_t i = 0; i < seqs.size(); ++i) {
      b.begun.push_back(SequenceRows{seqs[i], seqs[i]->pos, int(i), 1});
      hist.emplace_back(seqs[i]->history);
    }
    return start(b, ids, hist, nullptr, false, d_logits);
  }

  // ---- a decode batch whose per-step inputs are in device memory (decode_graph.hpp) ----

  // Bytes of a batch of S rows' step inputs: ids | positions | Engram row ids | one StepTables table per layer and
  // DSpark stage.
  size_t step_input_bytes(int S) const {
    return step_tables_offset(S) + sched_.size() * StepTables::words(S) * 8;
  }
  // The tables over a device buffer of step_input_bytes(S); nmax: per layer, the most entries a row's KV source may
  // hold while the tables are used (what the indexer's grids are sized for).
  StepTables step_tables(uint8_t* dev, int S, std::vector<int> nmax) const {
    StepTables t;
    const size_t ids_b = (size_t(S) * 4 + 7) / 8 * 8;
    t.in.ids = reinterpret_cast<int32_t*>(dev);
    t.in.pos = reinterpret_cast<int64_t*>(dev + ids_b);
    t.in.hash = hash_cols() ? reinterpret_cast<int64_t*>(dev + ids_b + size_t(S) * 8) : nullptr;
    for (size_t l = 0; l < sched_.size(); ++l)
      t.layer.push_back(reinterpret_cast<uint64_t*>(dev + step_tables_offset(S)) + l * StepTables::words(S));
    t.nmax = std::move(nmax);
    return t;
  }
  // Entries layer l's KV source holds in sequence st after one more decode step (this step's compressor included).
  int64_t entries_after_step(const DeviceSequence& st, int l) const {
    const LayerRole& role = sched_[size_t(l)];
    const DeviceLayerState& src = st.layers[size_t(role.kv_source)];
    return kv::compress_counters(sched_[size_t(role.kv_source)].ratio, src.n_entries, src.n_pend, 1).entries;
  }
  // The step inputs of one decode step of seqs (ids[i] on seqs[i]) at their host counters, into host (pinned,
  // step_input_bytes(S)). Refuses a step past a sequence's capacity or a row beyond nmax entries.
  Status fill_step_inputs(std::span<DeviceSequence* const> seqs, std::span<const int32_t> ids, std::span<const int> nmax,
                          uint8_t* host) const {
    const int S = int(seqs.size()), L = s_.num_hidden_layers;
    const size_t ids_b = (size_t(S) * 4 + 7) / 8 * 8, hp = hash_cols();
    std::memcpy(host, ids.data(), size_t(S) * 4);
    auto* pos = reinterpret_cast<int64_t*>(host + ids_b);
    for (int t = 0; t < S; ++t) {
      if (seqs[size_t(t)]->pos + 1 > seqs[size_t(t)]->max_positions)
        return error(Code::out_of_range, "decode step: a sequence is at its capacity");
      pos[t] = seqs[size_t(t)]->pos;
    }
    if (hp) {
      auto* hash = reinterpret_cast<int64_t*>(host + ids_b + size_t(S) * 8);
      for (int t = 0; t < S; ++t)
        DSV41_TRY(engram::hash_ids(plan_, token_map_, s_.image_token_id, ids.subspan(size_t(t), 1), seqs[size_t(t)]->history,
                                   std::span<int64_t>(hash + size_t(t) * hp, hp)));
    }
    for (size_t l = 0; l < sched_.size(); ++l) {
      const LayerRole& role = sched_[l];
      uint64_t* tab = reinterpret_cast<uint64_t*>(host + step_tables_offset(S)) + l * StepTables::words(S);
      auto* n32 = reinterpret_cast<int32_t*>(tab + 4 * size_t(S));
      for (int t = 0; t < S; ++t) {
        const DeviceSequence& st = *seqs[size_t(t)];
        const DeviceLayerState& ls = st.layers[l];
        tab[t] = reinterpret_cast<uint64_t>(ls.ring);
        if (int(l) >= L || role.ratio == 0) continue;
        const DeviceLayerState& src = st.layers[size_t(role.kv_source)];
        const int64_t after = entries_after_step(st, int(l));
        if (after > src.cap) return error(Code::out_of_range, "decode step: compressed-entry capacity exceeded");
        if (after > nmax[l]) return error(Code::out_of_range, "decode step: past the entries the step was captured for");
        tab[size_t(S) + t] = reinterpret_cast<uint64_t>(src.comp);
        tab[2 * size_t(S) + t] = uint64_t(after);
        tab[3 * size_t(S) + t] = reinterpret_cast<uint64_t>(src.ikeys);
        n32[t] = int32_t(after);
        if (!role.compresses()) continue;
        auto col = [&](int k) { return tab + StepTables::comp_col(S, k); };
        col(0)[t] = reinterpret_cast<uint64_t>(ls.comp);
        col(1)[t] = reinterpret_cast<uint64_t>(ls.ikeys);
        col(2)[t] = reinterpret_cast<uint64_t>(ls.pend_kv);
        col(3)[t] = reinterpret_cast<uint64_t>(ls.pend_score);
        col(4)[t] = uint64_t(ls.n_entries);
        col(5)[t] = uint64_t(ls.n_pend);
      }
    }
    return Status::Ok();
  }
  // A decode batch over step inputs t (filled for seqs by fill_step_inputs before each replay). The forward leaves
  // the host counters as they are: advance_step moves them after each step.
  Status begin_decode_step(Batch& b, std::span<DeviceSequence* const> seqs, const StepTables& t, float* d_logits) const {
    const int S = int(seqs.size());
    for (int i = 0; i < S; ++i) b.begun.push_back(SequenceRows{seqs[size_t(i)], seqs[size_t(i)]->pos, i, 1});
    b.segs = b.begun;
    b.S = b.now = S;
    b.logits = d_logits;
    b.step = &t;
    b.in0 = t.in;
    return start_streams(b, S, 1);  // a decode batch keeps one candidate mask for all rows
  }
  // The host counters after one decode step of seqs (ids[i] on seqs[i]): what compress() and advance() change.
  void advance_step(std::span<DeviceSequence* const> seqs, std::span<const int32_t> ids) const {
    const size_t keep = size_t(std::max(s_.engram_max_ngram_size - 1, 0));
    for (size_t i = 0; i < seqs.size(); ++i) {
      DeviceSequence& st = *seqs[i];
      for (int l = 0; l < s_.num_hidden_layers; ++l) {
        const LayerRole& role = sched_[size_t(l)];
        if (!role.compresses()) continue;
        DeviceLayerState& ls = st.layers[size_t(l)];
        const kv::CompressCounters c = kv::compress_counters(role.ratio, ls.n_entries, ls.n_pend, 1);
        ls.n_entries = c.entries;
        ls.n_pend = c.pending;
      }
      ++st.pos;
      st.history.push_back(ids[i]);
      if (st.history.size() > keep) st.history.erase(st.history.begin(), st.history.end() - std::ptrdiff_t(keep));
    }
  }

  // Several sequences' rows in one forward: lengths[i] rows of ids (in order) at seqs[i]'s next positions.
  // d_logits: device [B, V] (each sequence's last row; with all_logits [rows, V]) or null.
  Status begin_rows(Batch& b, std::span<DeviceSequence* const> seqs, std::span<const int> lengths,
                    std::span<const int32_t> ids, bool all_logits, float* d_logits) const {
    std::vector<std::span<const int32_t>> hist;
    int row0 = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      b.begun.push_back(SequenceRows{seqs[i], seqs[i]->pos, row0, lengths[i]});
      hist.emplace_back(seqs[i]->history);
      row0 += lengths[i];
    }
    return start(b, ids, hist, nullptr, all_logits, d_logits);
  }

  // Runs f; on error the sequences' host counters are put back, and where any sequence ran several rows every
  // sequence of the batch is marked damaged (ring slots or pending rows may be overwritten; a snapshot restores it).
  template <class F>
  Status guarded(std::span<DeviceSequence* const> seqs, std::span<const int32_t> ids, F&& f) const {
    std::vector<std::vector<std::pair<int64_t, int>>> saved(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i)
      for (const auto& ls : seqs[i]->layers) saved[i].emplace_back(ls.n_entries, ls.n_pend);
    Status r = f();
    if (r.ok()) return r;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto& L = seqs[i]->layers;
      for (size_t l = 0; l < L.size(); ++l) std::tie(L[l].n_entries, L[l].n_pend) = saved[i][l];
      if (ids.size() > seqs.size()) seqs[i]->damaged = true;
    }
    return r;
  }

  // Positions and Engram histories after the batch's rows.
  Status advance(Batch& b) const {
    const size_t keep = size_t(std::max(s_.engram_max_ngram_size - 1, 0));
    for (const SequenceRows& g : b.begun) {
      g.st->pos = g.p0 + g.n;
      auto& h = g.st->history;
      h.insert(h.end(), b.ids.begin() + g.row0, b.ids.begin() + g.row0 + g.n);
      if (h.size() > keep) h.erase(h.begin(), h.end() - std::ptrdiff_t(keep));
    }
    return Status::Ok();
  }

  // ---- the stack's steps ----

  // Embeddings of the ids on the hc streams; image span rows take the image_* vectors and the aligner rows
  // (SPEC §4.10, cpu::merge_image_spans), one launch over the spans' rows.
  Status embed(Batch& b) const {
    mark("embed");
    glue::embed_kernel<<<b.S, 128, 0, stream_>>>(w_.embed.bf16(), b.in.ids, s_.hc_mult, s_.hidden_size, b.H, b.pre);
    DSV41_TRY(launch_status("embed"));
    if (b.images.empty()) return Status::Ok();
    const SpanTable t = span_table(s_, b.images, b.segs[0].p0);
    uint8_t* dev = nullptr;
    DSV41_TRY(b.fs.get(dev, t.bytes.size()));
    DSV41_TRY(put_bytes(t.bytes.data(), t.bytes.size(), dev));
    vision_detail::span_rows_kernel<<<unsigned(t.R), 128, 0, stream_>>>(
        reinterpret_cast<const int32_t*>(dev), reinterpret_cast<const int32_t*>(dev + t.src_off),
        reinterpret_cast<const bf16_t*>(dev + t.embeds_off), vision_.vecs, s_.hc_mult, s_.hidden_size, b.H);
    return launch_status("image spans");
  }

  // The image spans of the batch's rows (blocks::forward checked them with check_image_spans).
  Status set_images(Batch& b, std::span<const ImageSpan> spans) const {
    if (!spans.empty() && !vision_.loaded) return error(Code::unsupported, "forward: this model has no vision weights");
    if (!spans.empty() && b.begun.size() != 1) return error(Code::invalid_argument, "forward: images in one sequence");
    b.images = spans;
    return Status::Ok();
  }

  // ---- vision (SPEC §4.10; blocks/vision.hpp): gpu::vision's ops on the model's stream ----

  Result<VisionWork> vision_work(const ImageInput& in) const { return vision_work_for(vision_, in); }
  Status patch_embed(VisionWork& w, const ImageInput& in) const {
    DSV41_CUDA_TRY(cudaMemcpyAsync(w.patches, in.patches.data(), in.patches.size() * 2, cudaMemcpyHostToDevice, stream_),
                   "vision patches");
    return vision::patch_embed(*w.ws, vision_.w, w.patches, w.n, w.ws->x, stream_);
  }
  Status vision_norm(int l, int k, VisionWork& w) const {
    const vision::Block& B = vision_.w.blocks[size_t(l)];
    return vision::norm(vision_.w.dims, k == 1 ? B.norm1 : B.norm2, w.ws->x, w.n, w.ws->h, stream_);
  }
  Status vision_qkv(int l, VisionWork& w) const {
    return vision::qkv(*w.ws, vision_.w.dims, vision_.w.blocks[size_t(l)], w.ws->h, w.n, w.ws->qkv, stream_);
  }
  Status vision_rope2d(VisionWork& w) const { return vision::rope2d(vision_.w.dims, w.ws->qkv, w.nh, w.nw, stream_); }
  // P·V with P as a BF16 hi/lo pair (vision::AttnOpts' default): the reference's FP32 probabilities.
  Status vision_attention(VisionWork& w) const {
    return vision::attention(vision_.w.dims, w.ws->qkv, w.n, w.ws->att, stream_);
  }
  Status vision_wo(int l, VisionWork& w) const {
    return vision::wo(*w.ws, vision_.w.dims, vision_.w.blocks[size_t(l)], w.ws->att, w.n, w.ws->x, stream_);
  }
  Status vision_mlp(int l, VisionWork& w) const {
    return vision::mlp(*w.ws, vision_.w.dims, vision_.w.blocks[size_t(l)], w.ws->h, w.n, w.ws->x, stream_);
  }
  Status vision_final_norm(VisionWork& w) const { return vision::final_norm(vision_.w, w.ws->x, w.n, w.tower, stream_); }
  Status vision_merge(VisionWork& w) const {
    return vision::merge(vision_.w.dims, w.tower, w.nh, w.nw, w.ws->cells, stream_);
  }
  Status vision_aligner(VisionWork& w) const {
    return vision::aligner(*w.ws, vision_.w, w.ws->cells, w.cells, w.embeds, stream_);
  }
  Status vision_read(VisionWork& w, VisionResult& out) const { return read_vision(vision_, w, stream_, out); }

  // Keeps the last rows from off on (SPEC §5 decoder bounded replay; one sequence).
  Status keep_tail(Batch& b, int off) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, nt = std::max(n_taps(), 1), K = s_.index_topk;
    b.off += off;
    b.now -= off;
    b.segs[0].p0 += off;
    b.segs[0].n -= off;
    b.H += size_t(off) * hc * d;
    b.pre += size_t(off) * hc;
    b.taps += size_t(off) * nt * d;
    b.in.ids += off;
    b.in.pos += off;
    if (b.in.hash) b.in.hash += size_t(off) * hash_cols();
    for (auto& p : b.handoff.lists)
      if (p) p += size_t(off) * K;
    CandidateMask& c = b.handoff.cand[0];
    if (c.has) {
      c.sel += size_t(off) * c.nb;
      c.vis += off;
    }
    return Status::Ok();
  }

  // Logits of every row (all_logits, or a decode batch) or of each sequence's last row.
  Status head(Batch& b) const {
    mark("head");
    if (!b.logits) return Status::Ok();
    const int hc = s_.hc_mult, d = s_.hidden_size, V = s_.vocab_size;
    if (b.all_logits && b.off > 0) return error(Code::unsupported, "CUDA forward: all_logits with bounded replay");
    const bool every_row = b.all_logits || std::all_of(b.segs.begin(), b.segs.end(), [](const SequenceRows& g) { return g.n == 1; });
    if (every_row) return head_rows(b.H, b.pre, b.now, b.logits);
    for (size_t i = 0; i < b.segs.size(); ++i) {
      const int last = b.segs[i].row0 + b.segs[i].n - 1;
      DSV41_TRY(head_rows(b.H + size_t(last) * hc * d, b.pre + size_t(last) * hc, 1, b.logits + i * size_t(V)));
    }
    return Status::Ok();
  }

  Status observe_taps(Batch& b) const {
    if (b.hooks && b.hooks->taps && n_taps() > 0) return hook_taps(b.hooks, b.begun[0].p0, b.S, b.taps0);
    return Status::Ok();
  }

  Status seed_dspark(Batch& b) const {
    mark("dspark seed");
    return DsparkOps::seed_dspark(b.begun, b.taps0, b.in0.pos, b.step);
  }

  // ---- the layer unit's steps ----

  Status observe_unit(int l, Batch& b, UnitPoint at) const {
    if (!b.hooks) return Status::Ok();
    const bool input = at == UnitPoint::input;
    if ((input && b.hooks->unit_input) || (!input && b.hooks->unit_output))
      return hook_unit(b.hooks, input, l, b.segs[0].p0, b.now, b.H, b.pre);
    return Status::Ok();
  }

  Status engram(int l, Batch& b) const {
    mark("engram");
    return UnitOps::engram(layers_[size_t(l)], sched_[size_t(l)].engram_slot, b.in.hash, b.in.ids, b.H, b.now, comm_);
  }

  Status dspark_tap(int l, Batch& b) const {
    glue::taps_kernel<<<glue::blocks_for(int64_t(b.now) * s_.hidden_size), glue::kThreads, 0, stream_>>>(
        b.H, b.now, s_.hc_mult, s_.hidden_size, n_taps(), sched_[size_t(l)].tap_slot, b.taps);
    return launch_status("taps");
  }

  // ---- mHC and MoE ----

  Result<BlockWork> block_work(int rows) const { return make_block_work(rows); }
  Status mhc_pre(int l, const Streams& s, BlockWork& w) const { return mhc_first<kStaticHc>(l, s, w); }
  Status mhc_seam(int l, const Streams& s, BlockWork& w) const { return mhc_second<kStaticHc>(l, s, w); }
  Status mhc_post(int, const Streams& s, BlockWork& w) const { return mhc_last(s, w); }
  Status moe(int l, const int32_t* tokens, const bf16_t* x, bf16_t* out, int rows) const {
    mark("moe");
    return moe_rows(sched_[size_t(l)], layers_[size_t(l)], x, tokens, rows, out, comm_);
  }

  // ---- CSA2 attention ----

  Result<AttentionWork> attention_work(int, Batch&) const { return AttentionWork(scratch()); }
  Status queries(int l, Batch& b, const bf16_t* x, AttentionWork& w) const { return attn_queries(l, b, x, w); }
  Status window_entries(int l, Batch& b, const bf16_t*, AttentionWork& w, const StackPass& pass) const {
    return attn_window_entries(l, b, w, pass);
  }
  Status compress(int l, Batch& b, const bf16_t* x, AttentionWork& w) const { return attn_compress(l, b, x, w); }
  Status index_select(int l, Batch& b, const bf16_t* x, AttentionWork& w) const { return attn_index<Kernels>(l, b, x, w); }
  Status sparse_attention(int l, Batch& b, AttentionWork& w, bool reads_compressed, const StackPass&) const {
    return attn_sparse<Kernels>(l, b, w, reads_compressed);
  }
  Status output_projection(int l, Batch& b, AttentionWork& w, bf16_t* out) const { return attn_output(l, b, w, out); }

  // ---- DSpark ----

  Result<DraftWork> draft_block(const DeviceSequence&, int32_t y) const { return make_draft_block(y); }
  Status observe_stage(const ForwardHooks* hooks, int k, const Streams& s) const {
    if (!hooks || !hooks->draft_stage) return Status::Ok();
    return with_host_streams(s.rows, s.H, s.pre, true,
                             [&](float* H, float* pre) { hooks->draft_stage(hooks->ctx, k, s.rows, H, pre); });
  }
  Status draft_attention(const DeviceSequence& st, int l, const bf16_t* x, int64_t p, bf16_t* out) const {
    return DsparkOps::draft_attention(st, l, x, p, out);
  }
  Status draft_head(DraftWork& d, const DraftBuffers& out) const { return draft_outputs(d, out); }
  Status draft_head(DraftWork& d, DraftResult& out) const { return draft_outputs(d, out); }

 private:
  static constexpr int kStaticHc = [] {
    if constexpr (Sizes::is_static) return Sizes::hc;
    else return 0;
  }();

  Ops(const ModelShape& s, engram::Setup eg, cudaStream_t stream) : DsparkOps(s, std::move(eg), stream) {}

  size_t step_tables_offset(int S) const { return (size_t(S) * 4 + 7) / 8 * 8 + size_t(S) * 8 * (1 + hash_cols()); }

  VisionModel vision_;  // SPEC §4.10 the vision tower, aligner and image_* vectors (empty without vision)
  parallel::Plan par_;                      // world 1 unless set_parallel
  parallel::Communicator* comm_ = nullptr;

  // The batch's inputs on the device, its residual streams and taps.
  Status start(Batch& b, std::span<const int32_t> ids, std::span<const std::span<const int32_t>> histories,
               const ForwardHooks* hooks, bool all_logits, float* d_logits) const {
    const int S = int(ids.size());
    if (hooks && b.begun.size() != 1) return error(Code::invalid_argument, "CUDA forward: hooks take one sequence");
    b.segs = b.begun;
    b.ids = ids;
    b.S = b.now = S;
    b.hooks = hooks;
    b.all_logits = all_logits;
    b.logits = d_logits;
    DSV41_TRY(put_rows(b.begun, histories, ids, b.fs, hooks, b.in0));
    return start_streams(b, S, b.begun.size());
  }

  // The batch's residual streams, taps and handoff for S rows (n_cand candidate masks), in its scratch.
  Status start_streams(Batch& b, int S, size_t n_cand) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, nt = std::max(n_taps(), 1);
    b.in = b.in0;
    DSV41_TRY(b.fs.get(b.H0, size_t(S) * hc * d));
    DSV41_TRY(b.fs.get(b.pre0, size_t(S) * hc));
    DSV41_TRY(b.fs.get(b.taps0, size_t(S) * nt * d));
    b.H = b.H0;
    b.pre = b.pre0;
    b.taps = b.taps0;
    b.handoff.lists.assign(sched_.size(), nullptr);
    b.handoff.cand.assign(n_cand, CandidateMask{});
    return Status::Ok();
  }

  // Token ids, positions and Engram row ids of every row to the device, in one buffer.
  Status put_rows(std::span<const SequenceRows> segs, std::span<const std::span<const int32_t>> histories,
                  std::span<const int32_t> ids, Scratch& fs, const ForwardHooks* hooks, RowInputs& in) const {
    const size_t S = ids.size(), hp = hash_cols();
    const size_t ids_b = (S * 4 + 7) / 8 * 8, pos_b = S * 8, hash_b = S * hp * 8;
    std::vector<uint8_t> host(ids_b + pos_b + hash_b);
    std::memcpy(host.data(), ids.data(), S * 4);
    auto* pos = reinterpret_cast<int64_t*>(host.data() + ids_b);
    for (const SequenceRows& g : segs)
      for (int t = 0; t < g.n; ++t) pos[g.row0 + t] = g.p0 + t;
    if (hp) {
      auto* hash = reinterpret_cast<int64_t*>(host.data() + ids_b + pos_b);
      for (size_t i = 0; i < segs.size(); ++i) {
        const SequenceRows& g = segs[i];
        std::span<int64_t> out(hash + size_t(g.row0) * hp, size_t(g.n) * hp);
        DSV41_TRY(engram::hash_ids(plan_, token_map_, s_.image_token_id, ids.subspan(size_t(g.row0), size_t(g.n)),
                                   histories[i], out));
        if (hooks && hooks->engram_ids) hooks->engram_ids(hooks->ctx, g.p0, g.n, int(hp), out.data());
      }
    }
    uint8_t* dev = nullptr;
    DSV41_TRY(fs.get(dev, host.size()));
    DSV41_TRY(put_bytes(host.data(), host.size(), dev));
    in.ids = reinterpret_cast<int32_t*>(dev);
    in.pos = reinterpret_cast<int64_t*>(dev + ids_b);
    in.hash = hp ? reinterpret_cast<int64_t*>(dev + ids_b + pos_b) : nullptr;
    return Status::Ok();
  }

};

// The GPU model's ops for runtime shapes (configs::Dynamic): what benches and tools drive directly.
using Forward = Ops<configs::Dynamic>;

}  // namespace dsv41::gpu

namespace dsv41 {
struct Cuda;
template <class Backend, class Config>
struct BackendOps;
template <class Config>
struct BackendOps<Cuda, Config> {
  using type = gpu::Ops<Config>;
};
}  // namespace dsv41
