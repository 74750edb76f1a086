// Sessions across requests (session/session_cache.hpp) on the tiny-ced fixture: a second turn that repeats the
// first resumes from its stored blocks; with the windows kept the result is the cold prefill's exactly, with them
// expired SPEC §5 window replay rebuilds them; blocks of another model, damaged or out-of-order blocks are misses.
#include <catch2/catch.hpp>

#if __has_include(<xxhash.h>)  // the session headers use xxhash (Debian: libxxhash-dev)
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <type_traits>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/session/model_identity.hpp>
#include <dsv41/session/session_cache.hpp>

#include "fixture.hpp"

using namespace dsv41;
using namespace dsv41::session;

namespace {

// In-memory tiers with the interfaces SessionCache expects (the real ones: disk_store.hpp, window_pool.hpp).
// MapGlobal has no contains() (at_boundary reads blocks back with get); CheckedGlobal adds one.
struct MapGlobal {
  std::map<std::pair<uint64_t, uint64_t>, std::pair<ModelIdentity, std::vector<uint8_t>>> m;
  int puts = 0, gets = 0;
  Status put(const Key& k, const ModelIdentity& id, std::span<const uint8_t> v) {
    ++puts;
    m[{k.hi, k.lo}] = {id, std::vector<uint8_t>(v.begin(), v.end())};
    return Status::Ok();
  }
  Result<std::optional<std::vector<uint8_t>>> get(const Key& k, const ModelIdentity& id) {
    ++gets;
    auto it = m.find({k.hi, k.lo});
    if (it == m.end() || !(it->second.first == id)) return std::optional<std::vector<uint8_t>>();
    return std::optional<std::vector<uint8_t>>(it->second.second);
  }
};
struct CheckedGlobal : MapGlobal {
  int contains_calls = 0;
  Result<bool> contains(const Key& k, const ModelIdentity& id) {
    ++contains_calls;
    auto it = m.find({k.hi, k.lo});
    return Result<bool>(it != m.end() && it->second.first == id);
  }
};
struct MapWindow {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> m;
  Status put(const Key& k, std::span<const uint8_t> v, double) {
    m[{k.hi, k.lo}] = std::vector<uint8_t>(v.begin(), v.end());
    return Status::Ok();
  }
  Result<std::optional<std::vector<uint8_t>>> get(const Key& k) {
    auto it = m.find({k.hi, k.lo});
    if (it == m.end()) return std::optional<std::vector<uint8_t>>();
    return std::optional<std::vector<uint8_t>>(it->second);
  }
};

using M = Model<configs::TinyCed>;
constexpr ModelIdentity kId{0x1234, 0x5678, kCacheFormatVersion};

bool same_caches(const SequenceState& a, const SequenceState& b) {
  if (a.pos != b.pos || a.history != b.history) return false;
  for (size_t l = 0; l < a.layers.size(); ++l)
    if (a.layers[l].ring != b.layers[l].ring || a.layers[l].comp != b.layers[l].comp ||
        a.layers[l].ikeys != b.layers[l].ikeys || a.layers[l].n_entries != b.layers[l].n_entries ||
        a.layers[l].pend_kv != b.layers[l].pend_kv)
      return false;
  return true;
}

}  // namespace

TEST_CASE("block size must keep the compressors' groups whole", "[session]") {
  const M& m = test::tiny_ced();
  CHECK(block_granule(m.shape()) == 2);  // tiny-ced's ratios are 2 and 1
  CHECK(check_block_size(m.shape(), 16).ok());
  CHECK(check_block_size(m.shape(), 15).code() == Code::invalid_argument);
  CHECK(check_block_size(m.shape(), 0).code() == Code::invalid_argument);
}

TEST_CASE("chained keys depend on every earlier token and on the model", "[session]") {
  const auto a = test::tiny_prompt(48, 1), b = [&] { auto v = a; v[3] ^= 1; return v; }();
  const Key k0 = block_key({}, kId, std::span(a).first(16));
  const Key k1 = block_key(k0, kId, std::span(a).subspan(16, 16));
  CHECK(!(k0 == k1));
  CHECK(block_key({}, kId, std::span(b).first(16)) != k0);
  const Key kb1 = block_key(block_key({}, kId, std::span(b).first(16)), kId, std::span(b).subspan(16, 16));
  CHECK(!(kb1 == k1));  // same tokens in block 1, different parent
  ModelIdentity other = kId;
  other.weights_digest ^= 1;
  CHECK(!(block_key({}, other, std::span(a).first(16)) == k0));
  CHECK(Key::from_hex(k1.hex()).value() == k1);
}

TEST_CASE("a second turn resumes from the stored blocks: exactly the cold prefill with the windows kept", "[session]") {
  const M& m = test::tiny_ced();
  MapGlobal g;
  MapWindow w;
  SessionCache<M, MapGlobal, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, false});
  const auto turn1 = test::tiny_prompt(50, 3);
  SequenceState s1 = m.new_sequence(128);
  std::vector<float> l1;
  REQUIRE(cache.prefill(s1, turn1, &l1).ok());
  CHECK(g.m.size() == 3);  // blocks [0,16), [16,32), [32,48)
  CHECK(w.m.size() == 3);
  // Turn 2 repeats turn 1 and adds 12 tokens.
  auto turn2 = turn1;
  for (int i = 0; i < 12; ++i) turn2.push_back(int32_t(7 + 11 * i));
  SequenceState cold = m.new_sequence(128);
  std::vector<float> want;
  REQUIRE(m.prefill(cold, turn2, &want).ok());

  SequenceState s2 = m.new_sequence(128);
  auto info = cache.resume(s2, turn2);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 48);
  CHECK(info->blocks == 3);
  CHECK(info->window_hit);
  CHECK(info->replayed_tokens == 0);
  std::vector<float> got;
  REQUIRE(m.prefill(s2, std::span(turn2).subspan(48), &got).ok());
  CHECK(got == want);
  CHECK(same_caches(s2, cold));
}

TEST_CASE("at_boundary stores a block once: contains() when the tier has it, else get", "[session]") {
  const M& m = test::tiny_ced();
  const auto toks = test::tiny_prompt(50, 4);
  auto run_twice = [&](auto& g) {
    MapWindow w;
    SessionCache<M, std::remove_reference_t<decltype(g)>, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, false});
    for (int turn = 0; turn < 2; ++turn) {
      SequenceState s = m.new_sequence(128);
      REQUIRE(cache.prefill(s, toks).ok());
    }
  };
  CheckedGlobal c;
  run_twice(c);
  CHECK(c.m.size() == 3);
  CHECK(c.puts == 3);            // the second prefill found every block stored
  CHECK(c.contains_calls == 6);  // 3 boundaries per prefill
  CHECK(c.gets == 0);            // no block read back to learn that
  MapGlobal g;
  run_twice(g);
  CHECK(g.m.size() == 3);
  CHECK(g.puts == 3);
  CHECK(g.gets == 6);
}

TEST_CASE("windows expired: the global KV comes back and window replay rebuilds the rings", "[session]") {
  const M& m = test::tiny_ced();
  MapGlobal g;
  MapWindow w;
  SessionCache<M, MapGlobal, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, false});
  const auto turn1 = test::tiny_prompt(40, 4);
  SequenceState s1 = m.new_sequence(128);
  REQUIRE(cache.prefill(s1, turn1).ok());
  w.m.clear();  // the window tier's TTL passed
  auto turn2 = turn1;
  for (int i = 0; i < 9; ++i) turn2.push_back(int32_t(20 + 13 * i));
  SequenceState s2 = m.new_sequence(128);
  auto info = cache.resume(s2, turn2);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 32);
  CHECK(!info->window_hit);
  CHECK(info->replayed_tokens == m.shape().sliding_window);
  // The same as dropping the windows of a cold state at 32 and replaying them there.
  SequenceState ref = m.new_sequence(128);
  REQUIRE(m.prefill(ref, std::span(turn2).first(32)).ok());
  ref.drop_windows();
  const int64_t need = std::min<int64_t>(32, m.shape().sliding_window + m.shape().engram_max_ngram_size - 1);
  REQUIRE(m.replay_window(ref, std::span(turn2).subspan(size_t(32 - need), size_t(need))).ok());
  CHECK(same_caches(s2, ref));
  std::vector<float> got, cold_logits;
  REQUIRE(m.prefill(s2, std::span(turn2).subspan(32), &got).ok());
  SequenceState cold = m.new_sequence(128);
  REQUIRE(m.prefill(cold, turn2, &cold_logits).ok());
  double n = 0, d = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    n += double(got[i] - cold_logits[i]) * (got[i] - cold_logits[i]);
    d += double(cold_logits[i]) * cold_logits[i];
  }
  WARN("window-expired resume vs cold prefill, last-row logits rel diff " << std::sqrt(n / d));
  CHECK(std::isfinite(std::sqrt(n / d)));
}

TEST_CASE("the exact path runs cold when the windows are gone", "[session]") {
  const M& m = test::tiny_ced();
  MapGlobal g;
  MapWindow w;
  SessionCache<M, MapGlobal, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, true});
  const auto p = test::tiny_prompt(40, 5);
  SequenceState s1 = m.new_sequence(128);
  REQUIRE(cache.prefill(s1, p).ok());
  w.m.clear();
  SequenceState s2 = m.new_sequence(128);
  auto info = cache.resume(s2, p);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 0);
  CHECK(s2.pos == 0);
  CHECK(s2.global_cache_bytes() == 0);
}

TEST_CASE("blocks of another model, damaged or missing blocks are misses", "[session]") {
  const M& m = test::tiny_ced();
  MapGlobal g;
  MapWindow w;
  SessionCache<M, MapGlobal, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, false});
  const auto p = test::tiny_prompt(50, 6);
  SequenceState s1 = m.new_sequence(128);
  REQUIRE(cache.prefill(s1, p).ok());
  {  // another model's identity finds nothing
    ModelIdentity other = kId;
    other.config_digest ^= 1;
    SessionCache<M, MapGlobal, MapWindow> c2(m, other, g, w, SessionOptions{16, 600, false});
    SequenceState s = m.new_sequence(128);
    auto info = c2.resume(s, p);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 0);
  }
  const auto k = cache.keys(p);
  {  // block 1 truncated: resume stops after block 0 (its windows are still kept)
    auto& v = g.m[{k[1].hi, k[1].lo}].second;
    v.resize(v.size() / 2);
    SequenceState s = m.new_sequence(128);
    auto info = cache.resume(s, p);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 16);
    CHECK(info->window_hit);
    SequenceState ref = m.new_sequence(128);
    REQUIRE(m.prefill(ref, std::span(p).first(16)).ok());
    CHECK(same_caches(s, ref));
  }
  {  // block 0 missing: nothing reusable
    g.m.erase({k[0].hi, k[0].lo});
    SequenceState s = m.new_sequence(128);
    auto info = cache.resume(s, p);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 0);
    CHECK(s.pos == 0);
  }
}

TEST_CASE("a damaged window payload is a miss and falls back to window replay", "[session]") {
  const M& m = test::tiny_ced();
  MapGlobal g;
  MapWindow w;
  SessionCache<M, MapGlobal, MapWindow> cache(m, kId, g, w, SessionOptions{16, 600, false});
  const auto p = test::tiny_prompt(34, 8);
  SequenceState s1 = m.new_sequence(128);
  REQUIRE(cache.prefill(s1, p).ok());
  for (auto& [k, v] : w.m) v.pop_back();
  SequenceState s = m.new_sequence(128);
  auto info = cache.resume(s, p);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 32);
  CHECK(!info->window_hit);
  CHECK(info->replayed_tokens > 0);
}

TEST_CASE("a model directory's identity: stable, and changed by its config or weights", "[session]") {
  namespace fs = std::filesystem;
  const std::string src = std::string(DSV41_FIXTURES) + "/tiny-ced";
  auto a = model_identity(src), b = model_identity(src);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(*a == *b);
  const fs::path tmp = fs::temp_directory_path() / "dsv41_identity_test";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fs::copy_file(src + "/config.json", tmp / "config.json");
  fs::copy_file(src + "/model.safetensors", tmp / "model.safetensors");
  fs::copy_file(src + "/engram_token_map.safetensors", tmp / "engram_token_map.safetensors");  // part of the model
  auto c = model_identity(tmp.string());
  REQUIRE(c.ok());
  CHECK(*c == *a);
  {  // one byte of the weights' last sample (the file's end) flipped
    std::fstream f(tmp / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char x = 0;
    f.read(&x, 1);
    f.seekp(-1, std::ios::end);
    x = char(x ^ 1);
    f.write(&x, 1);
  }
  auto d = model_identity(tmp.string());
  REQUIRE(d.ok());
  CHECK(d->config_digest == a->config_digest);
  CHECK(d->weights_digest != a->weights_digest);
  std::ofstream(tmp / "config.json", std::ios::app) << " ";
  auto e = model_identity(tmp.string());
  REQUIRE(e.ok());
  CHECK(e->config_digest != a->config_digest);
  CHECK(!model_identity((tmp / "missing").string()).ok());
  fs::remove_all(tmp);
}

#else
TEST_CASE("session cache needs xxhash.h", "[session]") { WARN("xxhash.h not found: session tests not built"); }
#endif
