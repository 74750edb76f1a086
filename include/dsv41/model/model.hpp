// Model<Config, Backend>: a loaded model directory and the operations on its sequences, one class for every
// backend. Config is a traits type from configs:: (its shape must equal the directory's) or configs::Dynamic (any
// config.json). Backend: Cpu (the reference, this header) or Cuda (include <dsv41/model/cuda_model.hpp> in a .cu
// file). The model's order lives in blocks/; the backend supplies its ops (blocks/backend_ops.hpp).
#pragma once
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <dsv41/backend/cpu/ops.hpp>
#include <dsv41/blocks/dspark.hpp>
#include <dsv41/blocks/forward.hpp>
#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/vision.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/model/load.hpp>

namespace dsv41 {

struct Cpu {};   // backend tag: the CPU reference
struct Cuda {};  // backend tag: one GPU (<dsv41/model/cuda_model.hpp>, compiled by nvcc)

// The ops type of a backend for a configuration; each backend specializes it where it is defined.
template <class Backend, class Config>
struct BackendOps;
template <class Config>
struct BackendOps<Cpu, Config> {
  using type = cpu::Ops;
};

// Per prefill chunk; return false to cancel between chunks (state keeps the chunks already run).
struct PrefillOptions {
  int chunk = 0;  // tokens per forward; 0 = the whole prompt at once
  // SPEC §5 Decoder SWA Bounded Replay (approximate by design): within each chunk, layers after the
  // decoder's first see only the chunk's last W tokens. About half the prefill compute of the release.
  bool bounded_replay = false;
  bool (*on_chunk)(void* ctx, int64_t done, int64_t total) = nullptr;
  void* ctx = nullptr;
  // SPEC §4.10 image spans of the prompt (sequence positions; each must lie inside one chunk).
  std::span<const ImageSpan> images;
  // Hooks of every chunk's forward (a debug path: layer-by-layer checks; the GPU synchronizes at each).
  const ForwardHooks* hooks = nullptr;
};

// One sequence's prefill chunk in a batched prefill (Model::prefill_batch of either backend).
template <class State>
struct PrefillItemOf {
  State* state = nullptr;
  std::span<const int32_t> ids;
  std::vector<float>* logits = nullptr;  // out: [V] of the chunk's last row, or [n, V] with all_rows (null: none)
};

// One sequence's token in a decode step (Model::decode of either backend).
template <class State>
struct DecodeItemOf {
  State* state = nullptr;
  int32_t token = 0;
  std::vector<float>* logits = nullptr;  // [V] out
};

template <class Config = configs::Dynamic, class Backend = Cpu>
class Model {
 public:
  using Ops = typename BackendOps<Backend, Config>::type;
  using State = typename Ops::State;
  using Snapshot = typename Ops::Snapshot;
  using Context = typename Ops::Context;  // what the backend runs on (the GPU's: a cudaStream_t)
  using DecodeItem = DecodeItemOf<State>;
  using PrefillItem = PrefillItemOf<State>;
  static constexpr bool on_host = Ops::on_host;

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Loads dir (config.json, safetensors, Engram token map) and builds the backend on ctx.
  static Result<std::unique_ptr<Model>> load(const std::string& dir, Context ctx, const LoadOptions& opt = {}) {
    parallel::PlanSizes split;
    split.split_head = Ops::splits_head;
    split.split_attention = opt.split_attention;
    auto d = detail::load_directory<Config>(dir, opt, split);
    if (!d.ok()) return d.status();
    std::unique_ptr<Model> m(new Model());
    m->dir_ = std::move(d).value();
    auto ops = Ops::create(m->dir_->shape, m->dir_->weights, std::move(m->dir_->engram), ctx);
    if (!ops.ok()) return ops.status();
    m->ops_ = std::move(ops).value();
    if (opt.comm) DSV41_TRY(m->ops_->set_parallel(m->dir_->plan, opt.comm));
    if constexpr (!Ops::keeps_host_weights) m->dir_.reset();  // uploaded: the mapping is no longer needed
    if (opt.progress && !opt.progress(opt.ctx, 1.0f, "ready")) return error(Code::cancelled, "load cancelled");
    return Result<std::unique_ptr<Model>>(std::move(m));  // nvcc does not move into Result<T> implicitly
  }
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const LoadOptions& opt = {}) {
    return load(dir, Context{}, opt);
  }

  const ModelShape& shape() const { return ops_->shape(); }
  const std::vector<LayerRole>& schedule() const { return ops_->schedule(); }
  const Ops& backend() const { return *ops_; }
  Ops& backend() { return *ops_; }  // the backend's own settings (the GPU's: MoE kernels, the MoE's second stream)

  // A fresh sequence able to hold max_positions tokens (the GPU's allocates, so it returns a Result).
  auto new_sequence(int64_t max_positions) const { return ops_->new_sequence(max_positions); }

  // Runs ids at the state's next positions in one forward; host logits (every row or the last).
  Status forward(State& st, std::span<const int32_t> ids, ForwardResult& out, const ForwardOptions& o) const {
    auto sink = ops_->logits_sink(&out, o.all_logits ? int(ids.size()) : 1);
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::forward(*ops_, st, ids, o, sink->target()));
    return sink->read(out.logits);
  }
  Status forward(State& st, std::span<const int32_t> ids, ForwardResult& out, bool all_logits = false,
                 const ForwardHooks* hooks = nullptr) const {
    ForwardOptions o;
    o.all_logits = all_logits;
    o.hooks = hooks;
    return forward(st, ids, out, o);
  }
  // Device logits [rows, V] (caller-owned, or null); no synchronization.
  Status forward(State& st, std::span<const int32_t> ids, const ForwardOptions& o, float* d_logits) const
    requires(!on_host)
  {
    return blocks::forward(*ops_, st, ids, o, d_logits);
  }

  // Prefill in chunks (opt.chunk tokens per forward; 0 = all at once; any split gives the same result);
  // last_logits gets the last row. on_chunk may cancel between chunks (the state keeps the chunks already run);
  // it sees finished work (the GPU synchronizes once per chunk when it is set, else once at the end).
  Status prefill(State& st, std::span<const int32_t> ids, std::vector<float>* last_logits = nullptr,
                 const PrefillOptions& opt = {}) const {
    DSV41_TRY(detail::check_prompt(shape(), st.pos, st.max_positions, ids));
    const size_t chunk = opt.chunk > 0 ? size_t(opt.chunk) : ids.size();
    ForwardResult host;
    auto sink = ops_->logits_sink(&host, 1);
    if (!sink.ok()) return sink.status();
    const int64_t p0 = st.pos;
    for (const ImageSpan& sp : opt.images)
      if (sp.start < p0 || sp.start >= p0 + int64_t(ids.size()))
        return error(Code::invalid_argument, "prefill: an image span starts outside the prompt");
    std::vector<ImageSpan> spans;
    for (size_t i = 0; i < ids.size(); i += chunk) {
      const size_t n = std::min(chunk, ids.size() - i);
      ForwardOptions fo;
      fo.bounded_replay = opt.bounded_replay;
      fo.hooks = opt.hooks;
      spans.clear();
      for (const ImageSpan& sp : opt.images)
        if (sp.start >= p0 + int64_t(i) && sp.start < p0 + int64_t(i + n)) spans.push_back(sp);
      fo.images = spans;
      const bool last = i + n == ids.size();
      DSV41_TRY(blocks::forward(*ops_, st, ids.subspan(i, n), fo, sink->target(last && last_logits)));
      if (opt.on_chunk) {
        DSV41_TRY(ops_->synchronize());
        if (!opt.on_chunk(opt.ctx, int64_t(i + n), int64_t(ids.size())))
          return error(Code::cancelled, "prefill cancelled after " + std::to_string(i + n) + " tokens");
      }
    }
    if (last_logits) return sink->read(*last_logits);
    return ops_->synchronize();
  }

  // Whether prefill_batch would take this chunk (the checks prefill makes first), so a caller can fail one item
  // alone before batching the rest.
  Status check_chunk(const State& st, std::span<const int32_t> ids) const {
    DSV41_TRY(ops_->check_state(st));
    return detail::check_prompt(shape(), st.pos, st.max_positions, ids);
  }

  // Prefill chunks of several sequences (no images, no hooks): one forward of all their rows where the backend
  // batches sequences (the GPU's), else one after another. Each item's logits get its last row, or every row
  // with all_rows (speculative verify blocks). Any invalid item fails the call before anything runs; an error in
  // the forward may leave every item's state damaged (as a failed prefill does).
  Status prefill_batch(std::span<PrefillItem> items, bool all_rows = false) const {
    if (items.empty()) return Status::Ok();
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].state) return error(Code::invalid_argument, "prefill: null state");
      for (size_t j = 0; j < i; ++j)
        if (items[j].state == items[i].state) return error(Code::invalid_argument, "prefill: a sequence appears twice");
      DSV41_TRY(check_chunk(*items[i].state, items[i].ids));
    }
    if constexpr (Ops::batches_decode) {
      if (items.size() > 1) {
        std::vector<State*> seqs;
        std::vector<int> lengths;
        std::vector<int32_t> ids;
        for (const PrefillItem& it : items) {
          seqs.push_back(it.state);
          lengths.push_back(int(it.ids.size()));
          ids.insert(ids.end(), it.ids.begin(), it.ids.end());
        }
        const bool want = std::any_of(items.begin(), items.end(), [](const PrefillItem& it) { return it.logits; });
        auto sink = ops_->logits_sink(nullptr, all_rows ? int(ids.size()) : int(items.size()));
        if (!sink.ok()) return sink.status();
        DSV41_TRY(blocks::forward_chunks(*ops_, std::span<State* const>(seqs), lengths, ids, all_rows,
                                         sink->target(want)));
        if (!all_rows) {
          std::vector<std::vector<float>*> outs;
          for (const PrefillItem& it : items) outs.push_back(it.logits);
          return sink->read_rows(outs);
        }
        if (!want) return ops_->synchronize();
        std::vector<float> all;
        DSV41_TRY(sink->read(all));
        const size_t V = size_t(shape().vocab_size);
        size_t row = 0;
        for (const PrefillItem& it : items) {
          if (it.logits) it.logits->assign(all.begin() + row * V, all.begin() + (row + it.ids.size()) * V);
          row += it.ids.size();
        }
        return Status::Ok();
      }
    }
    for (const PrefillItem& it : items) {
      if (!all_rows) {
        DSV41_TRY(prefill(*it.state, it.ids, it.logits));
        continue;
      }
      ForwardResult r;
      DSV41_TRY(forward(*it.state, it.ids, r, /*all_logits=*/true));
      if (it.logits) *it.logits = std::move(r.logits);
    }
    return Status::Ok();
  }

  // SPEC §4.10 the vision encoder on one image: out.embeds are the rows of its span's IMAGE slots (ImageSpan).
  Status encode_image(const ImageInput& in, VisionResult& out) const
    requires requires(const Ops& o, const ImageInput& i) { o.vision_work(i); }
  {
    return blocks::vision_encode(*ops_, in, out);
  }

  // One decode step for several sequences, each at its own position (one batched forward where the backend
  // batches: the GPU's).
  Status decode(std::span<DecodeItem> batch) const {
    if (batch.empty()) return Status::Ok();
    if constexpr (Ops::batches_decode) {
      std::vector<State*> seqs;
      std::vector<int32_t> ids;
      for (auto& item : batch) {
        seqs.push_back(item.state);
        ids.push_back(item.token);
      }
      auto sink = ops_->logits_sink(nullptr, int(batch.size()));
      if (!sink.ok()) return sink.status();
      DSV41_TRY(blocks::decode(*ops_, std::span<State* const>(seqs), ids, sink->target()));
      std::vector<std::vector<float>*> outs;
      for (auto& item : batch) outs.push_back(item.logits);
      return sink->read_rows(outs);
    } else {
      for (auto& item : batch) {
        if (!item.state) return error(Code::invalid_argument, "decode: null state");
        ForwardResult r;
        DSV41_TRY(forward(*item.state, std::span<const int32_t>(&item.token, 1), r));
        if (item.logits) *item.logits = std::move(r.logits);
      }
      return Status::Ok();
    }
  }
  // The same with device logits [B, V] (or null), no synchronization; capturable in a CUDA graph.
  Status decode(std::span<State* const> seqs, std::span<const int32_t> tokens, float* d_logits) const
    requires(!on_host)
  {
    return blocks::decode(*ops_, seqs, tokens, d_logits);
  }

  // SPEC §5 Encoder SWA Bounded Replay: after the window rings were dropped (drop_windows), rebuilds them from
  // the sequence's last tokens and the stored global KV. last_logits: the last row.
  Status replay_window(State& st, std::span<const int32_t> recent, std::vector<float>* last_logits = nullptr,
                       const ForwardHooks* hooks = nullptr) const {
    ForwardResult host;
    auto sink = ops_->logits_sink(&host, 1);
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::replay_window(*ops_, st, recent, hooks, sink->target(last_logits != nullptr)));
    if (last_logits) return sink->read(*last_logits);
    return ops_->synchronize();
  }
  // Forgets the window rings (as when a stored session keeps only its global KV).
  Status drop_windows(State& st) const { return ops_->drop_windows(st); }

  // DSpark draft after the main model predicted y for the state's next position (host outputs; the GPU also
  // takes device buffers).
  // hooks: ForwardHooks::draft_stage only (a debug path: the golden check).
  Status draft(const State& st, int32_t y, DraftResult& out, const ForwardHooks* hooks = nullptr) const {
    return blocks::dspark_draft(*ops_, st, y, out, hooks);
  }
  template <class DeviceOut>
  Status draft(const State& st, int32_t y, const DeviceOut& out) const
    requires(!on_host && !std::is_same_v<DeviceOut, DraftResult>)
  {
    return blocks::dspark_draft(*ops_, st, y, out);
  }
  Status markov_bias(int32_t t, std::vector<float>& bias) const { return ops_->markov_bias(t, bias); }

  // Speculative steps: snapshot before a block of ids, roll back to the accepted prefix after it (re-running
  // what the snapshot cannot restore exactly).
  Result<Snapshot> snapshot(const State& st, std::span<const int32_t> ids) const { return ops_->take_snapshot(st, ids); }
  Status rollback(State& st, const Snapshot& sn, int keep) const {
    auto r = ops_->restore(st, sn, keep);
    if (!r.ok()) return r.status();
    if (*r == 0) return Status::Ok();
    ForwardResult unused;
    return forward(st, std::span<const int32_t>(sn.ids.data(), size_t(*r)), unused);
  }

  // The GPU's stream.
  auto stream() const
    requires(!on_host)
  {
    return ops_->stream();
  }

 private:
  Model() = default;
  std::unique_ptr<detail::LoadedDirectory> dir_;  // the CPU's weights view into its mapping
  std::unique_ptr<Ops> ops_;
};

// A new sequence from either backend, as a Result: the CPU's cannot fail, the GPU's allocates device memory.
template <class M>
Result<typename M::State> new_sequence_of(const M& m, int64_t max_positions) {
  auto s = m.new_sequence(max_positions);
  if constexpr (std::is_same_v<decltype(s), typename M::State>) return Result<typename M::State>(std::move(s));
  else return s;
}

}  // namespace dsv41
