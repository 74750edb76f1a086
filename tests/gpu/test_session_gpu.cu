// GPU sessions (session/session_cache.hpp over Model<Config, Cuda>, backend/cuda/session_state.hpp) on tiny-ced:
// a device state cuts the CPU's payload bytes; a resume with the windows kept continues exactly as the state that
// stored it; with them expired the window replay rebuilds the rings; blocks stored by the CPU resume on the GPU
// and back. The session headers need xxhash.h (on the GPU machine: copy /usr/include/xxhash.h to .devdeps/include).
#include <catch2/catch.hpp>

#if __has_include(<xxhash.h>)
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include <dsv41/backend/cuda/session_state.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/session/model_identity.hpp>
#include <dsv41/session/session_cache.hpp>

using namespace dsv41;
using namespace dsv41::session;

namespace {

using CModel = Model<>;
using GModel = Model<configs::Dynamic, Cuda>;
using CBlocks = StateBlocks<SequenceState>;
using GBlocks = StateBlocks<gpu::DeviceSequence>;

const std::string kTiny = std::filesystem::exists(std::string(DSV41_FIXTURES) + "/tiny-ced")
                              ? std::string(DSV41_FIXTURES) + "/tiny-ced"
                              : std::string("tests/data/golden/tiny-ced");
constexpr ModelIdentity kId{0x1234, 0x5678, kCacheFormatVersion};
constexpr int kBlock = 16;

// In-memory tiers with the interfaces SessionCache expects (as tests/unit/test_session_cache.cpp).
struct MapGlobal {
  std::map<std::pair<uint64_t, uint64_t>, std::pair<ModelIdentity, std::vector<uint8_t>>> m;
  Status put(const Key& k, const ModelIdentity& id, std::span<const uint8_t> v) {
    m[{k.hi, k.lo}] = {id, std::vector<uint8_t>(v.begin(), v.end())};
    return Status::Ok();
  }
  Result<std::optional<std::vector<uint8_t>>> get(const Key& k, const ModelIdentity& id) {
    auto it = m.find({k.hi, k.lo});
    if (it == m.end() || !(it->second.first == id)) return std::optional<std::vector<uint8_t>>();
    return std::optional<std::vector<uint8_t>>(it->second.second);
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

// n token ids in [3, 503) (tests/unit/fixture.hpp's tiny_prompt).
std::vector<int32_t> tiny_prompt(int n, int seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = uint32_t(seed) * 2654435761u + 1;
  for (auto& t : v) {
    x = x * 1664525u + 1013904223u;
    t = int32_t(3 + (x >> 8) % 500);
  }
  return v;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Models {
  std::unique_ptr<CModel> c;
  std::unique_ptr<GModel> g;
};
Models load() {
  auto c = CModel::load(kTiny);
  auto g = GModel::load(kTiny);
  REQUIRE(c.ok());
  REQUIRE(g.ok());
  return {std::move(c).value(), std::move(g).value()};
}

gpu::DeviceSequence gpu_seq(const GModel& g, int64_t cap) {
  auto s = g.new_sequence(cap);
  REQUIRE(s.ok());
  return std::move(s).value();
}

// The device state's caches on the host.
SequenceState down(const Models& m, const gpu::DeviceSequence& d) {
  SequenceState c = m.c->new_sequence(d.max_positions);
  REQUIRE(gpu::download_state(m.g->shape(), d, c, m.g->stream()).ok());
  return c;
}

bool same_caches(const SequenceState& a, const SequenceState& b) {
  if (a.pos != b.pos || a.history != b.history || a.layers.size() != b.layers.size()) return false;
  for (size_t l = 0; l < a.layers.size(); ++l)
    if (a.layers[l].ring != b.layers[l].ring || a.layers[l].comp != b.layers[l].comp ||
        a.layers[l].ikeys != b.layers[l].ikeys || a.layers[l].n_entries != b.layers[l].n_entries ||
        a.layers[l].pend_kv != b.layers[l].pend_kv)
      return false;
  return true;
}

}  // namespace

TEST_CASE("GPU session payloads are the CPU's bytes for the same state", "[gpu][session]") {
  const Models m = load();
  const auto p = tiny_prompt(50, 3);
  SequenceState cs = m.c->new_sequence(128);
  REQUIRE(m.c->prefill(cs, p).ok());
  auto gs = gpu_seq(*m.g, 128);
  REQUIRE(gpu::upload_state(m.g->shape(), cs, gs, m.g->stream()).ok());
  for (int64_t b = 0; b < 3; ++b) {
    auto want = CBlocks::global(*m.c, cs, kBlock, b);
    auto got = GBlocks::global(*m.g, gs, kBlock, b);
    REQUIRE(want.ok());
    REQUIRE(got.ok());
    CHECK(want->size() > 8);
    CHECK(*got == *want);
  }
  CHECK(GBlocks::global(*m.g, gs, kBlock, 3).status().code() == Code::invalid_argument);  // not passed yet
  auto cw = CBlocks::window(*m.c, cs);
  auto gw = GBlocks::window(*m.g, gs);
  REQUIRE(cw.ok());
  REQUIRE(gw.ok());
  CHECK(gw->size() > size_t(m.g->shape().sliding_window) * cs.layers.size());
  CHECK(*gw == *cw);

  // The CPU's payloads appended to a fresh device state give back the CPU's entries; a refused payload leaves
  // the state as it was.
  auto fresh = gpu_seq(*m.g, 128);
  auto b0 = CBlocks::global(*m.c, cs, kBlock, 0), b1 = CBlocks::global(*m.c, cs, kBlock, 1);
  REQUIRE(b0.ok());
  REQUIRE(b1.ok());
  CHECK(GBlocks::append_global(*m.g, fresh, kBlock, 1, *b1).code() == Code::invalid_argument);  // out of order
  REQUIRE(GBlocks::append_global(*m.g, fresh, kBlock, 0, *b0).ok());
  std::vector<uint8_t> cut(b1->begin(), b1->end() - 1);
  CHECK(GBlocks::append_global(*m.g, fresh, kBlock, 1, cut).code() == Code::format_error);
  REQUIRE(GBlocks::append_global(*m.g, fresh, kBlock, 1, *b1).ok());
  std::vector<uint8_t> wcut(cw->begin(), cw->end() - 1);
  CHECK(GBlocks::restore(*m.g, fresh, wcut).code() == Code::format_error);
  REQUIRE(GBlocks::restore(*m.g, fresh, *cw).ok());
  const SequenceState back = down(m, fresh);
  for (const LayerRole& r : m.c->schedule()) {
    CHECK(back.layers[size_t(r.id)].ring == cs.layers[size_t(r.id)].ring);
    if (r.mode != AttnMode::Full) continue;
    const int64_t n = 2 * kBlock / r.ratio;
    const size_t me = size_t(kv::MainKvEntry::bytes(m.c->shape().head_dim));
    const size_t ie = size_t(kv::IndexKey::bytes(m.c->shape().index_head_dim));
    CHECK(back.layers[size_t(r.id)].n_entries == n);
    CHECK(std::equal(back.layers[size_t(r.id)].comp.begin(), back.layers[size_t(r.id)].comp.end(),
                     cs.layers[size_t(r.id)].comp.begin(), cs.layers[size_t(r.id)].comp.begin() + n * int64_t(me)));
    CHECK(std::equal(back.layers[size_t(r.id)].ikeys.begin(), back.layers[size_t(r.id)].ikeys.end(),
                     cs.layers[size_t(r.id)].ikeys.begin(), cs.layers[size_t(r.id)].ikeys.begin() + n * int64_t(ie)));
  }
}

TEST_CASE("GPU resume with the windows kept continues exactly as the state that stored it", "[gpu][session]") {
  const Models m = load();
  MapGlobal g;
  MapWindow w;
  SessionCache<GModel, MapGlobal, MapWindow> cache(*m.g, kId, g, w, SessionOptions{kBlock, 600, false});
  auto turn2 = tiny_prompt(48, 3);
  for (int i = 0; i < 12; ++i) turn2.push_back(int32_t(7 + 11 * i));
  auto s1 = gpu_seq(*m.g, 128);
  REQUIRE(cache.prefill(s1, std::span(turn2).first(48)).ok());
  CHECK(g.m.size() == 3);
  CHECK(w.m.size() == 3);
  const SequenceState at48 = down(m, s1);
  std::vector<float> want;
  REQUIRE(m.g->prefill(s1, std::span(turn2).subspan(48), &want).ok());

  auto s2 = gpu_seq(*m.g, 128);
  auto info = cache.resume(s2, turn2);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 48);
  CHECK(info->blocks == 3);
  CHECK(info->window_hit);
  CHECK(info->replayed_tokens == 0);
  CHECK(same_caches(down(m, s2), at48));
  std::vector<float> got;
  REQUIRE(m.g->prefill(s2, std::span(turn2).subspan(48), &got).ok());
  INFO("resumed vs stored state continued, rel " << rel(got, want));
  CHECK(rel(got, want) <= 1e-6);
  // Against one cold prefill of the whole turn (other chunks: the GPU's kernels may round differently).
  auto cold = gpu_seq(*m.g, 128);
  std::vector<float> cold_logits;
  REQUIRE(m.g->prefill(cold, turn2, &cold_logits).ok());
  WARN("GPU resume (windows kept) vs GPU cold prefill, last-row logits rel diff " << rel(got, cold_logits));
}

TEST_CASE("GPU resume with the windows expired: window replay rebuilds the rings", "[gpu][session]") {
  const Models m = load();
  MapGlobal g;
  MapWindow w;
  SessionCache<GModel, MapGlobal, MapWindow> cache(*m.g, kId, g, w, SessionOptions{kBlock, 600, false});
  const auto turn1 = tiny_prompt(40, 4);
  auto s1 = gpu_seq(*m.g, 128);
  REQUIRE(cache.prefill(s1, turn1).ok());
  w.m.clear();  // the window tier's TTL passed
  auto turn2 = turn1;
  for (int i = 0; i < 9; ++i) turn2.push_back(int32_t(20 + 13 * i));
  auto s2 = gpu_seq(*m.g, 128);
  auto info = cache.resume(s2, turn2);
  REQUIRE(info.ok());
  CHECK(info->cached_tokens == 32);
  CHECK(!info->window_hit);
  CHECK(info->replayed_tokens == m.g->shape().sliding_window);
  // The same as dropping the windows of a state prefilled to 32 in the cache's chunks and replaying them there.
  auto ref = gpu_seq(*m.g, 128);
  REQUIRE(m.g->prefill(ref, std::span(turn2).first(16)).ok());
  REQUIRE(m.g->prefill(ref, std::span(turn2).subspan(16, 16)).ok());
  REQUIRE(m.g->drop_windows(ref).ok());
  const int64_t need = std::min<int64_t>(32, m.g->shape().sliding_window + m.g->shape().engram_max_ngram_size - 1);
  REQUIRE(m.g->replay_window(ref, std::span(turn2).subspan(size_t(32 - need), size_t(need))).ok());
  CHECK(same_caches(down(m, s2), down(m, ref)));
  std::vector<float> got, ref_logits, cold_logits;
  REQUIRE(m.g->prefill(s2, std::span(turn2).subspan(32), &got).ok());
  REQUIRE(m.g->prefill(ref, std::span(turn2).subspan(32), &ref_logits).ok());
  INFO("resumed vs replayed by hand, rel " << rel(got, ref_logits));
  CHECK(rel(got, ref_logits) <= 1e-6);
  auto cold = gpu_seq(*m.g, 128);
  REQUIRE(m.g->prefill(cold, turn2, &cold_logits).ok());
  const double r = rel(got, cold_logits);
  WARN("GPU window-expired resume vs GPU cold prefill, last-row logits rel diff " << r);
  CHECK(std::isfinite(r));
  // The exact path runs cold instead, and leaves a fresh state.
  SessionCache<GModel, MapGlobal, MapWindow> exact(*m.g, kId, g, w, SessionOptions{kBlock, 600, true});
  auto s3 = gpu_seq(*m.g, 128);
  auto e = exact.resume(s3, turn2);
  REQUIRE(e.ok());
  CHECK(e->cached_tokens == 0);
  CHECK(s3.pos == 0);
  for (const auto& ls : s3.layers) CHECK(ls.n_entries == 0);
  std::vector<float> again;
  REQUIRE(m.g->prefill(s3, turn2, &again).ok());
  CHECK(rel(again, cold_logits) <= 1e-6);  // the cleared state behaves as a new one
}

TEST_CASE("a session stored by the CPU resumes on the GPU, and back", "[gpu][session]") {
  const Models m = load();
  MapGlobal g;
  MapWindow w;
  SessionCache<CModel, MapGlobal, MapWindow> ccache(*m.c, kId, g, w, SessionOptions{kBlock, 600, false});
  SessionCache<GModel, MapGlobal, MapWindow> gcache(*m.g, kId, g, w, SessionOptions{kBlock, 600, false});
  {  // CPU → GPU
    const auto p = tiny_prompt(50, 6);
    SequenceState cs = m.c->new_sequence(128);
    REQUIRE(ccache.prefill(cs, p).ok());
    auto gs = gpu_seq(*m.g, 128);
    auto info = gcache.resume(gs, p);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 48);
    CHECK(info->window_hit);
    SequenceState cref = m.c->new_sequence(128);
    REQUIRE(m.c->prefill(cref, std::span(p).first(48)).ok());
    CHECK(same_caches(down(m, gs), cref));
    // The GPU continues as from the CPU's state uploaded whole.
    auto up = gpu_seq(*m.g, 128);
    REQUIRE(gpu::upload_state(m.g->shape(), cref, up, m.g->stream()).ok());
    std::vector<float> got, want, cpu_logits;
    REQUIRE(m.g->prefill(gs, std::span(p).subspan(48), &got).ok());
    REQUIRE(m.g->prefill(up, std::span(p).subspan(48), &want).ok());
    INFO("resumed vs uploaded, rel " << rel(got, want));
    CHECK(rel(got, want) <= 1e-6);
    REQUIRE(m.c->prefill(cref, std::span(p).subspan(48), &cpu_logits).ok());
    WARN("CPU-stored session continued on the GPU vs on the CPU, last-row logits rel diff " << rel(got, cpu_logits));
  }
  {  // GPU → CPU
    const auto q = tiny_prompt(40, 7);
    auto gs = gpu_seq(*m.g, 128);
    REQUIRE(gcache.prefill(gs, q).ok());
    SequenceState cs = m.c->new_sequence(128);
    auto info = ccache.resume(cs, q);
    REQUIRE(info.ok());
    CHECK(info->cached_tokens == 32);
    CHECK(info->window_hit);
    auto gref = gpu_seq(*m.g, 128);  // the GPU state at 32, in the cache's chunks
    REQUIRE(m.g->prefill(gref, std::span(q).first(16)).ok());
    REQUIRE(m.g->prefill(gref, std::span(q).subspan(16, 16)).ok());
    CHECK(same_caches(cs, down(m, gref)));
  }
}

#else
TEST_CASE("GPU session cache needs xxhash.h", "[gpu][session]") {
  WARN("xxhash.h not found: GPU session tests not built (copy /usr/include/xxhash.h to .devdeps/include)");
}
#endif
