// gpu::ForwardT: the forward pass on the GPU (SPEC §4), assembled from the kernels of include/dsv41/backend/cuda/kernels/.
// Weights are uploaded once (FP8/FP4 bytes and their scales as stored, BF16 as bf16, FP32 vectors); forward /
// draft / head have the semantics and rounding points of cpu::Forward. Per-sequence state lives on the device
// (gpu::DeviceSequence).
//
// Work runs on the stream given at creation. Scratch memory comes from the model's own stream-ordered pool,
// so a decode step makes no device synchronization except the final copy of logits (or draft lists) the
// caller asks for; the device-pointer overloads make none. Hooks (the golden check) copy rows to the host
// and back: a debug path that synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/rope.hpp>
#include <dsv41/blocks/weights.hpp>
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_f32.cuh>
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/backend/cuda/kernels/moe.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/backend/cuda/kernels/rmsnorm.cuh>
#include <dsv41/backend/cuda/kernels/rope.cuh>
#include <dsv41/engram/hash.hpp>
#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/device_weights.hpp>
#include <dsv41/backend/cuda/op_timer.hpp>
#include <dsv41/backend/cuda/sequence.hpp>

#define DSV41_HAS_FORWARD_BATCH 1

namespace dsv41::gpu {

template <class = void>
class ForwardT {
 public:
  ForwardT(const ForwardT&) = delete;
  ForwardT& operator=(const ForwardT&) = delete;
  ~ForwardT() {
    if (pool_) cudaMemPoolDestroy(pool_);
  }

  // Uploads the bound weights (host views of a checkpoint) once; host memory is not needed afterwards.
  static Result<std::unique_ptr<ForwardT>> create(const ModelShape& s, const Weights& hw, std::vector<int32_t> token_map,
                                                  engram::HashPlan plan, cudaStream_t stream) {
    std::unique_ptr<ForwardT> f(new ForwardT(s, std::move(token_map), std::move(plan), stream));
    DSV41_TRY(f->check_shape());
    int dev = 0;
    DSV41_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    DSV41_CUDA_TRY(cudaMemPoolCreate(&f->pool_, &props), "cudaMemPoolCreate");
    uint64_t keep = ~uint64_t(0);  // keep freed blocks in the pool (no return to the driver between steps)
    DSV41_CUDA_TRY(cudaMemPoolSetAttribute(f->pool_, cudaMemPoolAttrReleaseThreshold, &keep), "pool attribute");
    DSV41_TRY(f->upload(hw));
    return Result<std::unique_ptr<ForwardT>>(std::move(f));
  }

  const ModelShape& shape() const { return s_; }
  const std::vector<LayerRole>& schedule() const { return sched_; }
  cudaStream_t stream() const { return stream_; }
  size_t weight_bytes() const { return wmem_.bytes(); }

  // A fresh sequence able to hold max_positions tokens (allocates; synchronizes once).
  Result<DeviceSequence> new_sequence(int64_t max_positions) const {
    if (max_positions < 1) return error(Code::invalid_argument, "new_sequence: max_positions < 1");
    DeviceSequence q;
    q.max_positions = max_positions;
    q.owner_ = this;
    q.layers.resize(sched_.size());
    const int W = s_.sliding_window, D = s_.head_dim, dI = s_.index_head_dim;
    const int we = num::window_entry_size(D), me = num::main_entry_size(D), ie = num::index_entry_size(dI);
    for (const auto& r : sched_) {
      DeviceLayerState& ls = q.layers[r.id];
      DSV41_TRY(q.mem_.alloc(ls.ring, size_t(W) * we));
      DSV41_CUDA_TRY(cudaMemset(ls.ring, 0, size_t(W) * we), "ring init");
      q.window_bytes_ += size_t(W) * we;
      if (r.mode == AttnMode::Full) {
        ls.cap = max_positions / r.ratio;
        DSV41_TRY(q.mem_.alloc(ls.comp, size_t(ls.cap) * me));
        DSV41_TRY(q.mem_.alloc(ls.ikeys, size_t(ls.cap) * ie));
        q.global_bytes_ += size_t(ls.cap) * (me + ie);
        if (r.ratio > 1) {
          DSV41_TRY(q.mem_.alloc(ls.pend_kv, size_t(r.ratio) * D));
          DSV41_TRY(q.mem_.alloc(ls.pend_z, size_t(r.ratio) * D));
        }
      }
    }
    return Result<DeviceSequence>(std::move(q));
  }

  // Runs ids at positions st.pos.. and advances the state. d_logits: device [rows, V] FP32, rows = S when
  // o.all_logits else 1 (nullptr: no logits). No synchronization unless hooks are given. o.bounded_replay:
  // SPEC §5 Decoder SWA Bounded Replay, as cpu::Forward.
  Status forward(DeviceSequence& st, std::span<const int32_t> ids, const ForwardOptions& o, float* d_logits) const {
    DSV41_TRY(check_input(st, ids));
    Seg g{&st, st.pos, 0, int(ids.size())};
    return run(std::span<const Seg>(&g, 1), ids, o, d_logits, Pass{});
  }

  // One decode step of several sequences, each at its own position: ids[b] runs on *seqs[b]. d_logits:
  // device [B, V] FP32 (nullptr: none). One forward over B rows: the weight-side work (projections, MoE,
  // mHC, head) runs once for the batch; the cache-side work (window entries, compressor, indexer,
  // attention) runs per sequence. No synchronization.
  Status forward_batch(std::span<DeviceSequence* const> seqs, std::span<const int32_t> ids, float* d_logits) const {
    if (seqs.empty() || seqs.size() != ids.size())
      return error(Code::invalid_argument, "forward_batch: one token per sequence, at least one");
    std::vector<Seg> g(seqs.size());
    for (size_t b = 0; b < seqs.size(); ++b) {
      if (!seqs[b]) return error(Code::invalid_argument, "forward_batch: null sequence");
      for (size_t c = 0; c < b; ++c)
        if (seqs[c] == seqs[b]) return error(Code::invalid_argument, "forward_batch: a sequence appears twice");
      DSV41_TRY(check_input(*seqs[b], ids.subspan(b, 1)));
      g[b] = Seg{seqs[b], seqs[b]->pos, int(b), 1};
    }
    return run(g, ids, ForwardOptions{}, d_logits, Pass{});
  }

  // SPEC §5 Encoder SWA Bounded Replay: rebuilds every window ring (and the DSpark rings) of a sequence whose
  // rings were dropped, from its last tokens and the stored global KV; positions do not advance. recent: the
  // sequence's last tokens, at least min(pos, W + N − 1). d_logits: device [V] of the last row (or nullptr).
  Status replay_window(DeviceSequence& st, std::span<const int32_t> recent, float* d_logits,
                       const ForwardHooks* hooks = nullptr) const {
    auto split = split_replay(s_, st.pos, recent);
    if (!split.ok()) return split.status();
    const auto [S, rows, before] = *split;
    if (st.owner() != this || st.layers.size() != sched_.size())
      return error(Code::invalid_argument, "replay_window: sequence made by another model");
    if (st.damaged) return error(Code::invalid_argument, "replay_window: the sequence was damaged by an earlier error");
    for (int32_t id : rows)
      if (id < 0 || id >= s_.vocab_size) return error(Code::invalid_argument, "replay_window: token outside the vocabulary");
    const int64_t pos = st.pos;
    std::vector<int32_t> hist = st.history;
    st.history.assign(before.begin(), before.end());
    Seg g{&st, pos - S, 0, S};
    Pass replay;
    replay.window_floor = pos - S;
    replay.compress = false;
    replay.advance = false;
    ForwardOptions fo;
    fo.hooks = hooks;
    Status r = run(std::span<const Seg>(&g, 1), rows, fo, d_logits, replay);
    st.history = std::move(hist);
    return r;
  }

  // Per-section GPU timing of later forwards (a diagnostic, op_timer.hpp); nullptr turns it off.
  void set_timer(OpTimer* t) { timer_ = t; }

  // Forgets the window rings (SequenceState::drop_windows' counterpart); replay_window rebuilds them.
  Status drop_windows(DeviceSequence& st) const {
    const size_t rb = size_t(s_.sliding_window) * num::window_entry_size(s_.head_dim);
    for (auto& ls : st.layers)
      if (ls.ring) DSV41_CUDA_TRY(cudaMemsetAsync(ls.ring, 0, rb, stream_), "drop windows");
    return Status::Ok();
  }

  // Host version of markov_bias (cpu::Forward's interface: generate's speculative sampling). Synchronizes.
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
      mk::markov_add_kernel<<<mk::blocks_for(V), mk::kThreads, 0, stream_>>>(
          last.markov_embed.bf16(), last.markov_head.bf16(), d_t, 0, V, s_.dspark_markov_rank, d_b);
      DSV41_TRY(launch_status("markov bias"));
      DSV41_CUDA_TRY(cudaMemcpyAsync(bias.data(), d_b, size_t(V) * 4, cudaMemcpyDeviceToHost, stream_), "markov bias");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "markov bias");
    return Status::Ok();
  }

  // The same with the logits copied to res.logits (the one synchronization). res.taps stays empty.
  Status forward(DeviceSequence& st, std::span<const int32_t> ids, ForwardResult& res, bool all_logits = false,
                 const ForwardHooks* hooks = nullptr) const {
    ForwardOptions o;
    o.all_logits = all_logits;
    o.hooks = hooks;
    const int rows = all_logits ? int(ids.size()) : 1;
    const size_t n = size_t(rows) * s_.vocab_size;
    float* d = nullptr;
    {
      Scratch sc(pool_, stream_);
      DSV41_TRY(sc.get(d, n));
      DSV41_TRY(forward(st, ids, o, d));
      res.logits.resize(n);
      res.taps.clear();
      DSV41_CUDA_TRY(cudaMemcpyAsync(res.logits.data(), d, n * 4, cudaMemcpyDeviceToHost, stream_), "logits copy");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "forward");
    return Status::Ok();
  }

  // §4.9 DSpark draft after the main model predicted y for position st.pos. Device outputs, no synchronization.
  Status draft(const DeviceSequence& st, int32_t y, const DraftBuffers& out) const {
    const int B = s_.dspark_block_size, hc = s_.hc_mult, d = s_.hidden_size, L = s_.num_hidden_layers;
    const int V = s_.vocab_size, R = s_.dspark_markov_rank;
    if (s_.n_dspark() == 0) return error(Code::unsupported, "draft: this model has no DSpark stages");
    if (st.owner() != this) return error(Code::invalid_argument, "draft: sequence made by another model");
    if (st.pos == 0) return error(Code::invalid_argument, "draft: run the prompt first");
    if (y < 0 || y >= V) return error(Code::invalid_argument, "draft: token outside the vocabulary");
    const int64_t p = st.pos - 1;
    Scratch sc(pool_, stream_);
    std::vector<int32_t> bids(size_t(B), s_.dspark_noise_token_id);
    bids[0] = y;
    int32_t* d_bids = nullptr;
    DSV41_TRY(sc.get(d_bids, B));
    DSV41_TRY(put_bytes(bids.data(), size_t(B) * 4, d_bids));
    bf16_t *H = nullptr, *xb = nullptr, *xn = nullptr;
    float* pre = nullptr;
    DSV41_TRY(sc.get(H, size_t(B) * hc * d));
    DSV41_TRY(sc.get(pre, size_t(B) * hc));
    DSV41_TRY(sc.get(xb, size_t(B) * d));
    DSV41_TRY(sc.get(xn, size_t(B) * d));
    mk::embed_kernel<<<B, 128, 0, stream_>>>(w_.embed.bf16(), d_bids, hc, d, H, pre);
    DSV41_TRY(launch_status("draft embed"));
    for (int stage = 0; stage < s_.n_dspark(); ++stage) {
      const int l = L + stage;
      DSV41_TRY(block(l, H, pre, nullptr, B, [&](const bf16_t* x, bf16_t* o) { return draft_attention(st, l, x, p, o); }));
    }
    const DLayer& last = layers_[L + s_.n_dspark() - 1];
    mk::collapse_norm_kernel<<<B, 128, size_t(d) * 4, stream_>>>(H, pre, hc, hc, d, last.norm, eps(), xb, xn);
    DSV41_TRY(launch_status("draft collapse"));
    DSV41_TRY(linear_bf16(xn, B, w_.head, out.logits, nullptr, V));
    DSV41_CUDA_TRY(cudaMemcpyAsync(out.ids, d_bids, 4, cudaMemcpyDeviceToDevice, stream_), "draft y");
    for (int i = 0; i < B; ++i) {
      mk::markov_add_kernel<<<mk::blocks_for(V), mk::kThreads, 0, stream_>>>(
          last.markov_embed.bf16(), last.markov_head.bf16(), out.ids, i, V, R, out.logits + size_t(i) * V);
      mk::argmax_kernel<<<1, 1024, 0, stream_>>>(out.logits + size_t(i) * V, V, out.ids + i + 1);
    }
    DSV41_TRY(launch_status("draft markov"));
    mk::confidence_kernel<<<B, 128, 0, stream_>>>(xb, last.markov_embed.bf16(), out.ids, last.conf_proj.bf16(), d, R,
                                                   out.confidence);
    return launch_status("draft confidence");
  }

  // The same into host vectors (synchronizes).
  Status draft(const DeviceSequence& st, int32_t y, DraftResult& res) const {
    const int B = s_.dspark_block_size, V = s_.vocab_size;
    {
      Scratch sc(pool_, stream_);
      DraftBuffers b;
      DSV41_TRY(sc.get(b.ids, size_t(B) + 1));
      DSV41_TRY(sc.get(b.logits, size_t(B) * V));
      DSV41_TRY(sc.get(b.confidence, size_t(B)));
      DSV41_TRY(draft(st, y, b));
      res.ids.resize(size_t(B) + 1);
      res.logits.resize(size_t(B) * V);
      res.confidence.resize(size_t(B));
      DSV41_CUDA_TRY(cudaMemcpyAsync(res.ids.data(), b.ids, (size_t(B) + 1) * 4, cudaMemcpyDeviceToHost, stream_), "draft copy");
      DSV41_CUDA_TRY(cudaMemcpyAsync(res.logits.data(), b.logits, size_t(B) * V * 4, cudaMemcpyDeviceToHost, stream_),
                     "draft copy");
      DSV41_CUDA_TRY(cudaMemcpyAsync(res.confidence.data(), b.confidence, size_t(B) * 4, cudaMemcpyDeviceToHost, stream_),
                     "draft copy");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "draft");
    return Status::Ok();
  }

  // Head of device rows: logits [rows, V] FP32 = head(norm(hc_pre(H, pre))).
  Status head_rows(const bf16_t* H, const float* pre, int rows, float* logits) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    Scratch sc(pool_, stream_);
    bf16_t* xn = nullptr;
    DSV41_TRY(sc.get(xn, size_t(rows) * d));
    mk::collapse_norm_kernel<<<rows, 128, size_t(d) * 4, stream_>>>(H, pre, hc, hc, d, w_.norm, eps(), nullptr, xn);
    DSV41_TRY(launch_status("head collapse"));
    return linear_bf16(xn, rows, w_.head, logits, nullptr, s_.vocab_size);
  }

  // cpu::Forward::head's interface (host arrays; the golden check's head test). Synchronizes; NaN on error.
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

 private:
  // One sequence's rows within a forward: rows [row0, row0 + n) at positions p0.. of *st.
  struct Seg {
    DeviceSequence* st = nullptr;
    int64_t p0 = 0;
    int row0 = 0, n = 0;
  };
  struct Pass {
    int64_t window_floor = 0;  // window entries below this position are not attended
    bool compress = true;      // Full layers add compressed entries (false when replaying stored ones)
    bool advance = true;       // positions and history advance (false when replaying)
  };
  // What index sources hand down the stack within one forward (device arrays in the forward's scratch).
  struct Cand {
    uint8_t* sel = nullptr;  // [n, nb] candidate blocks of the candidate source, rows of one segment
    int* vis = nullptr;      // [n] its visible entries per row
    int nb = 1;
    bool has = false;
  };
  struct Shared {
    Scratch* fs = nullptr;
    std::vector<int32_t*> lists;  // per layer: [S, index_topk]
    std::vector<Cand> cand;       // per segment
  };
  // Device inputs of a forward: token ids, positions and Engram row ids of every row.
  struct Inputs {
    int32_t* ids = nullptr;  // [S]
    int64_t* pos = nullptr;  // [S]
    int64_t* hash = nullptr; // [S, n_engram_layers·cols] or null
  };

  ForwardT(const ModelShape& s, std::vector<int32_t> token_map, engram::HashPlan plan, cudaStream_t stream)
      : s_(s), sched_(make_schedule(s)), token_map_(std::move(token_map)), plan_(std::move(plan)), stream_(stream) {}

  // From this many rows on, the FP32-accumulating linears use the tiled kernel (gemm_f32.cuh); below, one warp
  // per output streams each weight row once. wo_a (33.5 MB at release widths) reaches the warp kernel's time
  // later than the head (1.3 GB): measured on the H200 layer stack, batch 8 was faster with the warp kernel.
  // Below kTiledMinCtas tiles (narrow outputs: the ratio-2 compressor's 512 FP32 columns) the tiled kernel
  // leaves most of the GPU idle, and the warp kernel is used too.
  static constexpr int kTiledRows = 4, kTiledRowsWoA = 17, kTiledMinCtas = 128;
  float eps() const { return float(s_.rms_norm_eps); }
  void mark(const char* name) const {
    if (timer_) timer_->mark(name, stream_);
  }
  int n_taps() const { return int(s_.dspark_target_layer_ids.size()); }

  Status check_shape() const {
    const ModelShape& s = s_;
    auto bad = [](const std::string& m) { return error(Code::unsupported, "CUDA forward: " + m); };
    if (s.hc_mult != 4) return bad("hc_mult must be 4");
    if (s.hidden_size % 64 || s.moe_intermediate_size % 64) return bad("hidden_size and moe_intermediate_size % 64");
    if (s.head_dim % 32 || s.q_lora_rank % 32 || s.index_head_dim % 32 || s.engram_head_dim % 32)
      return bad("head_dim, q_lora_rank, index_head_dim, engram_head_dim % 32");
    if (s.hidden_size > 8192 || s.head_dim > 1024) return bad("hidden_size ≤ 8192, head_dim ≤ 1024");
    if ((s.num_attention_heads * s.head_dim) % s.o_groups || ((s.num_attention_heads * s.head_dim) / s.o_groups) % 32)
      return bad("o_groups must split H·D into multiples of 32");
    if (s.o_groups * s.o_lora_rank % 32) return bad("o_groups·o_lora_rank % 32");
    return Status::Ok();
  }

  Status check_input(const DeviceSequence& st, std::span<const int32_t> ids) const {
    if (st.owner() != this || st.layers.size() != sched_.size())
      return error(Code::invalid_argument, "forward: sequence made by another model");
    if (st.damaged)
      return error(Code::invalid_argument, "forward: the sequence was damaged by an earlier failed forward; restore a snapshot");
    return check_tokens(s_, ids, st.pos + int64_t(ids.size()), st.max_positions);
  }

  // ---- weights ----
  Status up_linear(const Linear& h, DLinear& d) {
    d.kind = h.kind;
    d.out = h.out;
    d.in = h.in;
    if (h.kind == WKind::None || !h.w) return Status::Ok();
    size_t wb = 0, sb = 0;
    switch (h.kind) {
      case WKind::BF16: wb = size_t(h.out) * h.in * 2; break;
      case WKind::F32: wb = size_t(h.out) * h.in * 4; break;
      case WKind::FP8: wb = size_t(h.out) * h.in; sb = size_t((h.out + 31) / 32) * ((h.in + 31) / 32); break;
      case WKind::FP4: wb = size_t(h.out) * h.in / 2; sb = size_t(h.out) * (h.in / 32); break;
      case WKind::None: break;
    }
    DSV41_TRY(wmem_.upload(d.w, h.w, wb, *up_));
    if (sb) DSV41_TRY(wmem_.upload(d.s, h.s, sb, *up_));
    return Status::Ok();
  }
  Status up_vec(const std::vector<float>& v, const float*& d) {
    if (v.empty()) { d = nullptr; return Status::Ok(); }
    return wmem_.upload(d, v.data(), v.size(), *up_);
  }
  // Routed experts' matrix m (0 = w1, 1 = w2, 2 = w3) of every expert, packed at fixed strides.
  Status up_experts(const std::vector<std::array<Linear, 3>>& ex, int m, const uint8_t*& w, const uint8_t*& s,
                    int64_t& gw, int64_t& gs) {
    if (ex.empty()) return Status::Ok();
    const Linear& l0 = ex[0][m];
    gw = int64_t(l0.out) * l0.in / 2;
    gs = int64_t(l0.out) * (l0.in / 32);
    uint8_t *dw = nullptr, *ds = nullptr;
    DSV41_TRY(wmem_.alloc(dw, size_t(gw) * ex.size()));
    DSV41_TRY(wmem_.alloc(ds, size_t(gs) * ex.size()));
    for (size_t e = 0; e < ex.size(); ++e) {
      const Linear& l = ex[e][m];
      if (l.kind != WKind::FP4 || l.out != l0.out || l.in != l0.in || !l.w || !l.s)
        return error(Code::format_error, "CUDA upload: routed experts must be FP4 of one shape");
      DSV41_TRY(up_->copy(dw + e * size_t(gw), l.w, size_t(gw)));
      DSV41_TRY(up_->copy(ds + e * size_t(gs), l.s, size_t(gs)));
    }
    w = dw;
    s = ds;
    return Status::Ok();
  }

  Status upload(const Weights& hw) {
    Uploader up(stream_);
    up_ = &up;
    Status r = upload_all(hw);
    up_ = nullptr;
    if (!r.ok()) return r;
    return up.finish();
  }
  Status upload_all(const Weights& hw) {
    DSV41_TRY(up_linear(hw.embed, w_.embed));
    DSV41_TRY(up_linear(hw.head, w_.head));
    DSV41_TRY(up_vec(hw.norm, w_.norm));
    const auto& y = s_.rope_scaling;
    layers_.resize(hw.layers.size());
    for (size_t i = 0; i < hw.layers.size(); ++i) {
      const LayerWeights& h = hw.layers[i];
      DLayer& L = layers_[i];
      for (auto [src, dst] : std::initializer_list<std::pair<const Linear*, DLinear*>>{
               {&h.wq_a, &L.wq_a}, {&h.wq_b, &L.wq_b}, {&h.wkv, &L.wkv}, {&h.wo_a, &L.wo_a}, {&h.wo_b, &L.wo_b},
               {&h.c_wkv, &L.c_wkv}, {&h.c_wgate, &L.c_wgate}, {&h.i_wk, &L.i_wk}, {&h.i_wq_b, &L.i_wq_b},
               {&h.i_wproj, &L.i_wproj}, {&h.gate, &L.gate}, {&h.engram_wkv, &L.engram_wkv},
               {&h.main_proj, &L.main_proj}, {&h.markov_embed, &L.markov_embed}, {&h.markov_head, &L.markov_head},
               {&h.conf_proj, &L.conf_proj}, {&h.shared[0], &L.sh1}, {&h.shared[1], &L.sh2}, {&h.shared[2], &L.sh3}})
        DSV41_TRY(up_linear(*src, *dst));
      for (auto [src, dst] : std::initializer_list<std::pair<const std::vector<float>*, const float**>>{
               {&h.q_norm, &L.q_norm}, {&h.kv_norm, &L.kv_norm}, {&h.attn_sink, &L.attn_sink},
               {&h.attn_norm, &L.attn_norm}, {&h.ffn_norm, &L.ffn_norm}, {&h.c_norm, &L.c_norm},
               {&h.i_knorm, &L.i_knorm}, {&h.gate_bias, &L.gate_bias}, {&h.gate_bias_vl, &L.gate_bias_vl},
               {&h.engram_qk, &L.engram_qk}, {&h.main_norm, &L.main_norm}, {&h.norm, &L.norm},
               {&h.hc_attn.fn, &L.hca_fn}, {&h.hc_attn.base, &L.hca_base}, {&h.hc_attn.scale, &L.hca_scale},
               {&h.hc_ffn.fn, &L.hcf_fn}, {&h.hc_ffn.base, &L.hcf_base}, {&h.hc_ffn.scale, &L.hcf_scale}})
        DSV41_TRY(up_vec(*src, *dst));
      DSV41_TRY(up_experts(h.experts, 0, L.ew1, L.es1, L.gw13, L.gs13));
      DSV41_TRY(up_experts(h.experts, 2, L.ew3, L.es3, L.gw13, L.gs13));
      DSV41_TRY(up_experts(h.experts, 1, L.ew2, L.es2, L.gw2, L.gs2));
      if (h.engram_table) {
        const int hd = s_.engram_head_dim;
        L.engram_rows = h.engram_rows;
        DSV41_TRY(wmem_.upload(L.engram_table, h.engram_table, size_t(h.engram_rows) * hd, *up_));
        DSV41_TRY(wmem_.upload(L.engram_scale, h.engram_table_scale, size_t(h.engram_rows) * (hd / 32), *up_));
      }
      const RopeTable rt = rope_table_for(s_, sched_[i].ratio > 0);
      DSV41_TRY(up_vec(rt.freqs, L.rope_freqs));
    }
    return Status::Ok();
  }

  // ---- GEMM helpers (tensor-core kernels where the shape fits, simple kernels otherwise) ----
  Status act_quant(const bf16_t* x, int M, int K, uint8_t*& c, uint8_t*& e, Scratch& sc) const {
    DSV41_TRY(sc.get(c, size_t(M) * K));
    DSV41_TRY(sc.get(e, size_t(M) * (K / 32)));
    return act_quant_fp8(x, K, M, K, c, e, nullptr, stream_);
  }
  Status linear_fp8(const uint8_t* xc, const uint8_t* xe, int M, const DLinear& W, bf16_t* y, int64_t ldy) const {
    if (W.kind != WKind::FP8) return error(Code::internal, "linear_fp8: not an FP8 weight");
    const int N = W.out, K = W.in;
    if (N % 64 == 0 && K % 32 == 0) {
      Scratch sc(pool_, stream_);
      const size_t wsb = gemm_workspace_bytes(M, N, K);
      float* ws = nullptr;
      if (wsb) DSV41_TRY(sc.get(ws, wsb / 4));
      return gemm_fp8(xc, xe, M, W.w, W.s, N, K, y, ldy, ws, wsb, stream_);
    }
    mk::linear_fp8_simple_kernel<<<mk::blocks_for(int64_t(M) * N * 32), mk::kThreads, 0, stream_>>>(xc, xe, W.w, W.s, M,
                                                                                                   N, K, y, ldy);
    return launch_status("linear fp8 (simple)");
  }
  // x BF16 [M, K] dense; W BF16; FP32 (yf) or BF16 (yb) out. FP32 outputs (head, compressor at ratio > 1:
  // SPEC's FP32 linears) use the CUDA-core FMA kernel: the BF16 tensor-core GEMM accumulates with
  // truncation (relative errors up to ~3e-4 measured), far from FP32.
  Status linear_bf16(const bf16_t* x, int M, const DLinear& W, float* yf, bf16_t* yb, int64_t ldy) const {
    if (W.kind != WKind::BF16) return error(Code::internal, "linear_bf16: not a BF16 weight");
    const int N = W.out, K = W.in;
    if (!yf && N % 16 == 0 && K % 32 == 0) {
      Scratch sc(pool_, stream_);
      const size_t wsb = gemm_workspace_bytes(M, N, K);
      float* ws = nullptr;
      if (wsb) DSV41_TRY(sc.get(ws, wsb / 4));
      return gemm_bf16(x, M, W.bf16(), N, K, yf, yb, ldy, ws, wsb, stream_);
    }
    if (M >= kTiledRows && gemm_f32_ctas(M, N, 1) >= kTiledMinCtas) {  // the head of a batch, drafts, prefill
      GemmF32Params gp;
      gp.A = x;
      gp.lda = K;
      gp.W = W.w;
      gp.M = M;
      gp.N = N;
      gp.K = K;
      gp.yf = yf;
      gp.yb = yb;
      gp.ldy = ldy;
      return gemm_f32(gp, stream_);
    }
    mk::linear_bf16_simple_kernel<<<mk::blocks_for(int64_t(M) * N * 32), mk::kThreads, 0, stream_>>>(
        x, K, W.bf16(), M, N, K, yf, yb, ldy);
    return launch_status("linear bf16 (simple)");
  }
  Status norm(const bf16_t* x, const float* w, int rows, int n, bf16_t* y) const {
    return rmsnorm(x, n, w, rows, n, eps(), y, n, stream_);
  }
  Status rope_rows(bf16_t* x, int rows, int heads, int dh, const DLayer& w, int64_t p0, bool inverse = false) const {
    return rope(x, rows, heads, dh, s_.qk_rope_head_dim, w.rope_freqs, p0, inverse, stream_);
  }

  // ---- the forward over segments ----

  // Runs every segment's rows (ids: all rows, segment order) through the layers; logits of every row when
  // o.all_logits, else of each segment's last row ([n_segments, V]). On error the host counters are put back;
  // a multi-token segment is then marked damaged (see DeviceSequence::damaged).
  Status run(std::span<const Seg> segs, std::span<const int32_t> ids, const ForwardOptions& o, float* d_logits,
             const Pass& pass) const {
    const int S = int(ids.size());
    if ((o.hooks || o.bounded_replay) && segs.size() != 1)
      return error(Code::invalid_argument, "CUDA forward: hooks and bounded replay take one sequence");
    if (o.bounded_replay) DSV41_TRY(check_bounded_replay(s_, sched_));
    struct Saved {
      std::vector<std::pair<int64_t, int>> counters;
    };
    std::vector<Saved> saved(segs.size());
    for (size_t i = 0; i < segs.size(); ++i)
      for (const auto& ls : segs[i].st->layers) saved[i].counters.emplace_back(ls.n_entries, ls.n_pend);
    Status r = run_unguarded(segs, ids, o, d_logits, pass, S);
    if (!r.ok()) {
      for (size_t i = 0; i < segs.size(); ++i) {
        auto& L = segs[i].st->layers;
        for (size_t l = 0; l < L.size(); ++l) std::tie(L[l].n_entries, L[l].n_pend) = saved[i].counters[l];
        if (segs[i].n > 1) segs[i].st->damaged = true;
      }
      return r;
    }
    if (!pass.advance) return r;
    const size_t keep = size_t(std::max(s_.engram_max_ngram_size - 1, 0));
    for (const Seg& g : segs) {
      g.st->pos = g.p0 + g.n;
      auto& h = g.st->history;
      h.insert(h.end(), ids.begin() + g.row0, ids.begin() + g.row0 + g.n);
      if (h.size() > keep) h.erase(h.begin(), h.end() - std::ptrdiff_t(keep));
    }
    return r;
  }

  Status run_unguarded(std::span<const Seg> segs0, std::span<const int32_t> ids, const ForwardOptions& o,
                       float* d_logits, const Pass& pass0, int S) const {
    const ForwardHooks* hooks = o.hooks;
    const int hc = s_.hc_mult, d = s_.hidden_size, nt = n_taps(), V = s_.vocab_size;
    std::vector<Seg> segs(segs0.begin(), segs0.end());
    Scratch fs(pool_, stream_);
    Inputs in;
    DSV41_TRY(put_rows(segs, ids, fs, hooks, in));
    bf16_t* H = nullptr;
    float* pre = nullptr;
    bf16_t* taps = nullptr;
    DSV41_TRY(fs.get(H, size_t(S) * hc * d));
    DSV41_TRY(fs.get(pre, size_t(S) * hc));
    DSV41_TRY(fs.get(taps, size_t(S) * std::max(nt, 1) * d));
    mark("embed");
    mk::embed_kernel<<<S, 128, 0, stream_>>>(w_.embed.bf16(), in.ids, hc, d, H, pre);
    DSV41_TRY(launch_status("embed"));
    Shared sh;
    sh.fs = &fs;
    sh.lists.assign(sched_.size(), nullptr);
    sh.cand.assign(segs.size(), Cand{});
    const int L = s_.num_hidden_layers, W = s_.sliding_window, dec = first_decoder_layer(s_);
    // SPEC §5 bounded replay: layers after the decoder's first see only the chunk's last W rows.
    const bool bounded = o.bounded_replay && S > W && dec + 1 < L;
    const int split = bounded ? dec + 1 : L;
    Pass pass = pass0;
    int rows = S, off = 0;
    for (int l = 0; l < L; ++l) {
      if (l == split) {
        off = S - W;
        rows = W;
        segs[0].p0 += off;
        segs[0].n = W;
        pass.window_floor = segs[0].p0;
        for (auto& p : sh.lists)
          if (p) p += size_t(off) * s_.index_topk;
        Cand& c = sh.cand[0];
        if (c.has) {
          c.sel += size_t(off) * c.nb;
          c.vis += off;
        }
      }
      Inputs at{in.ids + off, in.pos + off, in.hash ? in.hash + size_t(off) * hash_cols() : nullptr};
      DSV41_TRY(unit(l, segs, sh, at, H + size_t(off) * hc * d, pre + size_t(off) * hc,
                     taps + size_t(off) * std::max(nt, 1) * d, rows, hooks, pass));
    }
    mark("head");
    if (d_logits) {
      const bool every_row = o.all_logits || std::all_of(segs.begin(), segs.end(), [](const Seg& g) { return g.n == 1; });
      if (o.all_logits && off > 0) return error(Code::unsupported, "CUDA forward: all_logits with bounded replay");
      if (every_row) {
        DSV41_TRY(head_rows(H + size_t(off) * hc * d, pre + size_t(off) * hc, rows, d_logits));
      } else {
        for (size_t i = 0; i < segs.size(); ++i) {
          const int last = segs[i].row0 + segs[i].n - 1 + off;
          DSV41_TRY(head_rows(H + size_t(last) * hc * d, pre + size_t(last) * hc, 1, d_logits + i * size_t(V)));
        }
      }
    }
    if (hooks && hooks->taps && nt > 0) DSV41_TRY(hook_taps(hooks, segs0[0].p0, S, taps));
    mark("dspark seed");
    if (s_.n_dspark() > 0) DSV41_TRY(seed_dspark(segs0, taps, in.pos));
    return Status::Ok();
  }

  size_t hash_cols() const { return plan_.layers.empty() ? 0 : size_t(plan_.n_layers() * plan_.cols()); }


  // Token ids, positions and Engram row ids of every row to the device, in one buffer.
  Status put_rows(std::span<const Seg> segs, std::span<const int32_t> ids, Scratch& fs, const ForwardHooks* hooks,
                  Inputs& in) const {
    const size_t S = ids.size(), hp = hash_cols();
    const size_t ids_b = (S * 4 + 7) / 8 * 8, pos_b = S * 8, hash_b = S * hp * 8;
    std::vector<uint8_t> host(ids_b + pos_b + hash_b);
    std::memcpy(host.data(), ids.data(), S * 4);
    auto* pos = reinterpret_cast<int64_t*>(host.data() + ids_b);
    for (const Seg& g : segs)
      for (int t = 0; t < g.n; ++t) pos[g.row0 + t] = g.p0 + t;
    if (hp) {
      auto* hash = reinterpret_cast<int64_t*>(host.data() + ids_b + pos_b);
      for (const Seg& g : segs) {
        std::span<int64_t> out(hash + size_t(g.row0) * hp, size_t(g.n) * hp);
        DSV41_TRY(engram::hash_ids(plan_, token_map_, s_.image_token_id, ids.subspan(size_t(g.row0), size_t(g.n)),
                                   g.st->history, out));
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

  // Host bytes to the device: as kernel parameters up to 48 KiB (asynchronous, capturable in a CUDA graph),
  // else by a copy (pageable: may wait for the stream; large prefill inputs only).
  Status put_bytes(const void* src, size_t n, void* dst) const {
    constexpr size_t kChunk = mk::ParamBytes::kBytes;
    if (n > 16 * kChunk) {
      DSV41_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "input upload");
      return Status::Ok();
    }
    for (size_t o = 0; o < n; o += kChunk) {
      mk::ParamBytes v;
      v.n = int(std::min(kChunk, n - o));
      std::memcpy(v.b, static_cast<const uint8_t*>(src) + o, size_t(v.n));
      mk::param_bytes_kernel<<<1, 256, 0, stream_>>>(v, static_cast<uint8_t*>(dst) + o);
      DSV41_TRY(launch_status("inputs"));
    }
    return Status::Ok();
  }

  // ---- hooks (debug path: copies to the host and back, synchronizes) ----
  Status hook_unit(const ForwardHooks* hooks, bool input, int l, int64_t p0, int S, bf16_t* H, float* pre) const {
    const int hc = s_.hc_mult, d = s_.hidden_size;
    std::vector<uint16_t> hb(size_t(S) * hc * d);
    std::vector<float> hf(hb.size()), pf(size_t(S) * hc);
    DSV41_CUDA_TRY(cudaMemcpyAsync(hb.data(), H, hb.size() * 2, cudaMemcpyDeviceToHost, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(pf.data(), pre, pf.size() * 4, cudaMemcpyDeviceToHost, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "hook copy");
    for (size_t i = 0; i < hb.size(); ++i) hf[i] = num::bf16_to_f32(hb[i]);
    if (!input) {
      hooks->unit_output(hooks->ctx, l, p0, S, hf.data(), pf.data());
      return Status::Ok();
    }
    hooks->unit_input(hooks->ctx, l, p0, S, hf.data(), pf.data());
    for (size_t i = 0; i < hb.size(); ++i) hb[i] = num::bf16_bits(hf[i]);
    DSV41_CUDA_TRY(cudaMemcpyAsync(H, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaMemcpyAsync(pre, pf.data(), pf.size() * 4, cudaMemcpyHostToDevice, stream_), "hook copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "hook copy");
    return Status::Ok();
  }
  Status hook_taps(const ForwardHooks* hooks, int64_t p0, int S, bf16_t* taps) const {
    const size_t n = size_t(S) * n_taps() * s_.hidden_size;
    std::vector<uint16_t> hb(n);
    std::vector<float> hf(n);
    DSV41_CUDA_TRY(cudaMemcpyAsync(hb.data(), taps, n * 2, cudaMemcpyDeviceToHost, stream_), "taps copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "taps copy");
    for (size_t i = 0; i < n; ++i) hf[i] = num::bf16_to_f32(hb[i]);
    hooks->taps(hooks->ctx, p0, S, n_taps() * s_.hidden_size, hf.data());
    for (size_t i = 0; i < n; ++i) hb[i] = num::bf16_bits(hf[i]);
    DSV41_CUDA_TRY(cudaMemcpyAsync(taps, hb.data(), n * 2, cudaMemcpyHostToDevice, stream_), "taps copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "taps copy");
    return Status::Ok();
  }

  // ---- one layer unit ----
  Status unit(int l, std::span<const Seg> segs, Shared& sh, const Inputs& in, bf16_t* H, float* pre, bf16_t* taps, int S,
              const ForwardHooks* hooks, const Pass& pass) const {
    const LayerRole& role = sched_[l];
    const DLayer& w = layers_[l];
    const int hc = s_.hc_mult, d = s_.hidden_size;
    const int64_t p0 = segs[0].p0;
    if (hooks && hooks->unit_input) DSV41_TRY(hook_unit(hooks, true, l, p0, S, H, pre));
    mark("engram");
    if (role.engram_slot >= 0) DSV41_TRY(engram(w, role.engram_slot, in.hash, in.ids, H, S));
    if (role.tap_slot >= 0) {
      mk::taps_kernel<<<mk::blocks_for(int64_t(S) * d), mk::kThreads, 0, stream_>>>(H, S, hc, d, n_taps(), role.tap_slot,
                                                                                    taps);
      DSV41_TRY(launch_status("taps"));
    }
    DSV41_TRY(block(l, H, pre, in.ids, S, [&](const bf16_t* x, bf16_t* o) {
      return attention(l, segs, sh, x, in.pos, S, o, hooks, pass);
    }));
    if (hooks && hooks->unit_output) DSV41_TRY(hook_unit(hooks, false, l, p0, S, H, pre));
    return Status::Ok();
  }

  // §4.7 Engram on all streams of H [S, hc, d].
  Status engram(const DLayer& w, int slot, const int64_t* d_hash, const int32_t* d_ids, bf16_t* H, int S) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, hd = s_.engram_head_dim, cols = int(plan_.cols());
    const int stride = int(plan_.n_layers()) * cols, K = cols * hd;
    Scratch sc(pool_, stream_);
    bf16_t *rows = nullptr, *kv = nullptr;
    DSV41_TRY(sc.get(rows, size_t(S) * K));
    DSV41_TRY(sc.get(kv, size_t(S) * (hc + 1) * d));
    mk::engram_gather_kernel<<<mk::blocks_for(int64_t(S) * K), mk::kThreads, 0, stream_>>>(
        d_hash, stride, slot * cols, cols, hd, w.engram_table, w.engram_scale, w.engram_rows, S, rows);
    DSV41_TRY(launch_status("engram gather"));
    uint8_t *xc = nullptr, *xe = nullptr;
    DSV41_TRY(act_quant(rows, S, K, xc, xe, sc));
    DSV41_TRY(linear_fp8(xc, xe, S, w.engram_wkv, kv, int64_t(hc + 1) * d));
    const float inv_sqrt_d = float(std::pow(double(d), -0.5));
    mk::engram_gate_kernel<<<S * hc, 128, 0, stream_>>>(kv, w.engram_qk, d_ids, s_.image_token_id, hc, d, eps(),
                                                         inv_sqrt_d, H);
    return launch_status("engram gate");
  }

  // §4.1 block: mHC around attention and MoE; H [S, hc, d] and pre [S, hc] updated in place.
  template <class AttnFn>
  Status block(int l, bf16_t* H, float* pre, const int32_t* d_tokens, int S, AttnFn&& attn) const {
    const LayerRole& role = sched_[l];
    const DLayer& w = layers_[l];
    const int hc = s_.hc_mult, d = s_.hidden_size, NM = (2 + hc) * hc;
    Scratch sc(pool_, stream_);
    float *mixA = nullptr, *mixF = nullptr;
    bf16_t *xa = nullptr, *a = nullptr, *H1 = nullptr, *xf = nullptr, *f = nullptr;
    DSV41_TRY(sc.get(mixA, size_t(S) * NM));
    DSV41_TRY(sc.get(mixF, size_t(S) * NM));
    DSV41_TRY(sc.get(xa, size_t(S) * d));
    DSV41_TRY(sc.get(a, size_t(S) * d));
    DSV41_TRY(sc.get(H1, size_t(S) * hc * d));
    DSV41_TRY(sc.get(xf, size_t(S) * d));
    DSV41_TRY(sc.get(f, size_t(S) * d));
    MhcParams pa;
    pa.T = S;
    pa.d = d;
    pa.H_in = H;
    pa.pre_use = pre;
    pa.pre_stride = hc;
    pa.fn = w.hca_fn;
    pa.base = w.hca_base;
    pa.scale = w.hca_scale;
    pa.norm_w = w.attn_norm;
    pa.norm_eps = eps();
    pa.hc_eps = float(s_.hc_eps);
    pa.iters = s_.hc_sinkhorn_iters;
    pa.mix_out = mixA;
    pa.y = xa;
    if (d % 256 == 0) {
      uint8_t* ws = nullptr;
      DSV41_TRY(sc.get(ws, mhc_workspace_bytes(S, d, hc)));
      mhc_set_workspace(pa, hc, ws);
    }
    mark("mhc");
    DSV41_TRY(mhc_step_any(pa, hc, stream_));
    DSV41_TRY(attn(static_cast<const bf16_t*>(xa), a));
    MhcParams pf = pa;
    pf.x = a;
    pf.mix_prev = mixA;
    pf.H_out = H1;
    pf.pre_use = mixA;
    pf.pre_stride = NM;
    pf.fn = w.hcf_fn;
    pf.base = w.hcf_base;
    pf.scale = w.hcf_scale;
    pf.norm_w = w.ffn_norm;
    pf.mix_out = mixF;
    pf.y = xf;
    mark("mhc");
    DSV41_TRY(mhc_step_any(pf, hc, stream_));
    mark("moe");
    DSV41_TRY(moe(role, w, xf, d_tokens, S, f));
    mark("mhc");
    mk::hc_post_kernel<<<mk::blocks_for(int64_t(S) * d), mk::kThreads, 0, stream_>>>(f, H1, mixF, S, hc, d, H, pre);
    return launch_status("hc_post");
  }

  // §4.6 MoE of x [S, d] into out [S, d].
  Status moe(const LayerRole& role, const DLayer& w, const bf16_t* x, const int32_t* d_tokens, int S, bf16_t* out) const {
    MoeShape ms;
    ms.T = S;
    ms.d = s_.hidden_size;
    ms.E = role.n_experts;
    ms.k = role.top_k;
    ms.I = s_.moe_intermediate_size;
    ms.route_scale = float(s_.routed_scaling_factor);
    ms.limit = float(s_.swiglu_limit);
    ms.norm_topk = s_.norm_topk_prob;
    MoeWeights mw;
    mw.gate = w.gate.bf16();
    mw.bias = w.gate_bias;
    mw.w1 = {w.ew1, w.es1, w.gw13, w.gs13};
    mw.w3 = {w.ew3, w.es3, w.gw13, w.gs13};
    mw.w2 = {w.ew2, w.es2, w.gw2, w.gs2};
    mw.s1 = {w.sh1.w, w.sh1.s, 0, 0};
    mw.s2 = {w.sh2.w, w.sh2.s, 0, 0};
    mw.s3 = {w.sh3.w, w.sh3.s, 0, 0};
    if (w.gate_bias_vl && d_tokens && s_.image_token_id >= 0) {
      mw.bias_vl = w.gate_bias_vl;
      mw.tokens = d_tokens;
      mw.image_token_id = s_.image_token_id;
    }
    Scratch sc(pool_, stream_);
    const size_t wsb = moe_workspace_bytes(ms);
    uint8_t* ws = nullptr;
    DSV41_TRY(sc.get(ws, wsb));
    return gpu::moe(ms, mw, x, out, ws, wsb, stream_);
  }

  // Projections of a layer's inputs that the compressor and the indexer need, over all rows of a forward.
  struct SideProj {
    bf16_t* lat = nullptr;   // ratio 1: compressor latents [S, D] (normed); index keys kn [S, dI] (normed)
    bf16_t* kn = nullptr;
    float *ckv = nullptr, *cz = nullptr;  // ratio > 1: compressor kv and gate [S, D] FP32
    uint8_t *qp = nullptr, *qe = nullptr;  // indexer queries, FP4 [S, nI·dI/2] + UE8M0 [S, nI·dI/32]
    float* wf = nullptr;                   // indexer head weights [S, nI]
  };

  // §4.2 attention of one backbone layer over its normalized inputs x [S, d]; out [S, d]. Projections run
  // over all rows at once; window entries, compressor, indexer and attention per segment.
  Status attention(int l, std::span<const Seg> segs, Shared& sh, const bf16_t* x, const int64_t* d_pos, int S,
                   bf16_t* out, const ForwardHooks* hooks, const Pass& pass) const {
    const LayerRole& role = sched_[l];
    const DLayer& w = layers_[l];
    const int H = s_.num_attention_heads, D = s_.head_dim, W = s_.sliding_window, d = s_.hidden_size;
    const int ql = s_.q_lora_rank, K = s_.index_topk, we = num::window_entry_size(D), rd = s_.qk_rope_head_dim;
    Scratch sc(pool_, stream_);
    uint8_t *xc = nullptr, *xe = nullptr, *qrc = nullptr, *qre = nullptr;
    bf16_t *tmp = nullptr, *qr = nullptr, *q = nullptr, *kv = nullptr, *kvn = nullptr, *o = nullptr;
    mark("attn projections");
    DSV41_TRY(act_quant(x, S, d, xc, xe, sc));
    DSV41_TRY(sc.get(tmp, size_t(S) * ql));
    DSV41_TRY(sc.get(qr, size_t(S) * ql));
    DSV41_TRY(linear_fp8(xc, xe, S, w.wq_a, tmp, ql));
    DSV41_TRY(norm(tmp, w.q_norm, S, ql, qr));
    DSV41_TRY(act_quant(qr, S, ql, qrc, qre, sc));
    DSV41_TRY(sc.get(q, size_t(S) * H * D));
    DSV41_TRY(linear_fp8(qrc, qre, S, w.wq_b, q, int64_t(H) * D));
    DSV41_TRY(rope_at(q, S, H, D, rd, w.rope_freqs, d_pos, false, stream_));
    DSV41_TRY(sc.get(kv, size_t(S) * D));
    DSV41_TRY(sc.get(kvn, size_t(S) * D));
    DSV41_TRY(linear_fp8(xc, xe, S, w.wkv, kv, D));
    DSV41_TRY(norm(kv, w.kv_norm, S, D, kvn));
    DSV41_TRY(rope_at(kvn, S, 1, D, rd, w.rope_freqs, d_pos, false, stream_));
    const bool indexes = role.ratio > 0 && (role.mode == AttnMode::Full || role.mode == AttnMode::Reindex);
    const bool compresses = role.ratio > 0 && role.mode == AttnMode::Full && pass.compress;
    SideProj sp;
    mark("compressor+indexer");
    if (compresses) DSV41_TRY(compress_project(l, x, S, sc, sp));
    if (indexes) {
      DSV41_TRY(index_project(l, x, qrc, qre, d_pos, S, sc, sp));
      DSV41_TRY(sh.fs->get(sh.lists[l], size_t(S) * K));
    }
    int *widx = nullptr, *cidx = nullptr;
    const bool batch_decode =
        segs.size() > 1 && std::all_of(segs.begin(), segs.end(), [](const Seg& g) { return g.n == 1; });
    if (!batch_decode) mark("attention");  // with the compressor and indexer, per segment (a decode batch marks later)
    DSV41_TRY(sc.get(widx, size_t(S) * W));
    if (role.ratio > 0) DSV41_TRY(sc.get(cidx, size_t(S) * K));
    DSV41_TRY(sc.get(o, size_t(S) * H * D));
    if (batch_decode) {
      DSV41_TRY(attention_decode_batch(l, segs, sh, d_pos, kvn, sp, compresses, indexes, q, widx, cidx, o, sc));
      mark("attn output");
      DSV41_TRY(rope_at(o, S, H, D, rd, w.rope_freqs, d_pos, true, stream_));
      return output_projection(w, o, S, out, sc);
    }
    for (size_t i = 0; i < segs.size(); ++i) {
      const Seg& g = segs[i];
      const int r0 = g.row0, n = g.n;
      const int64_t p0 = g.p0;
      DeviceLayerState& ls = g.st->layers[l];
      Scratch ss(pool_, stream_);
      // Window entries: decode stores the new entry in the ring first (its slot held position p − W, which
      // no row attends); a chunk attends a scratch pool [ring ; chunk entries] and stores the ring after.
      const bool decode = n == 1;
      uint8_t* wpool = ls.ring;
      const bf16_t* kv_g = kvn + size_t(r0) * D;
      if (decode) {
        mk::pack_window_kernel<<<mk::blocks_for(D / 32), mk::kThreads, 0, stream_>>>(kv_g, D, 0, 1, D, ls.ring, 0, p0, W,
                                                                                    true);
      } else {
        DSV41_TRY(ss.get(wpool, size_t(W + n) * we));
        DSV41_CUDA_TRY(cudaMemcpyAsync(wpool, ls.ring, size_t(W) * we, cudaMemcpyDeviceToDevice, stream_), "ring copy");
        mk::pack_window_kernel<<<mk::blocks_for(int64_t(n) * (D / 32)), mk::kThreads, 0, stream_>>>(kv_g, D, 0, n, D,
                                                                                                   wpool, W, p0, W, false);
      }
      DSV41_TRY(launch_status("pack window"));
      mk::window_idx_kernel<<<mk::blocks_for(int64_t(n) * W), mk::kThreads, 0, stream_>>>(
          n, p0, nullptr, W, pass.window_floor, decode, widx + size_t(r0) * W);
      DSV41_TRY(launch_status("window idx"));
      const uint8_t* cpool = nullptr;
      if (role.ratio > 0) {
        if (compresses) DSV41_TRY(compress(l, *g.st, sp, r0, n, ss));
        const DeviceLayerState& src = g.st->layers[role.kv_source];
        if (indexes) {
          int32_t* own = sh.lists[l] + size_t(r0) * K;
          DSV41_TRY(index_select(l, src, sh.cand[i], *sh.fs, sp, r0, n, p0, hooks, own, ss));
          if (hooks && hooks->topk) DSV41_TRY(hook_topk(hooks, l, p0, n, own));
        }
        if (!sh.lists[role.index_source])
          return error(Code::internal, "CUDA forward: layer " + std::to_string(l) + " has no top-k list");
        const int32_t* lists = sh.lists[role.index_source] + size_t(r0) * K;
        mk::comp_idx_kernel<<<mk::blocks_for(int64_t(n) * K), mk::kThreads, 0, stream_>>>(
            lists, n, K, p0, nullptr, role.ratio, src.n_entries, nullptr, cidx + size_t(r0) * K);
        DSV41_TRY(launch_status("comp idx"));
        cpool = src.comp;
      }
      SparseAttnParams ap;
      ap.q = q + size_t(r0) * H * D;
      ap.win_pool = wpool;
      ap.win_idx = widx + size_t(r0) * W;
      ap.n_win = W;
      ap.comp_pool = cpool;
      ap.comp_idx = cpool ? cidx + size_t(r0) * K : nullptr;
      ap.n_comp = cpool ? K : 0;
      ap.sink = w.attn_sink;
      ap.scale = float(std::pow(double(D), -0.5));
      ap.R = n;
      ap.H = H;
      ap.D = D;
      ap.out = o + size_t(r0) * H * D;
      DSV41_TRY(sparse_attention_any(ap, stream_));
      if (!decode) {
        const int t0 = std::max(0, n - W);
        mk::ring_store_kernel<<<mk::blocks_for(int64_t(n - t0) * we), mk::kThreads, 0, stream_>>>(wpool, W, t0, n, we,
                                                                                               ls.ring, p0, W);
        DSV41_TRY(launch_status("ring store"));
      }
    }
    mark("attn output");
    DSV41_TRY(rope_at(o, S, H, D, rd, w.rope_freqs, d_pos, true, stream_));
    return output_projection(w, o, S, out, sc);
  }

  // Attention of a decode batch (one row per sequence): the compressor and the indexer run per sequence (they
  // append to and scan each sequence's own caches); window entries, entry lists and attention run once over
  // all rows, each row reaching its sequence's ring and compressed entries through a pointer table.
  Status attention_decode_batch(int l, std::span<const Seg> segs, Shared& sh, const int64_t* d_pos, const bf16_t* kvn,
                                const SideProj& sp, bool compresses, bool indexes, const bf16_t* q, int* widx, int* cidx,
                                bf16_t* o, Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const DLayer& w = layers_[l];
    const int H = s_.num_attention_heads, D = s_.head_dim, W = s_.sliding_window, K = s_.index_topk;
    const int S = int(segs.size());
    for (size_t i = 0; i < segs.size() && compresses; ++i) {  // the compressor: per sequence
      Scratch ss(pool_, stream_);
      DSV41_TRY(compress(l, *segs[i].st, sp, segs[i].row0, 1, ss));
    }
    // Table (after the compressor: entry counts include this step's), one row per sequence:
    // rings | compressed-entry pools | entry counts (u64) | index-key pools | entry counts (i32).
    std::vector<uint64_t> table(size_t(S) * 4 + (size_t(S) + 1) / 2);
    auto* n_host = reinterpret_cast<int32_t*>(table.data() + 4 * size_t(S));
    int nmax = 0;
    for (const Seg& g : segs) {
      table[size_t(g.row0)] = reinterpret_cast<uint64_t>(g.st->layers[l].ring);
      if (role.ratio > 0) {
        const DeviceLayerState& src = g.st->layers[role.kv_source];
        table[size_t(S) + g.row0] = reinterpret_cast<uint64_t>(src.comp);
        table[size_t(2 * S) + g.row0] = uint64_t(src.n_entries);
        table[size_t(3 * S) + g.row0] = reinterpret_cast<uint64_t>(src.ikeys);
        n_host[g.row0] = int32_t(src.n_entries);
        nmax = std::max(nmax, int(src.n_entries));
      }
    }
    uint64_t* d_table = nullptr;
    DSV41_TRY(sc.get(d_table, table.size()));
    DSV41_TRY(put_bytes(table.data(), table.size() * 8, d_table));
    if (indexes)  // the indexer: every row in one launch of each kernel
      DSV41_TRY(index_select_rows(l, S, sh.cand[0], *sh.fs, sp, d_pos, reinterpret_cast<const uint8_t* const*>(d_table + 3 * S),
                                  reinterpret_cast<const int*>(d_table + 4 * S), nmax, sh.lists[l], sc));
    mark("attention");
    auto* rings = reinterpret_cast<uint8_t* const*>(d_table);
    mk::pack_window_rows_kernel<<<mk::blocks_for(int64_t(S) * (D / 32)), mk::kThreads, 0, stream_>>>(kvn, S, D, rings,
                                                                                                    d_pos, W);
    DSV41_TRY(launch_status("pack window rows"));
    mk::window_idx_kernel<<<mk::blocks_for(int64_t(S) * W), mk::kThreads, 0, stream_>>>(S, 0, d_pos, W, 0, true, widx);
    DSV41_TRY(launch_status("window idx"));
    if (role.ratio > 0) {
      const int32_t* lists = sh.lists[role.index_source];
      if (!lists) return error(Code::internal, "CUDA forward: layer " + std::to_string(l) + " has no top-k list");
      mk::comp_idx_kernel<<<mk::blocks_for(int64_t(S) * K), mk::kThreads, 0, stream_>>>(
          lists, S, K, 0, d_pos, role.ratio, 0, reinterpret_cast<const int64_t*>(d_table + 2 * S), cidx);
      DSV41_TRY(launch_status("comp idx"));
    }
    SparseAttnParams ap;
    ap.q = q;
    ap.win_pools = reinterpret_cast<const uint8_t* const*>(d_table);
    ap.win_idx = widx;
    ap.n_win = W;
    if (role.ratio > 0) {
      ap.comp_pools = reinterpret_cast<const uint8_t* const*>(d_table + S);
      ap.comp_idx = cidx;
      ap.n_comp = K;
    }
    ap.sink = w.attn_sink;
    ap.scale = float(std::pow(double(D), -0.5));
    ap.R = S;
    ap.H = H;
    ap.D = D;
    ap.out = o;
    return sparse_attention_any(ap, stream_);
  }

  // u_g = o_g · wo_a_gᵀ (BF16, no activation quant), then wo_b (FP8).
  Status output_projection(const DLayer& w, const bf16_t* o, int S, bf16_t* out, Scratch& sc) const {
    const int G = s_.o_groups, R = s_.o_lora_rank, gw = s_.num_attention_heads * s_.head_dim / G;
    bf16_t* u = nullptr;
    uint8_t *uc = nullptr, *ue = nullptr;
    DSV41_TRY(sc.get(u, size_t(S) * G * R));
    if (S >= kTiledRowsWoA && gemm_f32_ctas(S, s_.o_lora_rank, s_.o_groups) >= kTiledMinCtas) {
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
      mk::wo_a_kernel<<<mk::blocks_for(int64_t(S) * G * R * 32), mk::kThreads, 0, stream_>>>(o, S, G, R, gw, w.wo_a.w,
                                                                                           w.wo_a.s, u);
      DSV41_TRY(launch_status("wo_a"));
    }
    DSV41_TRY(act_quant(u, S, G * R, uc, ue, sc));
    return linear_fp8(uc, ue, S, w.wo_b, out, s_.hidden_size);
  }

  Status hook_topk(const ForwardHooks* hooks, int l, int64_t p0, int S, int32_t* lists) const {
    const int K = s_.index_topk;
    std::vector<int32_t> h(size_t(S) * K);
    DSV41_CUDA_TRY(cudaMemcpyAsync(h.data(), lists, h.size() * 4, cudaMemcpyDeviceToHost, stream_), "topk copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "topk copy");
    hooks->topk(hooks->ctx, l, p0, S, K, h.data());
    DSV41_CUDA_TRY(cudaMemcpyAsync(lists, h.data(), h.size() * 4, cudaMemcpyHostToDevice, stream_), "topk copy");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream_), "topk copy");
    return Status::Ok();
  }

  // §4.3 compressor projections of a Full layer over all rows: ratio 1 gives the latents and index keys
  // (normed, before RoPE); ratio > 1 the FP32 kv and gate rows that segments pool with their pending rows.
  Status compress_project(int l, const bf16_t* x, int S, Scratch& sc, SideProj& sp) const {
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
  Status compress(int l, DeviceSequence& st, const SideProj& sp, int r0, int n, Scratch& sc) const {
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
      const float* kv = sp.ckv + size_t(r0) * D;
      const float* z = sp.cz + size_t(r0) * D;
      const int n_rows = ls.n_pend + n, n_groups = n_rows / r, rem = n_rows - n_groups * r;
      if (n_groups > 0) {
        bf16_t *pooled = nullptr, *k = nullptr;
        DSV41_TRY(sc.get(pooled, size_t(n_groups) * D));
        DSV41_TRY(sc.get(lat, size_t(n_groups) * D));
        mk::compress_pool_kernel<<<mk::blocks_for(int64_t(n_groups) * D), mk::kThreads, 0, stream_>>>(
            ls.pend_kv, ls.pend_z, ls.n_pend, kv, z, r, D, n_groups, pooled);
        DSV41_TRY(launch_status("compress pool"));
        DSV41_TRY(norm(pooled, w.c_norm, n_groups, D, lat));
        DSV41_TRY(sc.get(k, size_t(n_groups) * dI));
        DSV41_TRY(sc.get(kn, size_t(n_groups) * dI));
        DSV41_TRY(linear_bf16(lat, n_groups, w.i_wk, nullptr, k, dI));
        DSV41_TRY(norm(k, w.i_knorm, n_groups, dI, kn));
      }
      if (rem > 0) {
        mk::compress_pending_kernel<<<mk::blocks_for(int64_t(rem) * D), mk::kThreads, 0, stream_>>>(
            ls.pend_kv, ls.pend_z, ls.n_pend, kv, z, n_groups * r, rem, D);
        DSV41_TRY(launch_status("compress pending"));
      }
      ls.n_pend = rem;
      n_new = n_groups;
    }
    if (n_new == 0) return Status::Ok();
    if (first + n_new > ls.cap) return error(Code::internal, "compressor: entry capacity exceeded");
    mk::rope_strided_kernel<<<mk::blocks_for(int64_t(n_new) * (rd / 2)), mk::kThreads, 0, stream_>>>(
        kn, n_new, 1, dI, rd, w.rope_freqs, first * r, r);
    mk::pack_index_kernel<<<mk::blocks_for(int64_t(n_new) * (dI / 32)), mk::kThreads, 0, stream_>>>(kn, n_new, dI,
                                                                                                  ls.ikeys, first);
    mk::rope_strided_kernel<<<mk::blocks_for(int64_t(n_new) * (rd / 2)), mk::kThreads, 0, stream_>>>(
        lat, n_new, 1, D, rd, w.rope_freqs, first * r, r);
    mk::pack_main_kernel<<<mk::blocks_for(int64_t(n_new) * (D / 16)), mk::kThreads, 0, stream_>>>(lat, n_new, D, ls.comp,
                                                                                                first);
    DSV41_TRY(launch_status("compressed entries"));
    ls.n_entries = first + n_new;
    return Status::Ok();
  }

  // §4.4 indexer projections of a Full or Reindex layer over all rows: FP4 queries (after RoPE) and weights.
  Status index_project(int l, const bf16_t* x, const uint8_t* qrc, const uint8_t* qre, const int64_t* d_pos, int S,
                       Scratch& sc, SideProj& sp) const {
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
    mk::index_weights_kernel<<<mk::blocks_for(int64_t(S) * nI), mk::kThreads, 0, stream_>>>(wb, S * nI, wscale, sp.wf);
    return launch_status("index weights");
  }

  // §4.4–4.5 top-k lists [n, index_topk] of one segment's rows (r0..) of a Full or Reindex layer, into `lists`.
  Status index_select(int l, const DeviceLayerState& src, Cand& cand, Scratch& fs, const SideProj& sp, int r0, int n,
                      int64_t p0, const ForwardHooks* hooks, int32_t* lists, Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const int nI = s_.index_n_heads, dI = s_.index_head_dim, r = role.ratio, K = s_.index_topk;
    const int ne = int(src.n_entries);
    float* scores = nullptr;
    int* vis = nullptr;
    DSV41_TRY(sc.get(vis, size_t(n)));
    mk::fill_vis_kernel<<<mk::blocks_for(n), mk::kThreads, 0, stream_>>>(n, p0, r, ne, vis);
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
    DSV41_TRY(index_scores_any(ip, stream_));
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
  Status candidates(const LayerRole& role, Cand& cand, Scratch& fs, float* scores, int R, int n, const int* vis,
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
      mk::candidate_fast_kernel<256><<<R, 256, 0, stream_>>>(scores, n, vis, s_.candidate_topk_blocks, blk, work, nb,
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
    mk::apply_candidates_kernel<<<mk::blocks_for(int64_t(R) * n), mk::kThreads, 0, stream_>>>(scores, R, n, vis, cand.sel,
                                                                                           cand.vis, cand.nb, blk);
    return launch_status("apply candidates");
  }

  // §4.4–4.5 the indexer of a decode batch (one row per sequence) in one launch of each kernel: row t scores
  // keys_rows[t] (n_rows[t] keys; nmax the most), lists [S, index_topk]. The candidate mask of the batch is
  // kept in `cand` (rows of all sequences).
  Status index_select_rows(int l, int S, Cand& cand, Scratch& fs, const SideProj& sp, const int64_t* d_pos,
                           const uint8_t* const* keys_rows, const int* n_rows, int nmax, int32_t* lists,
                           Scratch& sc) const {
    const LayerRole& role = sched_[l];
    const int nI = s_.index_n_heads, dI = s_.index_head_dim, K = s_.index_topk;
    int* vis = nullptr;
    float* scores = nullptr;
    DSV41_TRY(sc.get(vis, size_t(S)));
    mk::fill_vis_rows_kernel<<<mk::blocks_for(S), mk::kThreads, 0, stream_>>>(S, d_pos, role.ratio, n_rows, vis);
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
    DSV41_TRY(index_scores_any(ip, stream_));
    DSV41_TRY(candidates(role, cand, fs, scores, S, nmax, vis, sc));
    return topk(scores, S, nmax, vis, K, lists, stream_);
  }

  // §4.9 seeds each DSpark stage's ring with the window entries of every segment's last W rows, from the taps.
  Status seed_dspark(std::span<const Seg> segs, const bf16_t* taps, const int64_t* d_pos) const {
    const int d = s_.hidden_size, D = s_.head_dim, W = s_.sliding_window, L = s_.num_hidden_layers, nt = n_taps();
    int S = 0;
    for (const Seg& g : segs) S = std::max(S, g.row0 + g.n);
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
      for (const Seg& g : segs) {
        const int t0 = std::max(0, g.n - W);
        mk::pack_window_kernel<<<mk::blocks_for(int64_t(g.n - t0) * (D / 32)), mk::kThreads, 0, stream_>>>(
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
    mk::pack_window_kernel<<<mk::blocks_for(int64_t(B) * (D / 32)), mk::kThreads, 0, stream_>>>(kvn, D, 0, B, D, pool, W,
                                                                                               0, W, false);
    DSV41_TRY(sc.get(idx, size_t(B) * (W + B)));
    mk::draft_idx_kernel<<<mk::blocks_for(int64_t(B) * (W + B)), mk::kThreads, 0, stream_>>>(B, p, W, idx);
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

  struct Global {
    DLinear embed, head;
    const float* norm = nullptr;
  };

  ModelShape s_;
  std::vector<LayerRole> sched_;
  std::vector<int32_t> token_map_;
  engram::HashPlan plan_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  DeviceArena wmem_;
  Uploader* up_ = nullptr;  // during upload()
  OpTimer* timer_ = nullptr;
  Global w_;
  std::vector<DLayer> layers_;
};

using Forward = ForwardT<>;

}  // namespace dsv41::gpu
