// A decode step of a fixed batch of sequences captured once as a CUDA graph and replayed across steps (issue 13
// item 1). Positions, entry counts, pointer tables and Engram row ids are read from device memory (StepTables,
// batch.hpp), which the host writes before each replay with one copy from pinned memory; the host counters advance
// after it as an eager step advances them. So a step's host work is filling those tables, one copy, one graph
// launch and the counters: no launch per kernel.
//
//   auto g = gpu::DecodeGraph<Ops>::capture(ops, seqs, d_logits, 256);  // valid for 256 more steps of these rows
//   for (...) { g->step(ids); ...read d_logits after a sync... }
//
// The graph is bound to the sequences (their device memory) and to the batch size; other forwards may run on the
// sequences between steps. A step past the entries the graph was sized for is refused (Code::out_of_range):
// capture again. Not for hooks, images, several GPUs or a model on the legacy default stream (the eager decode
// serves those).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include <dsv41/backend/cuda/batch.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/stack.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::gpu {

template <class Ops>
class DecodeGraph {
 public:
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;
  ~DecodeGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    for (auto& e : copied_)
      if (e) cudaEventDestroy(e);
    for (auto* h : host_)
      if (h) cudaFreeHost(h);
    if (dev_) cudaFree(dev_);
  }

  // Captures one decode step of seqs (one row each) on the ops' stream, writing logits [S, V] to d_logits (device,
  // or null). horizon: how many more steps the graph is sized for (the indexer's grids cover the entries every
  // row's KV sources reach by then, at most their capacity).
  static Result<std::unique_ptr<DecodeGraph>> capture(const Ops& ops, std::span<typename Ops::State* const> seqs,
                                                      float* d_logits, int horizon) {
    const int S = int(seqs.size());
    if (S < 1) return error(Code::invalid_argument, "decode graph: at least one sequence");
    if (horizon < 1) return error(Code::invalid_argument, "decode graph: horizon must be at least 1");
    if (ops.parallel_plan().world > 1) return error(Code::unsupported, "decode graph: one GPU only");
    if (!ops.stream())  // the legacy default stream cannot be captured
      return error(Code::invalid_argument, "decode graph: the model must run on a stream of its own (load it with one)");
    for (int i = 0; i < S; ++i) {
      if (!seqs[size_t(i)]) return error(Code::invalid_argument, "decode graph: null sequence");
      for (int j = 0; j < i; ++j)
        if (seqs[size_t(j)] == seqs[size_t(i)]) return error(Code::invalid_argument, "decode graph: a sequence appears twice");
      DSV41_TRY(ops.check_state(*seqs[size_t(i)]));
    }
    std::unique_ptr<DecodeGraph> g(new DecodeGraph());
    g->ops_ = &ops;
    g->seqs_.assign(seqs.begin(), seqs.end());
    g->bytes_ = ops.step_input_bytes(S);
    const ModelShape& s = ops.shape();
    const auto& sched = ops.schedule();
    g->nmax_.assign(sched.size(), 0);
    for (size_t l = 0; l < sched.size() && int(l) < s.num_hidden_layers; ++l) {
      const LayerRole& role = sched[l];
      if (role.ratio == 0) continue;
      int64_t most = 1;
      for (auto* st : seqs) {
        const DeviceLayerState& src = st->layers[size_t(role.kv_source)];
        most = std::max(most, std::min(src.cap, kv::compress_counters(role.ratio, src.n_entries, src.n_pend, horizon).entries));
      }
      if (most > int64_t(1) << 30) return error(Code::out_of_range, "decode graph: too many entries");
      g->nmax_[l] = int(most);
    }
    DSV41_CUDA_TRY(cudaMalloc(&g->dev_, g->bytes_), "decode graph: step inputs");
    for (int k = 0; k < 2; ++k) {
      DSV41_CUDA_TRY(cudaMallocHost(&g->host_[size_t(k)], g->bytes_), "decode graph: pinned step inputs");
      DSV41_CUDA_TRY(cudaEventCreateWithFlags(&g->copied_[size_t(k)], cudaEventDisableTiming), "decode graph: event");
    }
    g->tables_ = ops.step_tables(g->dev_, S, g->nmax_);
    cudaStream_t stream = ops.stream();
    DSV41_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "decode graph: capture");
    const Status cs = [&]() -> Status {
      auto b = ops.new_batch();
      DSV41_TRY(ops.begin_decode_step(b, seqs, g->tables_, d_logits));
      return blocks::forward_rows(ops, b, StackPass{}, false);
    }();
    cudaGraph_t graph = nullptr;
    const cudaError_t ec = cudaStreamEndCapture(stream, &graph);
    if (!cs.ok()) {
      if (graph) cudaGraphDestroy(graph);
      return cs;
    }
    DSV41_CUDA_TRY(ec, "decode graph: capture");
    const cudaError_t ei = cudaGraphInstantiate(&g->exec_, graph, 0);
    cudaGraphDestroy(graph);
    DSV41_CUDA_TRY(ei, "decode graph: instantiate");
    return Result<std::unique_ptr<DecodeGraph>>(std::move(g));
  }

  // One decode step: ids[i] on the i-th sequence; its logits in d_logits once the stream reaches it. Checks the
  // ids and capacities first; a refused step changes nothing.
  Status step(std::span<const int32_t> ids) {
    if (ids.size() != seqs_.size()) return error(Code::invalid_argument, "decode graph: one token per sequence");
    for (size_t i = 0; i < ids.size(); ++i) {
      DSV41_TRY(ops_->check_state(*seqs_[i]));
      DSV41_TRY(check_tokens(ops_->shape(), ids.subspan(i, 1), seqs_[i]->pos + 1, seqs_[i]->max_positions));
    }
    const size_t k = size_t(n_steps_ & 1);
    // The pinned buffer of two steps ago must have been copied before it is written again.
    DSV41_CUDA_TRY(cudaEventSynchronize(copied_[k]), "decode graph: step inputs");
    DSV41_TRY(ops_->fill_step_inputs(seqs_, ids, nmax_, host_[k]));
    cudaStream_t stream = ops_->stream();
    DSV41_CUDA_TRY(cudaMemcpyAsync(dev_, host_[k], bytes_, cudaMemcpyHostToDevice, stream), "decode graph: step inputs");
    DSV41_CUDA_TRY(cudaEventRecord(copied_[k], stream), "decode graph: event");
    DSV41_CUDA_TRY(cudaGraphLaunch(exec_, stream), "decode graph: launch");
    ops_->advance_step(seqs_, ids);
    ++n_steps_;
    return Status::Ok();
  }

  int batch() const { return int(seqs_.size()); }
  int64_t steps() const { return n_steps_; }

 private:
  DecodeGraph() = default;
  const Ops* ops_ = nullptr;
  std::vector<typename Ops::State*> seqs_;
  std::vector<int> nmax_;
  StepTables tables_;
  size_t bytes_ = 0;
  uint8_t* dev_ = nullptr;
  uint8_t* host_[2] = {nullptr, nullptr};
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  cudaGraphExec_t exec_ = nullptr;
  int64_t n_steps_ = 0;
};

}  // namespace dsv41::gpu
