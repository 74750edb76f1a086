// Sessions through the real tiers (session/disk_store.hpp, window_pool.hpp) on tiny-ced: a second turn resumes
// from the disk store after the process's store objects are gone (a new DiskStore on the same directory), its
// windows from the pool while their TTL lasts, by window replay after it, and cold once the disk's retention passed.
#include <catch2/catch.hpp>

#if __has_include(<xxhash.h>)  // the session headers use xxhash (Debian: libxxhash-dev)
#include <filesystem>
#include <vector>

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
#else
TEST_CASE("session tiers need xxhash.h", "[session]") { WARN("xxhash.h not found: session tier tests not built"); }
#endif
