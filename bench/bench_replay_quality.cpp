// What the approximate paths cost in quality (SPEC §5), on the bundled model over its held-out text: the tokens
// after a split point S (a block boundary) are scored after
//   exact      one prefill of [0, S), then [S, S+E) with every row's logits;
//   resumed    [0, S) stored through the session cache, the windows expired (the window tier emptied), the state
//              resumed (global KV back, Encoder SWA Bounded Replay of the last W tokens), then [S, S+E);
//   bounded    [0, S) prefilled with Decoder SWA Bounded Replay, then [S, S+E).
// Reported: perplexity of tokens S+1 .. S+E−1 on each path, the share of rows whose top-1 equals the exact path's,
// and the median relative difference of the logits rows against the exact path. CPU, one thread.
//
//   bench_replay_quality MODEL_DIR [--splits 512,1024,2048] [--eval 256] [--block 128]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/model/model.hpp>
#include <dsv41/session/model_identity.hpp>
#include <dsv41/session/session_cache.hpp>
#include <dsv41/text/tokenizer.hpp>

#include "memory_tiers.hpp"

using namespace dsv41;

namespace {

std::vector<int> ints(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

struct Scored {
  double ppl = 0;
  std::vector<int32_t> top1;
};

// logits [E, V] of positions S .. S+E−1; row i predicts token S+i+1.
Scored score(const std::vector<float>& logits, int V, std::span<const int32_t> next) {
  Scored r;
  double nll = 0;
  const size_t rows = next.size();
  for (size_t i = 0; i < rows; ++i) {
    const float* l = logits.data() + i * size_t(V);
    const float mx = *std::max_element(l, l + V);
    double z = 0;
    for (int v = 0; v < V; ++v) z += std::exp(double(l[v]) - mx);
    nll += std::log(z) + mx - l[next[i]];
    r.top1.push_back(int32_t(std::max_element(l, l + V) - l));
  }
  r.ppl = std::exp(nll / double(rows));
  return r;
}

double median_rel(const std::vector<float>& x, const std::vector<float>& g, int V) {
  std::vector<double> rel;
  for (size_t r = 0; r * size_t(V) < g.size(); ++r) {
    double num = 0, den = 0;
    for (int v = 0; v < V; ++v) {
      const double a = x[r * V + v], b = g[r * V + v];
      num += (a - b) * (a - b);
      den += b * b;
    }
    rel.push_back(std::sqrt(num / std::max(den, 1e-30)));
  }
  std::sort(rel.begin(), rel.end());
  return rel[rel.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_replay_quality MODEL_DIR [--splits 512,1024,2048] [--eval 256] [--block 128]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<int> splits = {512, 1024, 2048};
  int E = 256, block = 128;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--splits") splits = ints(argv[i + 1]);
    else if (a == "--eval") E = std::atoi(argv[i + 1]);
    else if (a == "--block") block = std::atoi(argv[i + 1]);
  }
  auto model = Model<>::load(dir);
  auto id = session::model_identity(dir);
  auto tok = text::Tokenizer::from_json_file(dir + "/tokenizer.json");
  std::ifstream f(dir + "/heldout_sample.txt", std::ios::binary);
  if (!model.ok() || !id.ok() || !tok.ok() || !f) {
    const Status e = !model.ok() ? model.status() : !id.ok() ? id.status() : !tok.ok() ? tok.status()
                                                                                      : error(Code::io_error, dir + "/heldout_sample.txt");
    std::fprintf(stderr, "%s\n", e.to_string().c_str());
    return 1;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> ids = tok->encode(ss.str(), false);
  const Model<>& m = **model;
  const ModelShape& s = m.shape();
  const int V = s.vocab_size;
  std::printf("model %s: %zu held-out tokens; window %d, block %d; scoring %d tokens after each split (CPU)\n\n",
              dir.c_str(), ids.size(), s.sliding_window, block, E);
  std::printf("| split S | replayed tokens | ppl exact | ppl resumed (windows expired) | top-1 = exact | median rel "
              "logits | ppl decoder bounded replay | top-1 = exact | median rel logits |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int S : splits) {
    if (S % block || size_t(S + E) > ids.size() || S + E > s.max_position_embeddings) {
      std::fprintf(stderr, "split %d: needs a multiple of the block and %d tokens after it within %zu; skipped\n", S, E,
                   ids.size());
      continue;
    }
    const std::span<const int32_t> all(ids.data(), size_t(S + E));
    const auto head = all.first(size_t(S)), tail = all.subspan(size_t(S));
    const auto next = tail.subspan(1);
    const int64_t cap = S + E + 8;
    auto run_tail = [&](SequenceState& st, std::vector<float>& logits) -> Status {
      ForwardResult fr;
      DSV41_TRY(m.forward(st, tail, fr, true));
      logits.assign(fr.logits.begin(), fr.logits.end() - V);  // rows S .. S+E−2 predict S+1 .. S+E−1
      return Status::Ok();
    };
    std::vector<float> lx, lr, lb;
    Status e;
    SequenceState ex = m.new_sequence(cap);
    if (e = m.prefill(ex, head); e.ok()) e = run_tail(ex, lx);
    bench::MapGlobal g;
    bench::MapWindow w;
    session::SessionCache<Model<>, bench::MapGlobal, bench::MapWindow> cache(m, *id, g, w,
                                                                            session::SessionOptions{block, 600, false});
    SequenceState s1 = m.new_sequence(cap), s2 = m.new_sequence(cap);
    int64_t replayed = 0;
    if (e.ok()) e = cache.prefill(s1, head);
    if (e.ok()) {
      w.m.clear();  // the windows expired
      std::vector<int32_t> prompt(all.begin(), all.begin() + S + 1);
      auto info = cache.resume(s2, prompt);
      e = info.ok() ? (s2.pos == S ? run_tail(s2, lr) : error(Code::internal, "resume did not reach S")) : info.status();
      if (info.ok()) replayed = info->replayed_tokens;
    }
    SequenceState bd = m.new_sequence(cap);
    PrefillOptions po;
    po.bounded_replay = true;
    if (e.ok()) e = m.prefill(bd, head, nullptr, po);
    if (e.ok()) e = run_tail(bd, lb);
    if (!e.ok()) {
      std::fprintf(stderr, "split %d: %s\n", S, e.to_string().c_str());
      return 1;
    }
    const Scored x = score(lx, V, next), r = score(lr, V, next), b = score(lb, V, next);
    auto agree = [&](const Scored& a) {
      size_t n = 0;
      for (size_t i = 0; i < a.top1.size(); ++i) n += a.top1[i] == x.top1[i];
      return 100.0 * double(n) / double(a.top1.size());
    };
    std::printf("| %d | %lld | %.4f | %.4f | %.1f%% | %.2e | %.4f | %.1f%% | %.2e |\n", S, (long long)replayed, x.ppl,
                r.ppl, agree(r), median_rel(lr, lx, V), b.ppl, agree(b), median_rel(lb, lx, V));
  }
  return 0;
}
