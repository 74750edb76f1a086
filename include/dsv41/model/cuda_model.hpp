// Model<Config, Cuda>: the model on one GPU (model.hpp's one class over the CUDA backend, backend/cuda/ops.hpp).
// Same operations as on the CPU on device sequences (gpu::DeviceSequence), plus device-output overloads that never
// synchronize. Work runs on the stream given at load; the host-output overloads synchronize once, for their copy.
// Sequences move between backends with gpu::upload_state / gpu::download_state (the same cache bytes). A decode loop
// can replay one captured step (capture_decode).
// Include it in a .cu file (nvcc).
#pragma once
#include <cuda_runtime.h>

#include <dsv41/backend/cuda/decode_graph.hpp>
#include <dsv41/backend/cuda/ops.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/backend/cuda/snapshot.hpp>
#include <dsv41/backend/cuda/state_transfer.hpp>
#include <dsv41/model/model.hpp>

namespace dsv41 {

template <class Config = configs::Dynamic>
using CudaModel = Model<Config, Cuda>;

// A decode step of seqs captured once as a CUDA graph and replayed across steps with positions and counts read from
// device memory (backend/cuda/decode_graph.hpp): logits [S, V] to d_logits, valid for `horizon` more steps.
template <class Config>
auto capture_decode(const CudaModel<Config>& m, std::span<gpu::DeviceSequence* const> seqs, float* d_logits, int horizon) {
  using Ops = std::remove_cvref_t<decltype(m.backend())>;
  return gpu::DecodeGraph<Ops>::capture(m.backend(), seqs, d_logits, horizon);
}

}  // namespace dsv41
