// The first session tier: live sequence states kept between requests (host or device memory, wherever the state
// lives), each with the token ids it has processed. A prompt that extends a kept state's tokens continues that state
// directly: nothing restored, nothing replayed, the same caches a single long run would hold. A state leaves the tier
// when it is taken, when it has been idle (not taken since its put) past the TTL, or, least recently put first, when
// the count or byte limit needs room. A state that leaves without being taken is dropped: its blocks went to the lower
// tiers as it passed them (SessionCache::at_boundary). resume_or_take puts this tier in front of SessionCache::resume.
// Thread-safe: one mutex guards the table; states are moved in and out under it and dropped states are destroyed
// after it is released (a device state's destructor synchronizes).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <dsv41/backend/cpu/sequence.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/session/block_key.hpp>

namespace dsv41::session {

// The bytes a state holds: its global caches and window rings as the state reports them (the CPU's: what its
// vectors hold now; the GPU's: its allocation at capacity), plus the compressors' pending rows and the Engram
// history where the state keeps them on the host.
template <class State>
size_t state_bytes(const State& st) {
  size_t b = st.global_cache_bytes() + st.window_bytes() + st.history.size() * sizeof(int32_t);
  if constexpr (requires { st.layers[0].pend_kv.size(); })
    for (const auto& l : st.layers) b += (l.pend_kv.size() + l.pend_score.size()) * sizeof(float);
  return b;
}

// Makes st able to hold `positions` positions when it can: a state of that capacity or more already can; a CPU
// state's caches grow on demand, so raising its limit suffices; a device state's allocation is fixed (false).
template <class State>
bool fit_capacity(State& st, int64_t positions) {
  if (st.max_positions >= positions) return true;
  if constexpr (std::is_same_v<State, SequenceState>) {
    st.max_positions = positions;
    return true;
  } else {
    return false;
  }
}

struct ActiveOptions {
  uint64_t max_bytes = 0;  // bytes of states held at most (state_bytes or the bytes function); 0: no byte limit
  size_t max_count = 16;   // states held at most; 0: no count limit
  double ttl_s = 600;      // a state not taken this long after its put is dropped
  Clock clock;             // time source for expiry (tests inject their own)
};

struct ActiveStats {
  uint64_t entries = 0, bytes = 0;  // held now
  uint64_t hits = 0, misses = 0;    // take results
  uint64_t expired = 0, evicted = 0, replaced = 0;  // dropped: TTL passed, room needed, same tokens or id put again
};

template <class State>
class ActiveSessions {
 public:
  using BytesFn = size_t (*)(const State&);
  struct Taken {
    State state;
    int64_t tokens = 0;  // how many prompt tokens the state holds (its pos)
  };

  explicit ActiveSessions(ActiveOptions o = {}, BytesFn bytes = &state_bytes<State>) : o_(o), bytes_fn_(bytes) {}

  // Keeps st, which has processed exactly tokens (tokens.size() == st.pos), under an optional session id. A kept
  // state with the same tokens, or the same id, is replaced. Refused (st left with the caller): a state that does
  // not match its tokens, a damaged device state, a state larger than the byte limit.
  Status put(std::vector<int32_t> tokens, State&& st, std::string id = {}) {
    if (int64_t(tokens.size()) != st.pos)
      return error(Code::invalid_argument, "active sessions: put of a state at " + std::to_string(st.pos) + " with " +
                                               std::to_string(tokens.size()) + " tokens");
    if constexpr (requires { st.damaged; })
      if (st.damaged) return error(Code::invalid_argument, "active sessions: a damaged state");
    if (tokens.empty()) return error(Code::invalid_argument, "active sessions: a state with no tokens");
    if (!(o_.ttl_s > 0)) return error(Code::invalid_argument, "active sessions: ttl_s must be > 0");
    const uint64_t b = bytes_fn_(st);
    if (o_.max_bytes && b > o_.max_bytes)
      return error(Code::out_of_range, "active sessions: a state of " + std::to_string(b) + " bytes exceeds the limit of " +
                                           std::to_string(o_.max_bytes));
    std::list<Entry> dropped;  // destroyed after the lock is released
    const double now = o_.clock();
    std::lock_guard<std::mutex> lock(mu_);
    reclaim_expired_(now, dropped);
    for (auto it = lru_.begin(); it != lru_.end();) {
      const auto next = std::next(it);
      if (it->tokens == tokens || (!id.empty() && it->id == id)) {
        drop_(it, dropped);
        ++replaced_;
      }
      it = next;
    }
    while (!lru_.empty() && ((o_.max_count && lru_.size() >= o_.max_count) || (o_.max_bytes && bytes_ + b > o_.max_bytes))) {
      drop_(std::prev(lru_.end()), dropped);
      ++evicted_;
    }
    lru_.push_front(Entry{std::move(tokens), std::move(id), std::move(st), b, now + o_.ttl_s});
    bytes_ += b;
    return Status::Ok();
  }

  // Removes and returns the kept state whose tokens are the longest proper prefix of prompt (prompt extends them by
  // one token or more); among equal lengths the most recently put. nullopt: no kept state's tokens prefix prompt.
  std::optional<Taken> take(std::span<const int32_t> prompt) { return take_(nullptr, prompt); }
  // The same among the states kept under session id `id` only.
  std::optional<Taken> take(const std::string& id, std::span<const int32_t> prompt) { return take_(&id, prompt); }

  // Drops every state whose TTL has passed (put and take do this too); returns how many.
  uint64_t reclaim_expired() {
    std::list<Entry> dropped;
    const double now = o_.clock();
    std::lock_guard<std::mutex> lock(mu_);
    return reclaim_expired_(now, dropped);
  }

  ActiveStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ActiveStats{uint64_t(lru_.size()), bytes_, hits_, misses_, expired_, evicted_, replaced_};
  }
  const ActiveOptions& options() const { return o_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::string id;
    State state;
    uint64_t bytes = 0;
    double expires_at = 0;
  };
  using Node = typename std::list<Entry>::iterator;

  std::optional<Taken> take_(const std::string* id, std::span<const int32_t> prompt) {
    std::list<Entry> dropped;
    const double now = o_.clock();
    std::optional<Taken> out;
    std::lock_guard<std::mutex> lock(mu_);
    reclaim_expired_(now, dropped);
    Node best = lru_.end();
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {  // most recent first: a tie keeps the first found
      if (id && it->id != *id) continue;
      const size_t n = it->tokens.size();
      if (n >= prompt.size() || (best != lru_.end() && n <= best->tokens.size())) continue;
      if (std::equal(it->tokens.begin(), it->tokens.end(), prompt.begin())) best = it;
    }
    if (best == lru_.end()) {
      ++misses_;
      return out;
    }
    ++hits_;
    out.emplace(Taken{std::move(best->state), int64_t(best->tokens.size())});
    drop_(best, dropped);
    return out;
  }

  // Moves node into `to` (its state is destroyed with `to`, after the lock).
  void drop_(Node node, std::list<Entry>& to) {
    bytes_ -= node->bytes;
    to.splice(to.end(), lru_, node);
  }
  uint64_t reclaim_expired_(double now, std::list<Entry>& to) {
    uint64_t n = 0;
    for (auto it = lru_.begin(); it != lru_.end();) {
      const auto next = std::next(it);
      if (now >= it->expires_at) {
        drop_(it, to);
        ++n;
      }
      it = next;
    }
    expired_ += n;
    return n;
  }

  ActiveOptions o_;
  BytesFn bytes_fn_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently put first
  uint64_t bytes_ = 0, hits_ = 0, misses_ = 0, expired_ = 0, evicted_ = 0, replaced_ = 0;
};

// What resume_or_take reused.
struct ActiveResume {
  int64_t cached_tokens = 0;  // prompt tokens st holds now (not to be run again)
  bool active_hit = false;    // a kept state was continued (else the lower tiers resumed, or nothing)
};

// Resumes prompt into st (a fresh state of the capacity the request needs): a kept state that prompt extends is moved
// into st when it can hold that capacity (fit_capacity; one that cannot is dropped), else cache->resume
// (SessionCache) puts back the longest stored prefix; cache may be null. With a session id, that id's states are
// tried first, then any state by prefix.
template <class State, class Cache>
Result<ActiveResume> resume_or_take(ActiveSessions<State>& active, Cache* cache, State& st,
                                    std::span<const int32_t> prompt, const std::string& id = {}) {
  if (st.pos != 0) return error(Code::invalid_argument, "resume_or_take: the state must be fresh");
  ActiveResume out;
  std::optional<typename ActiveSessions<State>::Taken> t;
  if (!id.empty()) t = active.take(id, prompt);
  if (!t) t = active.take(prompt);
  if (t && fit_capacity(t->state, st.max_positions)) {
    st = std::move(t->state);
    out.cached_tokens = t->tokens;
    out.active_hit = true;
    return out;
  }
  if (cache) {
    auto r = cache->resume(st, prompt);
    if (!r.ok()) return r.status();
    out.cached_tokens = r->cached_tokens;
  }
  return out;
}

}  // namespace dsv41::session
