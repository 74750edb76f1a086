// A session's caches cut into fixed blocks of tokens (SPEC §6): what one block adds to the global KV (the
// compressed main KV entries and index keys of every KV source layer), and the window KV at a block boundary (every
// layer's ring, DSpark stages included). The block size is a multiple of every compression ratio, so no compressor
// has pending rows at a boundary and a block's global KV is exactly the entries of its own positions. Payloads are
// the caches' own bytes behind a small header; a payload that does not fit the model is refused (a miss).
#pragma once
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::session {

// The smallest block size that keeps the compressors' groups whole: the lcm of the compression ratios.
inline int block_granule(const ModelShape& s) {
  int g = 1;
  for (int l = 0; l < s.num_hidden_layers; ++l)
    if (s.compress_ratios[size_t(l)] > 0) g = std::lcm(g, s.compress_ratios[size_t(l)]);
  return g;
}

inline Status check_block_size(const ModelShape& s, int block) {
  const int g = block_granule(s);
  if (block < 1 || block % g)
    return error(Code::invalid_argument, "session block size " + std::to_string(block) + " must be a positive multiple of " +
                                             std::to_string(g) + " (the compression ratios)");
  return Status::Ok();
}

namespace detail {
constexpr uint32_t kGlobalMagic = 0x44534b47, kWindowMagic = 0x44534b57;  // "DSKG", "DSKW"
inline void put_u32(std::vector<uint8_t>& o, uint32_t v) {
  const size_t n = o.size();
  o.resize(n + 4);
  std::memcpy(o.data() + n, &v, 4);
}
struct Reader {
  std::span<const uint8_t> b;
  size_t at = 0;
  bool u32(uint32_t& v) {
    if (at + 4 > b.size()) return false;
    std::memcpy(&v, b.data() + at, 4);
    at += 4;
    return true;
  }
  bool bytes(size_t n, const uint8_t*& p) {
    if (at + n > b.size()) return false;
    p = b.data() + at;
    at += n;
    return true;
  }
};
}  // namespace detail

// The global KV that block `index` (positions [index·B, (index+1)·B)) added, from a state that has passed its end.
inline Result<std::vector<uint8_t>> global_block(const ModelShape& s, std::span<const LayerRole> sched,
                                                 const SequenceState& st, int block, int64_t index) {
  DSV41_TRY(check_block_size(s, block));
  const int64_t end = (index + 1) * block;
  if (index < 0 || st.pos < end) return error(Code::invalid_argument, "global_block: the state has not passed the block");
  const int me = kv::MainKvEntry::bytes(s.head_dim), ie = kv::IndexKey::bytes(s.index_head_dim);
  std::vector<uint8_t> out;
  detail::put_u32(out, detail::kGlobalMagic);
  detail::put_u32(out, uint32_t(block));
  for (const LayerRole& r : sched) {
    if (r.mode != AttnMode::Full) continue;
    const LayerState& ls = st.layers[size_t(r.id)];
    const int64_t first = index * block / r.ratio, n = int64_t(block / r.ratio);
    if (ls.n_entries < first + n) return error(Code::internal, "global_block: layer " + std::to_string(r.id) + " lacks entries");
    detail::put_u32(out, uint32_t(r.id));
    detail::put_u32(out, uint32_t(n));
    out.insert(out.end(), ls.comp.begin() + first * me, ls.comp.begin() + (first + n) * me);
    out.insert(out.end(), ls.ikeys.begin() + first * ie, ls.ikeys.begin() + (first + n) * ie);
  }
  return Result<std::vector<uint8_t>>(std::move(out));
}

// Appends block `index`'s global KV to st (which holds exactly blocks 0..index−1); refuses a payload of another
// shape, block size or layer set.
inline Status append_global_block(const ModelShape& s, std::span<const LayerRole> sched, SequenceState& st, int block,
                                  int64_t index, std::span<const uint8_t> payload) {
  const int me = kv::MainKvEntry::bytes(s.head_dim), ie = kv::IndexKey::bytes(s.index_head_dim);
  detail::Reader rd{payload};
  uint32_t magic = 0, bs = 0;
  if (!rd.u32(magic) || magic != detail::kGlobalMagic || !rd.u32(bs) || int(bs) != block)
    return error(Code::format_error, "global block: not a block of this size");
  for (const LayerRole& r : sched) {
    if (r.mode != AttnMode::Full) continue;
    uint32_t id = 0, n = 0;
    const uint8_t *comp = nullptr, *keys = nullptr;
    if (!rd.u32(id) || int(id) != r.id || !rd.u32(n) || int64_t(n) != block / r.ratio)
      return error(Code::format_error, "global block: layer list differs from the model's");
    if (!rd.bytes(size_t(n) * me, comp) || !rd.bytes(size_t(n) * ie, keys))
      return error(Code::format_error, "global block: truncated");
    LayerState& ls = st.layers[size_t(r.id)];
    if (ls.n_entries != index * block / r.ratio) return error(Code::invalid_argument, "global block: out of order");
    ls.comp.insert(ls.comp.end(), comp, comp + size_t(n) * me);
    ls.ikeys.insert(ls.ikeys.end(), keys, keys + size_t(n) * ie);
    ls.n_entries += n;
  }
  if (rd.at != payload.size()) return error(Code::format_error, "global block: trailing bytes");
  return Status::Ok();
}

// Every layer's window ring of a state standing at a block boundary.
inline std::vector<uint8_t> window_at(const SequenceState& st) {
  std::vector<uint8_t> out;
  detail::put_u32(out, detail::kWindowMagic);
  detail::put_u32(out, uint32_t(st.layers.size()));
  for (const LayerState& ls : st.layers) {
    detail::put_u32(out, uint32_t(ls.ring.size()));
    out.insert(out.end(), ls.ring.begin(), ls.ring.end());
  }
  return out;
}

inline Status restore_window(SequenceState& st, std::span<const uint8_t> payload) {
  detail::Reader rd{payload};
  uint32_t magic = 0, n = 0;
  if (!rd.u32(magic) || magic != detail::kWindowMagic || !rd.u32(n) || n != st.layers.size())
    return error(Code::format_error, "window block: not this model's");
  std::vector<const uint8_t*> rings(n);
  for (uint32_t l = 0; l < n; ++l) {
    uint32_t b = 0;
    if (!rd.u32(b) || b != st.layers[l].ring.size() || !rd.bytes(b, rings[l]))
      return error(Code::format_error, "window block: ring sizes differ");
  }
  if (rd.at != payload.size()) return error(Code::format_error, "window block: trailing bytes");
  for (uint32_t l = 0; l < n; ++l) std::memcpy(st.layers[l].ring.data(), rings[l], st.layers[l].ring.size());
  return Status::Ok();
}

// The block operations SessionCache runs on a backend's state, given the model M that made it (the GPU's needs
// its stream): the CPU's here, the GPU's in backend/cuda/session_state.hpp. Both read and write the same payloads.
template <class State>
struct StateBlocks;

template <>
struct StateBlocks<SequenceState> {
  template <class M>
  static Result<std::vector<uint8_t>> global(const M& m, const SequenceState& st, int block, int64_t index) {
    return global_block(m.shape(), m.schedule(), st, block, index);
  }
  template <class M>
  static Status append_global(const M& m, SequenceState& st, int block, int64_t index, std::span<const uint8_t> p) {
    return append_global_block(m.shape(), m.schedule(), st, block, index, p);
  }
  template <class M>
  static Result<std::vector<uint8_t>> window(const M&, const SequenceState& st) {
    return window_at(st);
  }
  template <class M>
  static Status restore(const M&, SequenceState& st, std::span<const uint8_t> p) {
    return restore_window(st, p);
  }
  // Cuts every KV source layer back to its first `blocks` blocks of entries.
  template <class M>
  static Status truncate(const M& m, SequenceState& st, int block, int64_t blocks) {
    const int me = kv::MainKvEntry::bytes(m.shape().head_dim), ie = kv::IndexKey::bytes(m.shape().index_head_dim);
    for (const LayerRole& r : m.schedule()) {
      if (r.mode != AttnMode::Full) continue;
      LayerState& ls = st.layers[size_t(r.id)];
      const int64_t n = blocks * block / r.ratio;
      ls.n_entries = n;
      ls.comp.resize(size_t(n) * me);
      ls.ikeys.resize(size_t(n) * ie);
    }
    return Status::Ok();
  }
  template <class M>
  static Status drop_windows(const M&, SequenceState& st) {
    st.drop_windows();
    return Status::Ok();
  }
  // Makes st a fresh state of its capacity.
  template <class M>
  static Status clear(const M& m, SequenceState& st) {
    st = m.new_sequence(st.max_positions);
    return Status::Ok();
  }
};

}  // namespace dsv41::session
