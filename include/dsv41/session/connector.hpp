// A key-value tier with expiry for a session's stored blocks (SPEC §6 caches between requests): the in-process
// WindowPool (window_pool.hpp) or a shared store such as RedisConnector (redis_connector.hpp) when one machine is
// not enough. Values are opaque bytes. Implementations verify what they return: a damaged value is a miss, never
// wrong bytes. The implementations here (WindowPool, RedisConnector) are thread-safe; a SessionCache shared by
// threads needs that of any other.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dsv41/core/status.hpp"
#include "dsv41/session/block_key.hpp"

namespace dsv41::session {

using Bytes = std::vector<uint8_t>;

class Connector {
 public:
  virtual ~Connector() = default;
  // Stores a copy of value under key for ttl_s seconds (finite, > 0), replacing any earlier value of key.
  virtual Status put(const Key& key, std::span<const uint8_t> value, double ttl_s) = 0;
  // The value of key, or std::nullopt on a miss (absent, expired, or failing its checksum). An error only when the
  // tier itself could not be asked (e.g. the server is unreachable).
  virtual Result<std::optional<Bytes>> get(const Key& key) = 0;
  // Removes key; an absent key is not an error.
  virtual Status erase(const Key& key) = 0;
  // A short name for logs ("window_pool", "redis").
  virtual const char* name() const = 0;
};

}  // namespace dsv41::session
