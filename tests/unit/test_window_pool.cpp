// WindowPool: LRU under a byte budget, TTL per entry, checksum-verified values, thread safety.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <thread>
#include <unistd.h>
#include <vector>

#include "dsv41/session/window_pool.hpp"

using namespace dsv41;
using namespace dsv41::session;

namespace {

Key key_of(uint64_t i) {
  const int32_t tok[1] = {int32_t(i)};
  return block_key(Key{}, ModelIdentity{1, 2}, tok);
}

// n bytes that depend on (seed, position), so a value returned for the wrong key or truncated shows.
Bytes bytes_of(uint64_t seed, size_t n) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t((seed * 131 + i * 7 + (i >> 8)) & 0xff);
  return b;
}

struct FakeTime {
  double t = 1000.0;
  static double now(void* ctx) { return static_cast<FakeTime*>(ctx)->t; }
  Clock clock() { return Clock{&FakeTime::now, this}; }
};

bool holds(WindowPool& p, const Key& k) {
  auto r = p.get(k);
  REQUIRE(r.ok());
  return r->has_value();
}

// Flips stored bytes through the pool's fault-injection accessor.
class CorruptiblePool : public WindowPool {
 public:
  using WindowPool::WindowPool;
  bool flip(const Key& k, size_t at) {
    return with_stored_bytes(k, [&](std::span<uint8_t> b) { b[at] ^= 0x01; });
  }
};

}  // namespace

TEST_CASE("window pool: round trip, miss, erase, stats", "[window_pool]") {
  WindowPool p({.budget_bytes = 1 << 20, .ttl_s = 60, .clock = {}});
  const Bytes a = bytes_of(1, 1000), b = bytes_of(2, 333), empty;
  REQUIRE(p.put(key_of(1), a).ok());
  REQUIRE(p.put(key_of(2), b, 5.0).ok());
  REQUIRE(p.put(key_of(3), empty).ok());
  auto ra = p.get(key_of(1));
  REQUIRE(ra.ok());
  REQUIRE(ra->has_value());
  CHECK(**ra == a);
  auto rb = p.get(key_of(2));
  REQUIRE((rb.ok() && rb->has_value()));
  CHECK(**rb == b);
  auto re = p.get(key_of(3));
  REQUIRE((re.ok() && re->has_value()));
  CHECK((*re)->empty());
  auto rm = p.get(key_of(4));
  REQUIRE(rm.ok());
  CHECK_FALSE(rm->has_value());

  WindowPoolStats s = p.stats();
  CHECK(s.entries == 3);
  CHECK(s.bytes == 1333);
  CHECK(s.hits == 3);
  CHECK(s.misses == 1);
  CHECK(s.evicted == 0);

  // Replacing a key keeps one entry and counts the new size only.
  const Bytes a2 = bytes_of(7, 10);
  REQUIRE(p.put(key_of(1), a2).ok());
  CHECK(p.stats().entries == 3);
  CHECK(p.stats().bytes == 343);
  auto ra2 = p.get(key_of(1));
  REQUIRE((ra2.ok() && ra2->has_value()));
  CHECK(**ra2 == a2);

  REQUIRE(p.erase(key_of(1)).ok());
  REQUIRE(p.erase(key_of(99)).ok());  // absent: fine
  CHECK_FALSE(holds(p, key_of(1)));
  CHECK(p.stats().entries == 2);
  CHECK(p.stats().bytes == 333);
  CHECK(std::string(p.name()) == "window_pool");
}

TEST_CASE("window pool: LRU eviction order under the budget, get refreshes recency", "[window_pool]") {
  WindowPool p({.budget_bytes = 100, .ttl_s = 60, .clock = {}});
  REQUIRE(p.put(key_of(1), bytes_of(1, 40)).ok());
  REQUIRE(p.put(key_of(2), bytes_of(2, 40)).ok());
  REQUIRE(holds(p, key_of(1)));                     // 1 is now more recent than 2
  REQUIRE(p.put(key_of(3), bytes_of(3, 40)).ok());  // 120 > 100: evicts 2
  CHECK(p.stats().evicted == 1);
  CHECK(p.stats().bytes == 80);
  CHECK_FALSE(holds(p, key_of(2)));
  // Least recent first now: 1 (its get came before 3's put), then 3; the miss on 2 changed nothing.
  REQUIRE(p.put(key_of(4), bytes_of(4, 40)).ok());  // evicts 1
  CHECK(p.stats().evicted == 2);
  CHECK(holds(p, key_of(3)));
  CHECK(holds(p, key_of(4)));
  CHECK_FALSE(holds(p, key_of(1)));
  // One value filling the whole budget evicts everything else.
  REQUIRE(p.put(key_of(5), bytes_of(5, 100)).ok());
  CHECK(p.stats().entries == 1);
  CHECK(p.stats().bytes == 100);
  CHECK(p.stats().evicted == 4);
  auto r = p.get(key_of(5));
  REQUIRE((r.ok() && r->has_value()));
  CHECK(**r == bytes_of(5, 100));
}

TEST_CASE("window pool: TTL expiry with an injected clock", "[window_pool]") {
  FakeTime ft;
  WindowPool p({.budget_bytes = 1000, .ttl_s = 10, .clock = ft.clock()});
  REQUIRE(p.put(key_of(1), bytes_of(1, 50)).ok());       // expires at +10
  REQUIRE(p.put(key_of(2), bytes_of(2, 50), 30).ok());   // expires at +30
  ft.t += 9.5;
  CHECK(holds(p, key_of(1)));  // a hit refreshes recency, not the TTL
  ft.t += 1.0;                 // +10.5
  CHECK_FALSE(holds(p, key_of(1)));
  CHECK(p.stats().expired == 1);
  CHECK(p.stats().entries == 1);
  CHECK(p.stats().bytes == 50);
  CHECK(holds(p, key_of(2)));

  // Expired entries are reclaimed on put without a get.
  REQUIRE(p.put(key_of(3), bytes_of(3, 20), 1).ok());
  REQUIRE(p.put(key_of(4), bytes_of(4, 20), 2).ok());
  ft.t += 1.5;
  REQUIRE(p.put(key_of(5), bytes_of(5, 20), 100).ok());  // reclaims 3
  CHECK(p.stats().expired == 2);
  CHECK(p.stats().entries == 3);  // 2, 4, 5
  ft.t += 30;                     // 2 and 4 gone, 5 not
  CHECK(p.reclaim_expired() == 2);
  CHECK(p.stats().entries == 1);
  CHECK(p.stats().bytes == 20);
  CHECK(holds(p, key_of(5)));

  // Bad TTLs are refused.
  CHECK(p.put(key_of(6), bytes_of(6, 1), 0).code() == Code::invalid_argument);
  CHECK(p.put(key_of(6), bytes_of(6, 1), -1).code() == Code::invalid_argument);
  CHECK(p.put(key_of(6), bytes_of(6, 1), std::nan("")).code() == Code::invalid_argument);
  CHECK(p.stats().entries == 1);
}

TEST_CASE("window pool: a value larger than the budget is refused, the pool unchanged", "[window_pool]") {
  WindowPool p({.budget_bytes = 100, .ttl_s = 60, .clock = {}});
  REQUIRE(p.put(key_of(1), bytes_of(1, 60)).ok());
  const Status s = p.put(key_of(2), bytes_of(2, 101));
  CHECK(s.code() == Code::invalid_argument);
  CHECK(s.message().find("101") != std::string::npos);
  CHECK(s.message().find("budget of 100") != std::string::npos);
  CHECK(p.stats().entries == 1);
  CHECK(p.stats().evicted == 0);
  CHECK(holds(p, key_of(1)));
}

TEST_CASE("window pool: default budget is 10% of physical memory", "[window_pool]") {
  WindowPool p;
  const uint64_t phys = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  CHECK(p.budget_bytes() == phys / 10);
  CHECK(p.budget_bytes() > 0);
}

TEST_CASE("window pool: a corrupted stored value is a miss and is dropped", "[window_pool]") {
  CorruptiblePool p({.budget_bytes = 1000, .ttl_s = 60, .clock = {}});
  REQUIRE(p.put(key_of(1), bytes_of(1, 200)).ok());
  REQUIRE(p.put(key_of(2), bytes_of(2, 200)).ok());
  REQUIRE(p.flip(key_of(1), 123));
  CHECK_FALSE(p.flip(key_of(3), 0));
  CHECK_FALSE(holds(p, key_of(1)));
  WindowPoolStats s = p.stats();
  CHECK(s.corrupt == 1);
  CHECK(s.misses == 1);
  CHECK(s.entries == 1);
  CHECK(s.bytes == 200);
  auto r = p.get(key_of(2));
  REQUIRE((r.ok() && r->has_value()));
  CHECK(**r == bytes_of(2, 200));
}

TEST_CASE("window pool: concurrent put/get from 4 threads stays consistent", "[window_pool][tsan]") {
  // 64 keys, each value a function of its key; a budget of ~20 values forces eviction all the time.
  constexpr int kThreads = 4, kOps = 3000, kKeys = 64;
  auto size_of = [](int k) { return size_t(100 + 13 * k); };
  WindowPool p({.budget_bytes = 20 * 500, .ttl_s = 60, .clock = {}});
  std::atomic<uint64_t> gets{0}, hits{0}, wrong{0}, errors{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(t + 1);
      for (int i = 0; i < kOps; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int k = int(x % kKeys);
        if (x & 0x100) {
          if (!p.put(key_of(k), bytes_of(k, size_of(k))).ok()) ++errors;
        } else if ((x & 0xf000) == 0) {
          if (!p.erase(key_of(k)).ok()) ++errors;
        } else {
          auto r = p.get(key_of(k));
          ++gets;
          if (!r.ok()) {
            ++errors;
          } else if (r->has_value()) {
            ++hits;
            if (**r != bytes_of(k, size_of(k))) ++wrong;
          }
        }
      }
    });
  for (auto& th : ts) th.join();
  CHECK(errors == 0);
  CHECK(wrong == 0);
  WindowPoolStats s = p.stats();
  CHECK(s.hits + s.misses == gets.load());
  CHECK(s.hits == hits.load());
  CHECK(s.hits > 0);
  CHECK(s.evicted > 0);
  CHECK(s.bytes <= p.budget_bytes());
  // The byte count matches what is really held.
  uint64_t held = 0, n = 0;
  for (int k = 0; k < kKeys; ++k) {
    auto r = p.get(key_of(k));
    REQUIRE(r.ok());
    if (r->has_value()) {
      CHECK(**r == bytes_of(k, size_of(k)));
      held += (*r)->size();
      ++n;
    }
  }
  CHECK(held == s.bytes);
  CHECK(n == s.entries);
}
