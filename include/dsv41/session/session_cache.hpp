// Sessions that come back cheaply (SPEC §5–6): a session's tokens are cut into blocks named by chained keys
// (block_key.hpp); as a sequence passes each block boundary its block's global KV goes to the global tier (kept
// long: a disk store) and the window KV there to the window tier (kept minutes: a host-DRAM pool or a connector).
// A new prompt resumes from its longest stored prefix: the global KV of its blocks is put back; the windows come
// back exactly when the window tier still holds them for that boundary, else SPEC §5 Encoder SWA Bounded Replay
// rebuilds them from the last W (+ Engram N − 1) tokens, or, on the exact path, the prompt runs cold.
//
// Tiers are duck-typed so any store fits: the global tier has
//   Status put(const Key&, const ModelIdentity&, std::span<const uint8_t>)
//   Result<std::optional<std::vector<uint8_t>>> get(const Key&, const ModelIdentity&)
// and optionally Result<bool> contains(const Key&, const ModelIdentity&) (a cheap presence check: at_boundary uses
// it when there, else it reads the block back with get), and the window tier (session::Connector)
//   Status put(const Key&, std::span<const uint8_t>, double ttl_s)
//   Result<std::optional<std::vector<uint8_t>>> get(const Key&)
// The model's states are cut and restored through StateBlocks<State> (session_blocks.hpp: the CPU's SequenceState;
// backend/cuda/session_state.hpp: the GPU's DeviceSequence, which a .cu file includes).
// Thread safety: a SessionCache holds no mutable state of its own, so several threads may call at_boundary and
// resume (on their own states) at once when its tiers are thread-safe (DiskStore, WindowPool, RedisConnector are)
// and the model's const methods are.
#pragma once
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <dsv41/session/block_key.hpp>
#include <dsv41/session/session_blocks.hpp>

namespace dsv41::session {

struct SessionOptions {
  int block = 128;            // tokens per block: a multiple of every compression ratio
  double window_ttl_s = 600;  // how long the window tier keeps a boundary's windows
  bool exact = false;         // a missing window makes the prompt run cold instead of a bounded replay
};

// What a resume reused and recomputed.
struct ResumeInfo {
  int64_t cached_tokens = 0;    // positions whose global KV came back (blocks · block)
  int64_t replayed_tokens = 0;  // tokens the bounded replay ran to rebuild the windows (0 when they came back)
  int64_t blocks = 0;
  bool window_hit = false;
};

template <class M, class GlobalTier, class WindowTier>
class SessionCache {
 public:
  using State = typename M::State;
  using Blocks = StateBlocks<State>;

  SessionCache(const M& model, ModelIdentity id, GlobalTier& global, WindowTier& window, SessionOptions o = {})
      : m_(model), id_(id), global_(global), window_(window), o_(o) {}

  const SessionOptions& options() const { return o_; }
  Status check() const { return check_block_size(m_.shape(), o_.block); }

  // The keys of the whole blocks of tokens, in order.
  std::vector<Key> keys(std::span<const int32_t> tokens) const {
    std::vector<Key> k;
    Key parent;
    for (size_t i = 0; (i + 1) * size_t(o_.block) <= tokens.size(); ++i) {
      parent = block_key(parent, id_, tokens.subspan(i * size_t(o_.block), size_t(o_.block)));
      k.push_back(parent);
    }
    return k;
  }

  // Stores what st holds at a block boundary: the block just finished (global tier, once) and the windows there.
  // tokens: every token st has processed (tokens.size() == st.pos).
  Status at_boundary(const State& st, std::span<const int32_t> tokens) {
    DSV41_TRY(check());
    if (int64_t(tokens.size()) != st.pos) return error(Code::invalid_argument, "at_boundary: tokens must be the state's own");
    if (st.pos == 0 || st.pos % o_.block) return Status::Ok();
    const auto k = keys(tokens);
    const int64_t b = int64_t(k.size()) - 1;
    auto have = stored(k[size_t(b)]);
    if (!have.ok()) return have.status();
    if (!*have) {
      auto payload = Blocks::global(m_, st, o_.block, b);
      if (!payload.ok()) return payload.status();
      DSV41_TRY(global_.put(k[size_t(b)], id_, *payload));
    }
    auto w = Blocks::window(m_, st);
    if (!w.ok()) return w.status();
    return window_.put(k[size_t(b)], *w, o_.window_ttl_s);
  }

  // Prefill of tokens[st.pos ..) on st (which has processed tokens[0, st.pos)), in chunks that end at block
  // boundaries, storing each boundary. last_logits: the last row's.
  Status prefill(State& st, std::span<const int32_t> tokens, std::vector<float>* last_logits = nullptr) {
    DSV41_TRY(check());
    if (int64_t(tokens.size()) <= st.pos) return error(Code::invalid_argument, "prefill: no new tokens");
    while (st.pos < int64_t(tokens.size())) {
      const int64_t next = std::min<int64_t>((st.pos / o_.block + 1) * o_.block, int64_t(tokens.size()));
      const auto chunk = tokens.subspan(size_t(st.pos), size_t(next - st.pos));
      DSV41_TRY(m_.prefill(st, chunk, next == int64_t(tokens.size()) ? last_logits : nullptr));
      DSV41_TRY(at_boundary(st, tokens.first(size_t(st.pos))));
    }
    return Status::Ok();
  }

  // Puts back into st (a fresh state) the longest stored prefix of prompt that leaves at least one token to run.
  Result<ResumeInfo> resume(State& st, std::span<const int32_t> prompt) {
    DSV41_TRY(check());
    if (st.pos != 0) return error(Code::invalid_argument, "resume: the state must be fresh");
    ResumeInfo info;
    if (prompt.size() < 2) return info;
    const auto k = keys(prompt.first(prompt.size() - 1));
    const ModelShape& s = m_.shape();
    int64_t j = 0;
    for (; j < int64_t(k.size()); ++j) {
      auto g = global_.get(k[size_t(j)], id_);
      if (!g.ok() || !*g) break;  // a tier's error is a miss: recompute, never fail the request for it
      if (!Blocks::append_global(m_, st, o_.block, j, **g).ok()) break;
    }
    if (j == 0) {
      DSV41_TRY(Blocks::clear(m_, st));
      return info;
    }
    // Entries past a refused block may have been appended partly: cut every layer back to j blocks.
    DSV41_TRY(Blocks::truncate(m_, st, o_.block, j));
    st.pos = j * o_.block;
    const size_t keep = size_t(std::max(s.engram_max_ngram_size - 1, 0));
    st.history.assign(prompt.begin() + std::ptrdiff_t(st.pos - std::min<int64_t>(st.pos, int64_t(keep))),
                      prompt.begin() + std::ptrdiff_t(st.pos));
    auto w = window_.get(k[size_t(j - 1)]);
    if (w.ok() && *w && Blocks::restore(m_, st, **w).ok()) {
      info.window_hit = true;
    } else if (o_.exact) {
      DSV41_TRY(Blocks::clear(m_, st));
      return info;
    } else {
      DSV41_TRY(Blocks::drop_windows(m_, st));
      const int64_t need = std::min<int64_t>(st.pos, s.sliding_window + int64_t(keep));
      DSV41_TRY(m_.replay_window(st, prompt.subspan(size_t(st.pos - need), size_t(need))));
      info.replayed_tokens = std::min<int64_t>(st.pos, s.sliding_window);
    }
    info.blocks = j;
    info.cached_tokens = st.pos;
    return info;
  }

 private:
  // Whether the global tier holds k: through contains() when the tier has one, else by reading it back.
  Result<bool> stored(const Key& k) {
    if constexpr (requires(GlobalTier& g, const Key& key, const ModelIdentity& id) {
                    { g.contains(key, id) } -> std::convertible_to<Result<bool>>;
                  }) {
      return global_.contains(k, id_);
    } else {
      auto have = global_.get(k, id_);
      if (!have.ok()) return have.status();
      return Result<bool>(have->has_value());
    }
  }

  const M& m_;
  ModelIdentity id_;
  GlobalTier& global_;
  WindowTier& window_;
  SessionOptions o_;
};

}  // namespace dsv41::session
