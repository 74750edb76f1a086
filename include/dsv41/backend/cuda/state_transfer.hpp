// Moving a sequence between the backends: the caches have the same SPEC §6 bytes on both, so a CPU
// SequenceState can continue on the GPU (a session saved by a CPU process, a test that starts both backends
// from one state) and back. Synchronous copies on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::gpu {

// d (made by the GPU model for this shape, any position) takes the contents of c.
inline Status upload_state(const ModelShape& s, const SequenceState& c, DeviceSequence& d, cudaStream_t stream) {
  if (c.layers.size() != d.layers.size()) return error(Code::invalid_argument, "upload_state: states of different models");
  if (c.pos > d.max_positions)
    return error(Code::out_of_range, "upload_state: " + std::to_string(c.pos) + " positions exceed the device state's " +
                                         std::to_string(d.max_positions));
  const int D = s.head_dim, me = num::main_entry_size(D), ie = num::index_entry_size(s.index_head_dim);
  auto h2d = [&](void* dst, const void* src, size_t n) {
    return n ? cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream), "upload_state") : Status::Ok();
  };
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerState& cl = c.layers[l];
    DeviceLayerState& dl = d.layers[l];
    const int n_pend = int(cl.pend_kv.size() / size_t(D));
    if (cl.n_entries > dl.cap || (cl.n_entries > 0 && !dl.comp) || (n_pend > 0 && !dl.pend_kv))
      return error(Code::invalid_argument, "upload_state: layer " + std::to_string(l) + " does not fit the device state");
    DSV41_TRY(h2d(dl.ring, cl.ring.data(), cl.ring.size()));
    DSV41_TRY(h2d(dl.comp, cl.comp.data(), size_t(cl.n_entries) * me));
    DSV41_TRY(h2d(dl.ikeys, cl.ikeys.data(), size_t(cl.n_entries) * ie));
    DSV41_TRY(h2d(dl.pend_kv, cl.pend_kv.data(), cl.pend_kv.size() * 4));
    DSV41_TRY(h2d(dl.pend_score, cl.pend_score.data(), cl.pend_score.size() * 4));
    dl.n_entries = cl.n_entries;
    dl.n_pend = n_pend;
  }
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "upload_state");
  d.pos = c.pos;
  d.history = c.history;
  d.damaged = false;
  return Status::Ok();
}

// c (made by the CPU model for this shape) takes the contents of d.
inline Status download_state(const ModelShape& s, const DeviceSequence& d, SequenceState& c, cudaStream_t stream) {
  if (c.layers.size() != d.layers.size()) return error(Code::invalid_argument, "download_state: states of different models");
  const int D = s.head_dim, me = num::main_entry_size(D), ie = num::index_entry_size(s.index_head_dim);
  const size_t ring = size_t(s.sliding_window) * num::window_entry_size(D);
  auto d2h = [&](void* dst, const void* src, size_t n) {
    return n ? cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream), "download_state") : Status::Ok();
  };
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const DeviceLayerState& dl = d.layers[l];
    LayerState& cl = c.layers[l];
    cl.ring.resize(dl.ring ? ring : 0);
    cl.comp.resize(size_t(dl.n_entries) * me);
    cl.ikeys.resize(size_t(dl.n_entries) * ie);
    cl.pend_kv.resize(size_t(dl.n_pend) * D);
    cl.pend_score.resize(size_t(dl.n_pend) * D);
    DSV41_TRY(d2h(cl.ring.data(), dl.ring, cl.ring.size()));
    DSV41_TRY(d2h(cl.comp.data(), dl.comp, cl.comp.size()));
    DSV41_TRY(d2h(cl.ikeys.data(), dl.ikeys, cl.ikeys.size()));
    DSV41_TRY(d2h(cl.pend_kv.data(), dl.pend_kv, cl.pend_kv.size() * 4));
    DSV41_TRY(d2h(cl.pend_score.data(), dl.pend_score, cl.pend_score.size() * 4));
    cl.n_entries = dl.n_entries;
  }
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "download_state");
  c.pos = d.pos;
  c.max_positions = std::max(c.max_positions, d.pos);
  c.history = d.history;
  return Status::Ok();
}

}  // namespace dsv41::gpu
