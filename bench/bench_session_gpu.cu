// Sessions on the GPU at released widths (issue 11): a released-width layer stack (bench/layer_stack/config.json,
// synthetic weights: bench/synthetic_model.hpp) prefills a context cold, stores it through SessionCache into a
// DiskStore in a temp dir, then a fresh sequence resumes the context + a few new tokens from the store, with the
// windows expired (SPEC §5 window replay) and kept (a host window pool). The claim checked: the resume does not
// grow with the context except by the bytes it reads.
//
//   bench_session_gpu [--config F] [--layers N] [--contexts 4096,32768,131072] [--block 128] [--chunk 2048]
//                     [--extra 32] [--repeats 3] [--budget-s 240] [--dir D] [--warm-cache] [--out FILE.md]
//
// The cold prefill runs in chunks of --chunk tokens (Model::prefill's PrefillOptions::chunk; one sync per chunk);
// after each chunk the chunk's blocks go to the store: the blocks inside it through StateBlocks (the cut
// at_boundary makes), its last one through SessionCache::at_boundary (global block + windows). A context is
// skipped when the previous one's prefill predicts more than --budget-s seconds. Before each resume the store's
// files are dropped from the page cache (posix_fadvise) unless --warm-cache. Progress goes to stderr.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/session_state.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/session/disk_store.hpp>
#include <dsv41/session/session_cache.hpp>
#include <dsv41/session/window_pool.hpp>

#include "synthetic_model.hpp"

using namespace dsv41;
using namespace dsv41::session;
namespace fs = std::filesystem;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// What SessionCache needs of a model, over gpu::Forward (Model<> loads only directories): Model::prefill's and
// replay_window's bodies on the synthetic stack.
class SynthModel {
 public:
  using State = gpu::DeviceSequence;
  explicit SynthModel(gpu::Forward& f) : f_(f) {}
  const ModelShape& shape() const { return f_.shape(); }
  const std::vector<LayerRole>& schedule() const { return f_.schedule(); }
  const gpu::Forward& backend() const { return f_; }
  cudaStream_t stream() const { return f_.stream(); }
  Result<State> new_sequence(int64_t n) const { return f_.new_sequence(n); }
  Status drop_windows(State& st) const { return f_.drop_windows(st); }
  Status prefill(State& st, std::span<const int32_t> ids, std::vector<float>* last = nullptr) const {
    DSV41_TRY(dsv41::detail::check_prompt(shape(), st.pos, st.max_positions, ids));
    auto sink = f_.logits_sink(nullptr, 1);
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::forward(f_, st, ids, ForwardOptions{}, sink->target(last != nullptr)));
    if (last) return sink->read(*last);
    return f_.synchronize();
  }
  Status replay_window(State& st, std::span<const int32_t> recent, std::vector<float>* last = nullptr) const {
    auto sink = f_.logits_sink(nullptr, 1);
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::replay_window(f_, st, recent, nullptr, sink->target(last != nullptr)));
    if (last) return sink->read(*last);
    return f_.synchronize();
  }

 private:
  gpu::Forward& f_;
};
using Blocks = StateBlocks<gpu::DeviceSequence>;

// The disk tier, counting bytes and time.
struct TimedDisk {
  DiskStore* d = nullptr;
  uint64_t put_bytes = 0, get_bytes = 0, gets = 0, hits = 0;
  double put_s = 0, get_s = 0;
  Status put(const Key& k, const ModelIdentity& id, std::span<const uint8_t> v) {
    const double t = now_s();
    Status s = d->put(k, id, v);
    put_s += now_s() - t;
    put_bytes += v.size();
    return s;
  }
  Result<std::optional<std::vector<uint8_t>>> get(const Key& k, const ModelIdentity& id) {
    const double t = now_s();
    auto r = d->get(k, id);
    get_s += now_s() - t;
    ++gets;
    if (r.ok() && *r) {
      ++hits;
      get_bytes += (*r)->size();
    }
    return r;
  }
  void reset() { put_bytes = get_bytes = gets = hits = 0, put_s = get_s = 0; }
};
// A window tier whose TTL has passed (resumes only: never stored into).
struct Expired {
  Result<std::optional<std::vector<uint8_t>>> get(const Key&) { return std::optional<std::vector<uint8_t>>(); }
};

struct Options {
  std::string config = "bench/layer_stack/config.json", dir, out;
  int layers = 0;  // 0: the config's
  std::vector<int64_t> contexts{4096, 32768, 131072};
  int block = 128, chunk = 2048, extra = 32, repeats = 3;
  double budget_s = 240;
  bool warm_cache = false;
  uint64_t seed = 20261201;
};

std::vector<int64_t> parse_list(const std::string& v) {
  std::vector<int64_t> out;
  std::stringstream ss(v);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(std::stoll(t));
  return out;
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}


// Drops the store's files from the page cache, so the resume reads them from the disk.
void drop_page_cache(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct Row {
  int64_t ctx = 0;
  double prefill_ms = 0, store_ms = 0, cont_ms = 0;  // cold prefill of ctx, storing it, the extra tokens after it
  uint64_t written = 0, files_bytes = 0;
  double exp_resume_ms = 0, exp_ttft_ms = 0, exp_read_ms = 0, exp_rel = 0;
  uint64_t exp_read = 0;
  int64_t replayed = 0, cached = 0;
  double kept_resume_ms = 0, kept_ttft_ms = 0, kept_read_ms = 0, kept_rel = 0;
  uint64_t kept_read = 0;
  bool kept_hit = false;
  bool ok = true;
};

Status run_context(const SynthModel& m, const Options& opt, int64_t ctx, Row& row) {
  const ModelShape& s = m.shape();
  row.ctx = ctx;
  std::mt19937 rng(uint32_t(opt.seed + uint64_t(ctx)));
  std::uniform_int_distribution<int32_t> tok(3, s.vocab_size - 1);
  std::vector<int32_t> turn2(size_t(ctx + opt.extra));
  for (auto& t : turn2) t = tok(rng);
  const auto context = std::span<const int32_t>(turn2).first(size_t(ctx));
  const int64_t cap = ctx + opt.extra + 64;
  const ModelIdentity id{0x5e55105u, opt.seed, kCacheFormatVersion};

  const std::string dir = opt.dir + "/ctx" + std::to_string(ctx);
  fs::remove_all(dir);
  auto disk = DiskStore::open(dir);
  if (!disk.ok()) return disk.status();
  TimedDisk td{&*disk};
  WindowPool pool;
  Expired expired;
  SessionCache<SynthModel, TimedDisk, WindowPool> kept(m, id, td, pool, SessionOptions{opt.block, 600, false});
  SessionCache<SynthModel, TimedDisk, Expired> gone(m, id, td, expired, SessionOptions{opt.block, 600, false});
  DSV41_TRY(kept.check());
  const auto keys = kept.keys(context);

  // Cold prefill, storing each chunk's blocks; then the extra tokens on the stored state (the reference logits).
  std::vector<float> want;
  {
    auto st = m.new_sequence(cap);
    if (!st.ok()) return st.status();
    double last_print = now_s();
    for (int64_t c0 = 0; c0 < ctx; c0 += opt.chunk) {
      const int64_t n = std::min<int64_t>(opt.chunk, ctx - c0);
      double t = now_s();
      DSV41_TRY(m.prefill(*st, context.subspan(size_t(c0), size_t(n))));
      row.prefill_ms += (now_s() - t) * 1e3;
      t = now_s();
      const int64_t b_end = st->pos / opt.block;  // blocks finished; the last one goes through at_boundary
      for (int64_t b = c0 / opt.block; b + 1 < b_end; ++b) {
        auto p = Blocks::global(m, *st, opt.block, b);
        if (!p.ok()) return p.status();
        DSV41_TRY(td.put(keys[size_t(b)], id, *p));
      }
      DSV41_TRY(kept.at_boundary(*st, context.first(size_t(st->pos))));
      row.store_ms += (now_s() - t) * 1e3;
      if (now_s() - last_print > 10) {
        std::fprintf(stderr, "  context %lld: prefilled %lld tokens (%.1f s)\n", (long long)ctx, (long long)st->pos,
                     row.prefill_ms / 1e3);
        last_print = now_s();
      }
    }
    row.written = td.put_bytes;
    row.files_bytes = disk->stats().bytes;
    const double t = now_s();
    DSV41_TRY(m.prefill(*st, std::span<const int32_t>(turn2).subspan(size_t(ctx)), &want));
    row.cont_ms = (now_s() - t) * 1e3;
  }  // the stored sequence's device memory is freed here
  std::fprintf(stderr, "  context %lld: cold prefill %.1f s, stored %.1f MB in %.1f s\n", (long long)ctx,
               row.prefill_ms / 1e3, row.written / 1e6, row.store_ms / 1e3);

  // Resumes of a fresh sequence (cleared in place between repeats; allocated once).
  auto r = m.new_sequence(cap);
  if (!r.ok()) return r.status();
  auto resume = [&](auto& cache, double& resume_ms, double& ttft_ms, double& read_ms, uint64_t& read, double& rd,
                    bool want_hit) -> Status {
    std::vector<double> rs, tt, rdm;
    for (int i = 0; i < opt.repeats + 1; ++i) {  // the first is a warm-up
      DSV41_TRY(Blocks::clear(m, *r));
      if (!opt.warm_cache) drop_page_cache(dir);
      td.reset();
      const double t0 = now_s();
      auto info = cache.resume(*r, turn2);
      if (!info.ok()) return info.status();
      const double t1 = now_s();
      std::vector<float> got;
      DSV41_TRY(m.prefill(*r, std::span<const int32_t>(turn2).subspan(size_t(r->pos)), &got));
      const double t2 = now_s();
      if (i == 0) continue;
      rs.push_back((t1 - t0) * 1e3);
      tt.push_back((t2 - t0) * 1e3);
      rdm.push_back(td.get_s * 1e3);
      read = td.get_bytes;
      rd = rel(got, want);
      row.cached = info->cached_tokens;
      if (want_hit) row.kept_hit = info->window_hit;
      else row.replayed = info->replayed_tokens;
      row.ok = row.ok && info->cached_tokens == ctx / opt.block * opt.block && info->window_hit == want_hit &&
               std::isfinite(rd);
    }
    resume_ms = median(rs);
    ttft_ms = median(tt);
    read_ms = median(rdm);
    return Status::Ok();
  };
  DSV41_TRY(resume(gone, row.exp_resume_ms, row.exp_ttft_ms, row.exp_read_ms, row.exp_read, row.exp_rel, false));
  DSV41_TRY(resume(kept, row.kept_resume_ms, row.kept_ttft_ms, row.kept_read_ms, row.kept_read, row.kept_rel, true));
  row.ok = row.ok && row.kept_rel <= 1e-6;  // the same bytes, the same kernels: the stored state's own logits
  std::fprintf(stderr, "  context %lld: resume (windows expired) %.1f ms, (kept) %.1f ms\n", (long long)ctx,
               row.exp_resume_ms, row.kept_resume_ms);
  fs::remove_all(dir);
  return Status::Ok();
}

std::string table(const std::vector<Row>& rows, const Options& opt) {
  std::string t =
      "| context | cold prefill ms | + " + std::to_string(opt.extra) +
      " tokens ms | store ms | bytes written (files) | B/token | expired: bytes read | disk read ms | replayed | "
      "resume ms | to first token ms | logits rel | kept: bytes read | disk read ms | resume ms | to first token ms | "
      "logits rel | ok |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  char b[768];
  for (const Row& r : rows) {
    std::snprintf(b, sizeof b,
                  "| %lld | %.1f | %.1f | %.1f | %llu (%llu) | %.1f | %llu | %.1f | %lld | %.1f | %.1f | %.2e | %llu | "
                  "%.1f | %.1f | %.1f | %.2e | %s |\n",
                  (long long)r.ctx, r.prefill_ms, r.cont_ms, r.store_ms, (unsigned long long)r.written,
                  (unsigned long long)r.files_bytes, double(r.written) / double(r.ctx), (unsigned long long)r.exp_read,
                  r.exp_read_ms, (long long)r.replayed, r.exp_resume_ms, r.exp_ttft_ms, r.exp_rel,
                  (unsigned long long)r.kept_read, r.kept_read_ms, r.kept_resume_ms, r.kept_ttft_ms, r.kept_rel,
                  r.ok ? "yes" : "NO");
    t += b;
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::string cmd = argv[0];
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    cmd += " " + a;
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      cmd += std::string(" ") + argv[i + 1];
      return argv[++i];
    };
    if (a == "--config") opt.config = val();
    else if (a == "--layers") opt.layers = std::stoi(val());
    else if (a == "--contexts") opt.contexts = parse_list(val());
    else if (a == "--block") opt.block = std::stoi(val());
    else if (a == "--chunk") opt.chunk = std::stoi(val());
    else if (a == "--extra") opt.extra = std::stoi(val());
    else if (a == "--repeats") opt.repeats = std::stoi(val());
    else if (a == "--budget-s") opt.budget_s = std::stod(val());
    else if (a == "--dir") opt.dir = val();
    else if (a == "--warm-cache") opt.warm_cache = true;
    else if (a == "--out") opt.out = val();
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (opt.chunk < opt.block || opt.chunk % opt.block || opt.extra < 1 || opt.repeats < 1) {
    std::fprintf(stderr, "--chunk must be a multiple of --block, --extra and --repeats positive\n");
    return 2;
  }
  if (opt.dir.empty()) opt.dir = (fs::temp_directory_path() / ("dsv41_bench_session_gpu." + std::to_string(getpid()))).string();
  auto shape0 = load_config(opt.config);
  if (!shape0.ok()) {
    std::fprintf(stderr, "%s\n", shape0.status().message().c_str());
    return 1;
  }
  auto shape = synth::cut_layers(*shape0, opt.layers);
  if (!shape.ok()) {
    std::fprintf(stderr, "%s\n", shape.status().message().c_str());
    return 1;
  }
  const ModelShape& s = *shape;
  if (Status e = check_block_size(s, opt.block); !e.ok()) {
    std::fprintf(stderr, "%s\n", e.message().c_str());
    return 2;
  }
  {
    std::string modes;
    for (const LayerRole& r : make_schedule(s))
      modes += std::string(modes.empty() ? "" : " ") + mode_name(r.mode) + "/" + std::to_string(r.ratio);
    std::fprintf(stderr, "%s: %d layers (mode/ratio: %s), block %d, chunk %d\n", opt.config.c_str(), s.num_hidden_layers,
                 modes.c_str(), opt.block, opt.chunk);
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {  // blocking: ordered after new_sequence's memsets
    std::fprintf(stderr, "no CUDA stream\n");
    return 1;
  }
  std::fprintf(stderr, "building synthetic weights for %d layers...\n", s.num_hidden_layers);
  const double t0 = now_s();
  auto hw = std::make_unique<synth::SyntheticWeights>(synth::make_synthetic_weights(s, opt.seed));
  auto fr = gpu::Forward::create(s, hw->w, engram::Setup{}, stream);
  if (!fr.ok()) {
    std::fprintf(stderr, "Forward::create: %s\n", fr.status().message().c_str());
    return 1;
  }
  hw.reset();
  std::fprintf(stderr, "weights on the device: %.2f GB (%.1f s)\n", (*fr)->weight_bytes() / 1e9, now_s() - t0);
  const SynthModel m(**fr);

  {  // warm-up: one chunk, a window replay
    std::fprintf(stderr, "warm-up...\n");
    const Status e = [&]() -> Status {
      auto w = m.new_sequence(opt.chunk + 64);
      if (!w.ok()) return w.status();
      const std::vector<int32_t> ids(size_t(opt.chunk), 5);
      DSV41_TRY(m.prefill(*w, ids));
      DSV41_TRY(m.drop_windows(*w));
      const size_t need = size_t(s.sliding_window + std::max(s.engram_max_ngram_size - 1, 0));  // W + N − 1
      return m.replay_window(*w, std::span<const int32_t>(ids).last(need));
    }();
    if (!e.ok()) {
      std::fprintf(stderr, "warm-up: %s\n", e.message().c_str());
      return 1;
    }
  }

  std::vector<Row> rows;
  bool ok = true;
  int64_t prev_ctx = 0;
  double prev_s = 0;
  for (int64_t ctx : opt.contexts) {
    if (prev_ctx > 0) {  // prefill grows faster than linearly (the indexer scans every key): predict with ^1.5
      const double pred = prev_s * std::pow(double(ctx) / double(prev_ctx), 1.5);
      if (pred > opt.budget_s) {
        std::fprintf(stderr, "context %lld skipped: its prefill would take ~%.0f s (> --budget-s %.0f)\n",
                     (long long)ctx, pred, opt.budget_s);
        std::printf("context %lld skipped (predicted prefill %.0f s > --budget-s %.0f)\n", (long long)ctx, pred,
                    opt.budget_s);
        continue;
      }
    }
    std::fprintf(stderr, "context %lld...\n", (long long)ctx);
    Row row;
    Status e = run_context(m, opt, ctx, row);
    if (!e.ok()) {
      std::fprintf(stderr, "context %lld failed: %s\n", (long long)ctx, e.message().c_str());
      std::printf("context %lld failed: %s\n", (long long)ctx, e.message().c_str());
      ok = false;
      continue;
    }
    ok = ok && row.ok;
    rows.push_back(row);
    prev_ctx = ctx;
    prev_s = row.prefill_ms / 1e3;
  }
  std::error_code ec;
  fs::remove_all(opt.dir, ec);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const std::string head =
      "Sessions on the GPU: " + opt.config + " cut to " + std::to_string(s.num_hidden_layers) +
      " layers, synthetic weights, " + prop.name + ". Blocks of " + std::to_string(opt.block) + ", prefill chunks of " +
      std::to_string(opt.chunk) + ", turn 2 = context + " + std::to_string(opt.extra) +
      " tokens; resumes: median of " + std::to_string(opt.repeats) + " after a warm-up, " +
      (opt.warm_cache ? "store in the page cache" : "store dropped from the page cache before each") +
      ". \"logits rel\": turn 2's last-row logits against the stored state continued (kept: ≤ 1e-6 or not ok; expired: SPEC §5 "
      "window replay, approximate). Bytes written: global-KV payloads (files with headers); windows stay in host "
      "memory.\n\n    " + cmd + "\n\n";
  const std::string t = table(rows, opt);
  std::printf("\n%s%s", head.c_str(), t.c_str());
  if (!opt.out.empty())
    if (FILE* f = std::fopen(opt.out.c_str(), "w")) {
      std::fprintf(f, "%s%s", head.c_str(), t.c_str());
      std::fclose(f);
    }
  fr->reset();
  cudaStreamDestroy(stream);
  return ok ? 0 : 1;
}
