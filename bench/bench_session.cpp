// Turn 2 of a session against turn 1 on the CPU (session/session_cache.hpp): a history of H tokens is prefilled
// through the session cache (blocks stored at each boundary), then a second turn repeats it and adds 27 tokens.
// Times to the first token of turn 2 (its last row's logits): cold (everything again), resumed with the windows
// kept (exact), and resumed after the windows expired (global KV back, SPEC §5 window replay). Medians of R runs.
//
//   bench_session MODEL_DIR [--history 1536,3584] [--block 128] [--runs 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/session/model_identity.hpp>
#include <dsv41/session/session_cache.hpp>

#include "memory_tiers.hpp"

using namespace dsv41;
using namespace dsv41::session;

using bench::MapGlobal;
using bench::MapWindow;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
std::vector<int> ints(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_session MODEL_DIR [--history 1536,3584] [--block 128] [--runs 3]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<int> histories = {1536, 3584};
  int block = 128, runs = 3;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--history") histories = ints(argv[i + 1]);
    else if (a == "--block") block = std::atoi(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
  }
  auto model = Model<>::load(dir);
  auto id = model_identity(dir);
  if (!model.ok() || !id.ok()) {
    std::fprintf(stderr, "%s\n", (model.ok() ? id.status() : model.status()).to_string().c_str());
    return 1;
  }
  const Model<>& m = **model;
  const int V = m.shape().vocab_size;
  std::printf("model %s, block %d tokens, %d runs (medians), CPU, one thread\n\n", dir.c_str(), block, runs);
  std::printf("| history | turn-2 prompt | cold ms | resumed, windows kept ms | (x faster) | resumed, windows expired ms | "
              "(x faster) | tokens run: kept / expired | global KV bytes/token |\n|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
  for (int H : histories) {
    std::vector<int32_t> turn1(static_cast<size_t>(H)), turn2;
    uint32_t x = 12345u + uint32_t(H);
    for (auto& t : turn1) t = int32_t(3 + ((x = x * 1664525u + 1013904223u) >> 8) % uint32_t(V - 3));
    turn2 = turn1;
    for (int i = 0; i < 27; ++i) turn2.push_back(int32_t(3 + (i * 97) % (V - 3)));
    const int64_t cap = int64_t(turn2.size()) + 8;
    std::vector<double> cold, kept, expired;
    int64_t run_kept = 0, run_expired = 0;
    double bytes_per_token = 0;
    for (int r = 0; r < runs; ++r) {
      MapGlobal g;
      MapWindow w;
      SessionCache<Model<>, MapGlobal, MapWindow> cache(m, *id, g, w, SessionOptions{block, 600, false});
      SequenceState s1 = m.new_sequence(cap);
      if (Status e = cache.prefill(s1, turn1); !e.ok()) {
        std::fprintf(stderr, "%s\n", e.to_string().c_str());
        return 1;
      }
      bytes_per_token = double(g.bytes) / double((H / block) * block);
      std::vector<float> logits;
      double t0 = now_s();
      SequenceState c = m.new_sequence(cap);
      if (!m.prefill(c, turn2, &logits).ok()) return 1;
      cold.push_back(now_s() - t0);
      for (bool expire : {false, true}) {
        if (expire) w.m.clear();
        t0 = now_s();
        SequenceState s2 = m.new_sequence(cap);
        auto info = cache.resume(s2, turn2);
        if (!info.ok() || !m.prefill(s2, std::span(turn2).subspan(size_t(s2.pos)), &logits).ok()) return 1;
        (expire ? expired : kept).push_back(now_s() - t0);
        (expire ? run_expired : run_kept) = info->replayed_tokens + int64_t(turn2.size()) - info->cached_tokens;
      }
    }
    const double c = median(cold) * 1e3, k = median(kept) * 1e3, e = median(expired) * 1e3;
    std::printf("| %d | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %lld / %lld | %.1f |\n", H, turn2.size(), c, k, c / k, e,
                c / e, (long long)run_kept, (long long)run_expired, bytes_per_token);
  }
  return 0;
}
