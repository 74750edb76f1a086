// Sessions through the real tiers (session/disk_store.hpp, window_pool.hpp) on tiny-ced: a second turn resumes
// from the disk store after the process's store objects are gone (a new DiskStore on the same directory), its
// windows from the pool while their TTL lasts, by window replay after it, and cold once the disk's retention passed.
#include <catch2/catch.hpp>

#if __has_include(<xxhash.h>)  // the session headers use xxhash (Debian: libxxhash-dev)
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include <dsv41/model/model.hpp>
#include <dsv41/session/disk_store.hpp>
#include <dsv41/session/session_cache.hpp>
#include <dsv41/session/window_pool.hpp>

#include "fixture.hpp"

using namespace dsv41;
using namespace dsv41::session;

namespace {
struct FakeTime {
  double t = 1.7e9;
  static double now(void* c) { return static_cast<FakeTime*>(c)->t; }
  Clock clock() { return Clock{&FakeTime::now, this}; }
};
using M = Model<configs::TinyCed>;
constexpr ModelIdentity kId{0xabc, 0xdef, kCacheFormatVersion};

// A value that names its writer, key and sequence number and ends with the checksum of the rest, so a reader can
// tell it is exactly what one put wrote (and for this key).
std::vector<uint8_t> value_of(uint32_t writer, uint32_t key, uint32_t seq) {
  std::vector<uint8_t> v(12 + 64 + (key * 37 + seq * 11) % 900 + 8);
  const uint32_t head[3] = {writer, key, seq};
  std::memcpy(v.data(), head, 12);
  uint32_t x = writer * 2654435761u ^ key * 40503u ^ seq * 97u;
  for (size_t i = 12; i + 8 < v.size(); ++i) v[i] = uint8_t((x = x * 1664525u + 1013904223u) >> 24);
  const uint64_t sum = checksum(std::span<const uint8_t>(v.data(), v.size() - 8));
  std::memcpy(v.data() + v.size() - 8, &sum, 8);
  return v;
}
// True when v is exactly value_of(w, key, s) for some writer w and sequence s.
bool written_for(const std::vector<uint8_t>& v, uint32_t key) {
  if (v.size() < 20) return false;
  uint32_t head[3];
  std::memcpy(head, v.data(), 12);
  return head[1] == key && v == value_of(head[0], head[1], head[2]);
}
Key key_of(uint32_t k) {
  const int32_t t[2] = {int32_t(k), 77};
  return block_key(Key{}, kId, t);
}
}  // namespace

TEST_CASE("a session resumes through the disk store and the window pool", "[session][disk_store][window_pool]") {
  namespace fs = std::filesystem;
  const M& m = test::tiny_ced();
  const fs::path dir = fs::temp_directory_path() / "dsv41_session_tiers";
  fs::remove_all(dir);
  FakeTime time;
  WindowPoolOptions po;
  po.budget_bytes = 8 << 20;
  po.ttl_s = 600;
  po.clock = time.clock();
  WindowPool pool(po);
  const auto turn1 = test::tiny_prompt(50, 11);
  auto turn2 = turn1;
  for (int i = 0; i < 10; ++i) turn2.push_back(int32_t(5 + 17 * i));
  std::vector<float> want;
  SequenceState cold = m.new_sequence(128);
  REQUIRE(m.prefill(cold, turn2, &want).ok());
  DiskStoreOptions dopt;
  dopt.clock = time.clock();
  {
    auto disk = DiskStore::open(dir.string(), dopt);
    REQUIRE(disk.ok());
    SessionCache<M, DiskStore, Connector> cache(m, kId, *disk, pool, SessionOptions{16, 600, false});
    SequenceState s1 = m.new_sequence(128);
    REQUIRE(cache.prefill(s1, turn1).ok());
  }
  auto disk = DiskStore::open(dir.string(), dopt);  // the index rebuilt from the directory
  REQUIRE(disk.ok());
  SessionCache<M, DiskStore, Connector> cache(m, kId, *disk, pool, SessionOptions{16, 600, false});
  {  // windows still in the pool: exactly the cold prefill
    SequenceState s = m.new_sequence(128);
    auto info = cache.resume(s, turn2);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 48);
    CHECK(info->window_hit);
    std::vector<float> got;
    REQUIRE(m.prefill(s, std::span(turn2).subspan(48), &got).ok());
    CHECK(got == want);
  }
  time.t += 601;  // the pool's TTL passed, the disk's retention (72 h) did not
  {
    SequenceState s = m.new_sequence(128);
    auto info = cache.resume(s, turn2);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 48);
    CHECK(!info->window_hit);
    CHECK(info->replayed_tokens == m.shape().sliding_window);
  }
  time.t += 72 * 3600;  // now the disk's too
  REQUIRE(disk->evict().ok());
  {
    SequenceState s = m.new_sequence(128);
    auto info = cache.resume(s, turn2);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 0);
  }
  fs::remove_all(dir);
}
TEST_CASE("at_boundary on an already stored block leaves its file alone", "[session][disk_store]") {
  namespace fs = std::filesystem;
  const M& m = test::tiny_ced();
  const fs::path dir = fs::temp_directory_path() / "dsv41_session_tiers_once";
  fs::remove_all(dir);
  auto disk = DiskStore::open(dir.string());
  REQUIRE(disk.ok());
  WindowPool pool(WindowPoolOptions{8 << 20, 600, {}});
  SessionCache<M, DiskStore, Connector> cache(m, kId, *disk, pool, SessionOptions{16, 600, false});
  const auto toks = test::tiny_prompt(40, 5);
  SequenceState s1 = m.new_sequence(64);
  REQUIRE(cache.prefill(s1, toks).ok());
  const auto keys = cache.keys(toks);
  REQUIRE(keys.size() == 2);
  struct stat before[2], after[2];
  for (size_t i = 0; i < 2; ++i) REQUIRE(::stat(disk->path_of(keys[i]).c_str(), &before[i]) == 0);
  const auto hits = disk->stats().hits;
  SequenceState s2 = m.new_sequence(64);
  REQUIRE(cache.prefill(s2, toks).ok());  // passes the same two boundaries again
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(::stat(disk->path_of(keys[i]).c_str(), &after[i]) == 0);
    CHECK(after[i].st_ino == before[i].st_ino);  // a put would have renamed a new file into place
    CHECK(after[i].st_mtim.tv_sec == before[i].st_mtim.tv_sec);
    CHECK(after[i].st_mtim.tv_nsec == before[i].st_mtim.tv_nsec);
  }
  CHECK(disk->stats().hits == hits);  // contains(), not get(): no block read back
  fs::remove_all(dir);
}

TEST_CASE("disk store and window pool: 4 threads put and get distinct and shared keys", "[session][disk_store][window_pool][tsan]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dsv41_session_threads_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  DiskStoreOptions dopt;
  dopt.fsync = false;  // the bare write path: this checks the locking, not durability
  auto disk = DiskStore::open(dir.string(), dopt);
  REQUIRE(disk.ok());
  WindowPool pool(WindowPoolOptions{64 << 10, 600, {}});  // ~100 values: evicts all the time
  constexpr int kThreads = 4, kDiskOps = 150, kPoolOps = 3000, kShared = 6;
  std::atomic<int> disk_hits{0}, pool_hits{0}, wrong{0}, errors{0};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&, t] {
      uint64_t x = 0x9E3779B97F4A7C15ull * uint64_t(t + 1);
      auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
      auto pick = [&] {  // a shared key or one of this thread's own
        const uint64_t r = next();
        return (r & 1) ? uint32_t(r >> 8) % kShared : uint32_t(100 + 100 * t) + uint32_t(r >> 8) % 20;
      };
      for (int i = 0; i < kDiskOps; ++i) {
        const uint32_t k = pick();
        const uint64_t op = next() % 3;
        if (op == 0) {
          if (!disk->put(key_of(k), kId, value_of(uint32_t(t), k, uint32_t(i))).ok()) ++errors;
        } else if (op == 1) {
          auto r = disk->get(key_of(k), kId);
          if (!r.ok()) ++errors;
          else if (*r && !written_for(**r, k)) ++wrong;
          else if (*r) ++disk_hits;
        } else {
          if (!disk->contains(key_of(k), kId).ok()) ++errors;
        }
      }
      for (int i = 0; i < kPoolOps; ++i) {
        const uint32_t k = pick();
        if (next() & 1) {
          if (!pool.put(key_of(k), value_of(uint32_t(t), k, uint32_t(i)), 600).ok()) ++errors;
        } else {
          auto r = pool.get(key_of(k));
          if (!r.ok()) ++errors;
          else if (*r && !written_for(**r, k)) ++wrong;
          else if (*r) ++pool_hits;
        }
      }
    });
  for (auto& x : th) x.join();
  CHECK(errors == 0);
  CHECK(wrong == 0);
  CHECK(disk_hits > 0);
  CHECK(pool_hits > 0);
  // Afterwards every stored block reads back whole, and the index agrees with the directory.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    CHECK(name.rfind(kDiskTempPrefix, 0) != 0);  // no temp file left
    ++files;
  }
  CHECK(disk->stats().entries == files);
  for (uint32_t k : {0u, 1u, 2u, 3u, 4u, 5u}) {
    auto r = disk->get(key_of(k), kId);
    REQUIRE(r.ok());
    if (*r) CHECK(written_for(**r, k));
  }
  fs::remove_all(dir);
}
#else
TEST_CASE("session tiers need xxhash.h", "[session]") { WARN("xxhash.h not found: session tier tests not built"); }
#endif
