// In-memory session tiers for the benches (what is measured is the model work; the stores have their own bench).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include <dsv41/session/block_key.hpp>

namespace dsv41::bench {

struct MapGlobal {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> m;
  uint64_t bytes = 0;
  Status put(const session::Key& k, const session::ModelIdentity&, std::span<const uint8_t> v) {
    bytes += v.size();
    m[{k.hi, k.lo}] = std::vector<uint8_t>(v.begin(), v.end());
    return Status::Ok();
  }
  Result<std::optional<std::vector<uint8_t>>> get(const session::Key& k, const session::ModelIdentity&) {
    auto it = m.find({k.hi, k.lo});
    if (it == m.end()) return std::optional<std::vector<uint8_t>>();
    return std::optional<std::vector<uint8_t>>(it->second);
  }
};
struct MapWindow {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> m;
  Status put(const session::Key& k, std::span<const uint8_t> v, double) {
    m[{k.hi, k.lo}] = std::vector<uint8_t>(v.begin(), v.end());
    return Status::Ok();
  }
  Result<std::optional<std::vector<uint8_t>>> get(const session::Key& k) {
    auto it = m.find({k.hi, k.lo});
    if (it == m.end()) return std::optional<std::vector<uint8_t>>();
    return std::optional<std::vector<uint8_t>>(it->second);
  }
};


}  // namespace dsv41::bench
