// Session blocks of a device sequence (session/session_blocks.hpp's operations for gpu::DeviceSequence): the same
// payload bytes as the CPU's, so a block stored by a CPU process resumes on the GPU and back. A global block copies
// only its own entries of each KV source layer; a window block is every layer's ring whole. Copies run on the
// model's stream and end with one synchronization; counters stay on the host. Include it in a .cu file (nvcc)
// before instantiating SessionCache over Model<Config, Cuda>.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/session/session_blocks.hpp>

namespace dsv41::gpu {

// The global KV that block `index` added (session::global_block's bytes), from a device sequence past its end.
inline Result<std::vector<uint8_t>> global_block(const ModelShape& s, std::span<const LayerRole> sched,
                                                 const DeviceSequence& st, int block, int64_t index, cudaStream_t stream) {
  DSV41_TRY(session::check_block_size(s, block));
  const int64_t end = (index + 1) * block;
  if (index < 0 || st.pos < end) return error(Code::invalid_argument, "global_block: the state has not passed the block");
  if (st.damaged) return error(Code::invalid_argument, "global_block: the sequence is damaged");
  const size_t me = size_t(kv::MainKvEntry::bytes(s.head_dim)), ie = size_t(kv::IndexKey::bytes(s.index_head_dim));
  size_t total = 8;
  for (const LayerRole& r : sched) {
    if (r.mode != AttnMode::Full) continue;
    const DeviceLayerState& ls = st.layers[size_t(r.id)];
    const int64_t first = index * block / r.ratio, n = int64_t(block / r.ratio);
    if (ls.n_entries < first + n || !ls.comp || !ls.ikeys)
      return error(Code::internal, "global_block: layer " + std::to_string(r.id) + " lacks entries");
    total += 8 + size_t(n) * (me + ie);
  }
  std::vector<uint8_t> out;
  out.reserve(total);  // no reallocation below: the copies target out's final buffer
  session::detail::put_u32(out, session::detail::kGlobalMagic);
  session::detail::put_u32(out, uint32_t(block));
  for (const LayerRole& r : sched) {
    if (r.mode != AttnMode::Full) continue;
    const DeviceLayerState& ls = st.layers[size_t(r.id)];
    const int64_t first = index * block / r.ratio, n = int64_t(block / r.ratio);
    session::detail::put_u32(out, uint32_t(r.id));
    session::detail::put_u32(out, uint32_t(n));
    size_t at = out.size();
    out.resize(at + size_t(n) * (me + ie));
    DSV41_CUDA_TRY(cudaMemcpyAsync(out.data() + at, ls.comp + size_t(first) * me, size_t(n) * me, cudaMemcpyDeviceToHost,
                                   stream),
                   "global_block");
    at += size_t(n) * me;
    DSV41_CUDA_TRY(cudaMemcpyAsync(out.data() + at, ls.ikeys + size_t(first) * ie, size_t(n) * ie, cudaMemcpyDeviceToHost,
                                   stream),
                   "global_block");
  }
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "global_block");
  return Result<std::vector<uint8_t>>(std::move(out));
}

// Appends block `index`'s global KV to st (which holds exactly blocks 0..index−1). The payload is checked whole
// before anything is copied: a refused one leaves st as it was.
inline Status append_global_block(const ModelShape& s, std::span<const LayerRole> sched, DeviceSequence& st, int block,
                                  int64_t index, std::span<const uint8_t> payload, cudaStream_t stream) {
  const size_t me = size_t(kv::MainKvEntry::bytes(s.head_dim)), ie = size_t(kv::IndexKey::bytes(s.index_head_dim));
  session::detail::Reader rd{payload};
  uint32_t magic = 0, bs = 0;
  if (!rd.u32(magic) || magic != session::detail::kGlobalMagic || !rd.u32(bs) || int(bs) != block)
    return error(Code::format_error, "global block: not a block of this size");
  struct Piece {
    int layer;
    uint32_t n;
    const uint8_t *comp, *keys;
  };
  std::vector<Piece> pieces;
  for (const LayerRole& r : sched) {
    if (r.mode != AttnMode::Full) continue;
    Piece p{r.id, 0, nullptr, nullptr};
    uint32_t id = 0;
    if (!rd.u32(id) || int(id) != r.id || !rd.u32(p.n) || int64_t(p.n) != block / r.ratio)
      return error(Code::format_error, "global block: layer list differs from the model's");
    if (!rd.bytes(size_t(p.n) * me, p.comp) || !rd.bytes(size_t(p.n) * ie, p.keys))
      return error(Code::format_error, "global block: truncated");
    const DeviceLayerState& ls = st.layers[size_t(r.id)];
    if (ls.n_entries != index * block / r.ratio) return error(Code::invalid_argument, "global block: out of order");
    if (ls.n_entries + int64_t(p.n) > ls.cap || !ls.comp || !ls.ikeys)
      return error(Code::out_of_range, "global block: exceeds the device state's capacity");
    pieces.push_back(p);
  }
  if (rd.at != payload.size()) return error(Code::format_error, "global block: trailing bytes");
  for (const Piece& p : pieces) {
    DeviceLayerState& ls = st.layers[size_t(p.layer)];
    DSV41_CUDA_TRY(cudaMemcpyAsync(ls.comp + size_t(ls.n_entries) * me, p.comp, size_t(p.n) * me, cudaMemcpyHostToDevice,
                                   stream),
                   "append_global_block");
    DSV41_CUDA_TRY(cudaMemcpyAsync(ls.ikeys + size_t(ls.n_entries) * ie, p.keys, size_t(p.n) * ie, cudaMemcpyHostToDevice,
                                   stream),
                   "append_global_block");
  }
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "append_global_block");
  for (const Piece& p : pieces) st.layers[size_t(p.layer)].n_entries += p.n;
  return Status::Ok();
}

// Every layer's window ring (session::window_at's bytes).
inline Result<std::vector<uint8_t>> window_at(const ModelShape& s, const DeviceSequence& st, cudaStream_t stream) {
  if (st.damaged) return error(Code::invalid_argument, "window_at: the sequence is damaged");
  const size_t rb = size_t(s.sliding_window) * size_t(kv::WindowEntry::bytes(s.head_dim));
  size_t total = 8;
  for (const DeviceLayerState& ls : st.layers) total += 4 + (ls.ring ? rb : 0);
  std::vector<uint8_t> out;
  out.reserve(total);
  session::detail::put_u32(out, session::detail::kWindowMagic);
  session::detail::put_u32(out, uint32_t(st.layers.size()));
  for (const DeviceLayerState& ls : st.layers) {
    const size_t n = ls.ring ? rb : 0;
    session::detail::put_u32(out, uint32_t(n));
    const size_t at = out.size();
    out.resize(at + n);
    if (n) DSV41_CUDA_TRY(cudaMemcpyAsync(out.data() + at, ls.ring, n, cudaMemcpyDeviceToHost, stream), "window_at");
  }
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "window_at");
  return Result<std::vector<uint8_t>>(std::move(out));
}

inline Status restore_window(const ModelShape& s, DeviceSequence& st, std::span<const uint8_t> payload, cudaStream_t stream) {
  const size_t rb = size_t(s.sliding_window) * size_t(kv::WindowEntry::bytes(s.head_dim));
  session::detail::Reader rd{payload};
  uint32_t magic = 0, n = 0;
  if (!rd.u32(magic) || magic != session::detail::kWindowMagic || !rd.u32(n) || n != st.layers.size())
    return error(Code::format_error, "window block: not this model's");
  std::vector<const uint8_t*> rings(n);
  for (uint32_t l = 0; l < n; ++l) {
    uint32_t b = 0;
    if (!rd.u32(b) || b != (st.layers[l].ring ? rb : 0) || !rd.bytes(b, rings[l]))
      return error(Code::format_error, "window block: ring sizes differ");
  }
  if (rd.at != payload.size()) return error(Code::format_error, "window block: trailing bytes");
  for (uint32_t l = 0; l < n; ++l)
    if (st.layers[l].ring)
      DSV41_CUDA_TRY(cudaMemcpyAsync(st.layers[l].ring, rings[l], rb, cudaMemcpyHostToDevice, stream), "restore_window");
  return cuda_status(cudaStreamSynchronize(stream), "restore_window");
}

}  // namespace dsv41::gpu

namespace dsv41::session {

// SessionCache's operations on device sequences; M is the model that made them (Model<Config, Cuda>: shape(),
// schedule(), stream(), backend().owns(), drop_windows()).
template <>
struct StateBlocks<gpu::DeviceSequence> {
  using State = gpu::DeviceSequence;
  template <class M>
  static Status check(const M& m, const State& st) {
    if (!m.backend().owns(st) || st.layers.size() != m.schedule().size())
      return error(Code::invalid_argument, "session blocks: sequence made by another model");
    return Status::Ok();
  }
  template <class M>
  static Result<std::vector<uint8_t>> global(const M& m, const State& st, int block, int64_t index) {
    DSV41_TRY(check(m, st));
    return gpu::global_block(m.shape(), m.schedule(), st, block, index, m.stream());
  }
  template <class M>
  static Status append_global(const M& m, State& st, int block, int64_t index, std::span<const uint8_t> p) {
    DSV41_TRY(check(m, st));
    return gpu::append_global_block(m.shape(), m.schedule(), st, block, index, p, m.stream());
  }
  template <class M>
  static Result<std::vector<uint8_t>> window(const M& m, const State& st) {
    DSV41_TRY(check(m, st));
    return gpu::window_at(m.shape(), st, m.stream());
  }
  template <class M>
  static Status restore(const M& m, State& st, std::span<const uint8_t> p) {
    DSV41_TRY(check(m, st));
    return gpu::restore_window(m.shape(), st, p, m.stream());
  }
  // Cuts every KV source layer back to its first `blocks` blocks of entries (host counters only).
  template <class M>
  static Status truncate(const M& m, State& st, int block, int64_t blocks) {
    for (const LayerRole& r : m.schedule()) {
      if (r.mode != AttnMode::Full) continue;
      gpu::DeviceLayerState& ls = st.layers[size_t(r.id)];
      const int64_t n = blocks * block / r.ratio;
      if (n > ls.n_entries) return error(Code::internal, "session truncate: layer " + std::to_string(r.id) + " lacks entries");
      ls.n_entries = n;
    }
    return Status::Ok();
  }
  template <class M>
  static Status drop_windows(const M& m, State& st) {
    return m.drop_windows(st);
  }
  // Makes st a fresh sequence in place (no new allocation): counters and history cleared, rings zeroed.
  template <class M>
  static Status clear(const M& m, State& st) {
    DSV41_TRY(check(m, st));
    DSV41_TRY(m.drop_windows(st));
    DSV41_CUDA_TRY(cudaStreamSynchronize(m.stream()), "session clear");
    for (gpu::DeviceLayerState& ls : st.layers) {
      ls.n_entries = 0;
      ls.n_pend = 0;
    }
    st.pos = 0;
    st.history.clear();
    st.damaged = false;
    return Status::Ok();
  }
};

}  // namespace dsv41::session
