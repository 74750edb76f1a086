// Model<Config, Cuda>: the model on one GPU. Same operations as the CPU model (model.hpp) on device
// sequences (gpu::DeviceSequence): load, prefill (chunked), forward, batched decode, DSpark draft, bounded
// replay (SPEC §5), plus device-output overloads that never synchronize. Work runs on the stream given at
// load; the host-output overloads synchronize once, for their final copy.
//
// Not on the GPU: the vision tower (neither backend has it; image tokens route with bias_vl as on the CPU).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/forward.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/backend/cuda/snapshot.hpp>
#include <dsv41/backend/cuda/state_transfer.hpp>
#include <dsv41/model/model.hpp>

namespace dsv41 {

template <class Config>
class Model<Config, Cuda> {
 public:
  using State = gpu::DeviceSequence;
  using Snapshot = gpu::DeviceSnapshot;

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Loads dir (config.json, safetensors, Engram token map) and uploads the weights; work runs on `stream`
  // (the legacy default stream when null).
  static Result<std::unique_ptr<Model>> load(const std::string& dir, cudaStream_t stream, const LoadOptions& opt = {}) {
    auto report = [&](float f, const char* what) { return !opt.progress || opt.progress(opt.ctx, f, what); };
    std::unique_ptr<Model> m(new Model());
    auto shape = load_config(dir + "/config.json");
    if (!shape.ok()) return shape.status();
    m->shape_ = std::move(shape).value();
    if constexpr (!std::is_same_v<Config, configs::Dynamic>)
      DSV41_TRY(detail::compare_shapes(m->shape_, configs::to_shape<Config>()));
    if (!report(0.1f, "checkpoint")) return error(Code::cancelled, "load cancelled");
    auto ck = st::Checkpoint::open(dir);
    if (!ck.ok()) return ck.status();
    auto w = bind_weights(*ck, m->shape_);
    if (!w.ok()) return w.status();
    if (!report(0.4f, "engram")) return error(Code::cancelled, "load cancelled");
    auto eg = detail::load_engram(dir, m->shape_);
    if (!eg.ok()) return eg.status();
    std::vector<int32_t> token_map = std::move(eg->token_map);
    engram::HashPlan plan = std::move(eg->plan);
    if (!report(0.5f, "upload")) return error(Code::cancelled, "load cancelled");
    auto f = gpu::Forward::create(m->shape_, *w, std::move(token_map), std::move(plan), stream);
    if (!f.ok()) return f.status();
    m->fwd_ = std::move(f).value();
    if (!report(1.0f, "ready")) return error(Code::cancelled, "load cancelled");
    return Result<std::unique_ptr<Model>>(std::move(m));
  }
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const LoadOptions& opt = {}) {
    return load(dir, nullptr, opt);
  }

  const ModelShape& shape() const { return shape_; }
  const std::vector<LayerRole>& schedule() const { return fwd_->schedule(); }
  const gpu::Forward& backend() const { return *fwd_; }
  cudaStream_t stream() const { return fwd_->stream(); }

  // A fresh sequence able to hold max_positions tokens (allocates its caches at their exact sizes).
  Result<State> new_sequence(int64_t max_positions) const { return fwd_->new_sequence(max_positions); }

  // Runs ids at the state's next positions in one forward; host logits (every row or the last).
  Status forward(State& st, std::span<const int32_t> ids, ForwardResult& out, bool all_logits = false,
                 const ForwardHooks* hooks = nullptr) const {
    return fwd_->forward(st, ids, out, all_logits, hooks);
  }
  // Device logits [rows, V] (caller-owned, or null), no synchronization.
  Status forward(State& st, std::span<const int32_t> ids, const ForwardOptions& opt, float* d_logits) const {
    return fwd_->forward(st, ids, opt, d_logits);
  }

  // Prefill in chunks (opt.chunk tokens per forward; 0 = all at once); last_logits gets the last row.
  // on_chunk may cancel between chunks (the state keeps the chunks already run). One synchronization per
  // chunk when on_chunk is set (so the callback sees finished work), else one at the end.
  Status prefill(State& st, std::span<const int32_t> ids, std::vector<float>* last_logits = nullptr,
                 const PrefillOptions& opt = {}) const {
    DSV41_TRY(detail::check_prompt(shape_, st.pos, st.max_positions, ids));
    const size_t chunk = opt.chunk > 0 ? size_t(opt.chunk) : ids.size();
    const int V = shape_.vocab_size;
    gpu::StreamBlock logits;
    DSV41_TRY(logits.alloc(size_t(V) * 4, stream()));
    float* d = reinterpret_cast<float*>(logits.data());
    for (size_t i = 0; i < ids.size(); i += chunk) {
      const size_t n = std::min(chunk, ids.size() - i);
      ForwardOptions fo;
      fo.bounded_replay = opt.bounded_replay;
      const bool last = i + n == ids.size();
      DSV41_TRY(fwd_->forward(st, ids.subspan(i, n), fo, last && last_logits ? d : nullptr));
      if (opt.on_chunk) {
        DSV41_CUDA_TRY(cudaStreamSynchronize(stream()), "prefill chunk");
        if (!opt.on_chunk(opt.ctx, int64_t(i + n), int64_t(ids.size())))
          return error(Code::cancelled, "prefill cancelled after " + std::to_string(i + n) + " tokens");
      }
    }
    if (last_logits) {
      last_logits->resize(size_t(V));
      DSV41_CUDA_TRY(cudaMemcpyAsync(last_logits->data(), d, size_t(V) * 4, cudaMemcpyDeviceToHost, stream()), "logits");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream()), "prefill");
    return Status::Ok();
  }

  // One decode step for several sequences, each at its own position, in one batched forward.
  using DecodeItem = DecodeItemOf<State>;
  Status decode(std::span<DecodeItem> batch) const {
    if (batch.empty()) return Status::Ok();
    std::vector<State*> seqs;
    std::vector<int32_t> ids;
    for (auto& item : batch) {
      seqs.push_back(item.state);
      ids.push_back(item.token);
    }
    const size_t V = size_t(shape_.vocab_size), B = batch.size();
    gpu::StreamBlock logits;
    DSV41_TRY(logits.alloc(B * V * 4, stream()));
    DSV41_TRY(fwd_->forward_batch(seqs, ids, reinterpret_cast<float*>(logits.data())));
    for (size_t b = 0; b < B; ++b) {
      if (!batch[b].logits) continue;
      batch[b].logits->resize(V);
      DSV41_CUDA_TRY(cudaMemcpyAsync(batch[b].logits->data(), logits.data() + b * V * 4, V * 4, cudaMemcpyDeviceToHost,
                                     stream()),
                     "logits");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream()), "decode");
    return Status::Ok();
  }
  // The same with device logits [B, V] (or null), no synchronization; capturable in a CUDA graph.
  Status decode(std::span<State* const> seqs, std::span<const int32_t> tokens, float* d_logits) const {
    return fwd_->forward_batch(seqs, tokens, d_logits);
  }

  // SPEC §5 Encoder SWA Bounded Replay after the window rings were lost (see Model<C, Cpu>::replay_window).
  Status replay_window(State& st, std::span<const int32_t> recent, std::vector<float>* last_logits = nullptr,
                       const ForwardHooks* hooks = nullptr) const {
    const size_t V = size_t(shape_.vocab_size);
    gpu::StreamBlock logits;
    DSV41_TRY(logits.alloc(V * 4, stream()));
    DSV41_TRY(fwd_->replay_window(st, recent, last_logits ? reinterpret_cast<float*>(logits.data()) : nullptr, hooks));
    if (last_logits) {
      last_logits->resize(V);
      DSV41_CUDA_TRY(cudaMemcpyAsync(last_logits->data(), logits.data(), V * 4, cudaMemcpyDeviceToHost, stream()), "logits");
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream()), "replay_window");
    return Status::Ok();
  }

  // DSpark draft after the main model predicted y for the state's next position (host or device outputs).
  Status draft(const State& st, int32_t y, DraftResult& out) const { return fwd_->draft(st, y, out); }
  Status draft(const State& st, int32_t y, const gpu::DraftBuffers& out) const { return fwd_->draft(st, y, out); }

 private:
  Model() = default;
  ModelShape shape_;
  std::unique_ptr<gpu::Forward> fwd_;
};

// Speculative steps (generate.hpp): snapshot before a block, roll back to the accepted prefix after it.
template <class C>
Result<gpu::DeviceSnapshot> take_snapshot(const Model<C, Cuda>& m, const gpu::DeviceSequence& st,
                                          std::span<const int32_t> ids) {
  return gpu::DeviceSnapshot::take(m.shape(), m.schedule(), st, ids, m.stream());
}
template <class C>
Status rollback(const Model<C, Cuda>& m, gpu::DeviceSequence& st, const gpu::DeviceSnapshot& sn, int keep) {
  auto r = sn.restore(st, keep, m.stream());
  if (!r.ok()) return r.status();
  if (*r == 0) return Status::Ok();
  return m.forward(st, std::span<const int32_t>(sn.ids.data(), size_t(*r)), ForwardOptions{}, nullptr);
}

// The name used before Model<Config, Cuda> existed.
template <class Config = configs::Dynamic>
using CudaModel = Model<Config, Cuda>;

}  // namespace dsv41
