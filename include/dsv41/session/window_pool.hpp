// The embedded, in-process Connector: keeps sessions' window KV (the per-layer rings of the last W positions) in
// host DRAM for a few minutes so that a returning session skips its prefill. LRU under a byte budget, a TTL per
// entry, every value stored with its XXH3-64 checksum and verified on get. Thread-safe: every method may be called
// from several threads at once (one mutex; values are copied in and out under it).
#pragma once
#include <cmath>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <unistd.h>

#include "dsv41/core/status.hpp"
#include "dsv41/session/block_key.hpp"
#include "dsv41/session/connector.hpp"

namespace dsv41::session {

struct WindowPoolOptions {
  uint64_t budget_bytes = 0;  // bytes of values held at most; 0: 10% of physical memory (sysconf)
  double ttl_s = 600;         // the TTL of put(key, value)
  Clock clock;                // time source for expiry (tests inject their own)
};

struct WindowPoolStats {
  uint64_t entries = 0, bytes = 0;  // held now (bytes: of values only)
  uint64_t hits = 0, misses = 0;    // get results (an expired or corrupt entry counts as a miss too)
  uint64_t expired = 0;             // entries reclaimed because their TTL passed
  uint64_t evicted = 0;             // entries dropped to make room (least recently used first)
  uint64_t corrupt = 0;             // entries dropped because their checksum no longer matched
};

// 10% of physical memory, or 1 GiB where sysconf cannot tell.
inline uint64_t default_window_pool_budget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return uint64_t(1) << 30;
  return uint64_t(pages) * uint64_t(page) / 10;
}

class WindowPool : public Connector {
 public:
  explicit WindowPool(WindowPoolOptions opt = {})
      : budget_(opt.budget_bytes ? opt.budget_bytes : default_window_pool_budget()),
        ttl_s_(opt.ttl_s),
        clock_(opt.clock) {}

  // Evicts least recently used entries until value fits. A value larger than the whole budget is refused
  // (invalid_argument) and the pool is left as it was.
  Status put(const Key& key, std::span<const uint8_t> value, double ttl_s) override {
    if (!(ttl_s > 0) || !std::isfinite(ttl_s))
      return error(Code::invalid_argument, "window_pool: ttl_s must be finite and > 0, got " + std::to_string(ttl_s));
    if (value.size() > budget_)
      return error(Code::invalid_argument, "window_pool: value of " + std::to_string(value.size()) +
                                               " bytes exceeds the pool budget of " + std::to_string(budget_) +
                                               " bytes");
    Entry e{key, Bytes(value.begin(), value.end()), checksum(value), 0, {}};
    const double now = clock_();
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) drop_(it->second);
    reclaim_expired_(now);
    while (bytes_ + value.size() > budget_ && !lru_.empty()) {
      drop_(std::prev(lru_.end()));
      ++evicted_;
    }
    e.expires_at = now + ttl_s;
    lru_.push_front(std::move(e));
    const auto node = lru_.begin();
    node->by_expiry = by_expiry_.emplace(node->expires_at, key);
    index_.emplace(key, node);
    bytes_ += value.size();
    return Status::Ok();
  }

  // put with the pool's TTL (WindowPoolOptions::ttl_s).
  Status put(const Key& key, std::span<const uint8_t> value) { return put(key, value, ttl_s_); }

  // A hit makes the entry most recently used; its TTL still counts from its put.
  Result<std::optional<Bytes>> get(const Key& key) override {
    const double now = clock_();
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return miss_();
    const auto node = it->second;
    if (now >= node->expires_at) {
      drop_(node);
      ++expired_;
      return miss_();
    }
    if (checksum(node->bytes) != node->sum) {
      drop_(node);
      ++corrupt_;
      return miss_();
    }
    lru_.splice(lru_.begin(), lru_, node);
    ++hits_;
    return Result<std::optional<Bytes>>(std::optional<Bytes>(node->bytes));
  }

  Status erase(const Key& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) drop_(it->second);
    return Status::Ok();
  }

  const char* name() const override { return "window_pool"; }

  // Drops every entry whose TTL has passed (put does this too); returns how many.
  uint64_t reclaim_expired() {
    const double now = clock_();
    std::lock_guard<std::mutex> lock(mu_);
    return reclaim_expired_(now);
  }

  WindowPoolStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return WindowPoolStats{uint64_t(index_.size()), bytes_, hits_, misses_, expired_, evicted_, corrupt_};
  }
  uint64_t budget_bytes() const { return budget_; }

 protected:
  // Debugging / fault-injection accessor for subclasses: calls f(std::span<uint8_t>) on the stored bytes of key
  // under the lock (the checksum is not updated, so changed bytes read as corrupt). False if key is not held.
  template <class F>
  bool with_stored_bytes(const Key& key, F&& f) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) return false;
    f(std::span<uint8_t>(it->second->bytes));
    return true;
  }

 private:
  struct Entry {
    Key key;
    Bytes bytes;
    uint64_t sum = 0;
    double expires_at = 0;
    std::multimap<double, Key>::iterator by_expiry;
  };
  using Node = std::list<Entry>::iterator;

  Result<std::optional<Bytes>> miss_() {
    ++misses_;
    return Result<std::optional<Bytes>>(std::optional<Bytes>());
  }
  void drop_(Node n) {
    bytes_ -= n->bytes.size();
    by_expiry_.erase(n->by_expiry);
    index_.erase(n->key);
    lru_.erase(n);
  }
  uint64_t reclaim_expired_(double now) {
    uint64_t n = 0;
    while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
      const auto it = index_.find(by_expiry_.begin()->second);
      if (it == index_.end()) {  // cannot happen: every expiry record has its entry
        by_expiry_.erase(by_expiry_.begin());
        continue;
      }
      drop_(it->second);
      ++n;
    }
    expired_ += n;
    return n;
  }

  const uint64_t budget_;
  const double ttl_s_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<Key, Node, KeyHash> index_;
  std::multimap<double, Key> by_expiry_;  // expiry time -> key, soonest first
  uint64_t bytes_ = 0, hits_ = 0, misses_ = 0, expired_ = 0, evicted_ = 0, corrupt_ = 0;
};

}  // namespace dsv41::session
