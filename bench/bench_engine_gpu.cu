// The continuous-batching engine (runtime/engine.hpp) on a released-width layer stack (issue 12): the 12-layer
// stack of bench/layer_stack/config.json with synthetic weights (bench/synthetic_model.hpp). For each concurrency
// N, N requests are submitted at once and engine.step() runs on this thread until all finish; the same N requests
// then run with max_running 1 (a one-at-a-time server) as the sequential baseline.
//
//   bench_engine_gpu [--config F] [--layers N] [--concurrency 1,8,32,64] [--prompt 512] [--gen 64]
//                    [--step-tokens 2048] [--prefill-chunk 0] [--sequential-max 64] [--budget-s 240]
//                    [--temperature 0] [--seed S] [--out FILE.md] [--check-config] [--no-batch-prefill]
//
// Times are host wall clock (steady_clock): a token exists for a client when step() returns it, after the step's
// logits were copied back, so host time is what an engine measurement is about (GPU events would leave out the
// sampling and scheduling). TTFT: from a request's submit to its first token; ITL: between its successive tokens.
// A sequential run is skipped above --sequential-max or when the previous sequential run predicts more than
// --budget-s seconds. Requests are not speculative (the stack has no DSpark stages). --check-config: host only
// (no CUDA call): the plan, the engine's per-sequence cache estimate, and the requests checked by Engine::submit.
// Progress goes to stderr.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/config/parse_config.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/runtime/engine.hpp>

#include "synthetic_model.hpp"

using namespace dsv41;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// What Engine<M> needs of a model, over gpu::Forward (Model<> loads only directories): Model<Dynamic, Cuda>'s
// prefill and batched decode on the synthetic stack. Without a Forward (--check-config) the shape is all there
// is and every sequence operation fails. Not speculative: rollback and speculative_step below refuse.
class StackModel {
 public:
  using State = gpu::DeviceSequence;
  using Snapshot = gpu::DeviceSnapshot;
  using DecodeItem = DecodeItemOf<State>;
  using PrefillItem = PrefillItemOf<State>;
  static constexpr bool on_host = false;

  StackModel(const ModelShape& s, const gpu::Forward* f) : s_(s), f_(f) {}
  const ModelShape& shape() const { return f_ ? f_->shape() : s_; }

  Result<State> new_sequence(int64_t n) const {
    if (!f_) return no_device();
    return f_->new_sequence(n);
  }

  // One forward over ids (the engine sizes its chunks itself); last gets the last row's logits.
  Status prefill(State& st, std::span<const int32_t> ids, std::vector<float>* last, const PrefillOptions& o) const {
    if (!f_) return no_device();
    if (o.chunk > 0 || o.on_chunk || !o.images.empty())
      return error(Code::unsupported, "stack model: prefill takes no chunk, on_chunk or images");
    DSV41_TRY(dsv41::detail::check_prompt(shape(), st.pos, st.max_positions, ids));
    ForwardOptions fo;
    fo.bounded_replay = o.bounded_replay;
    fo.hooks = o.hooks;
    auto sink = f_->logits_sink(nullptr, 1);
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::forward(*f_, st, ids, fo, sink->target(last != nullptr)));
    if (last) return sink->read(*last);
    return f_->synchronize();
  }

  // Several sequences' chunks in one forward (Model::prefill_batch's GPU path).
  Status check_chunk(const State& st, std::span<const int32_t> ids) const {
    if (!f_) return no_device();
    DSV41_TRY(f_->check_state(st));
    return dsv41::detail::check_prompt(shape(), st.pos, st.max_positions, ids);
  }
  Status prefill_batch(std::span<PrefillItem> items, bool all_rows = false) const {
    if (all_rows) return not_speculative();
    if (items.empty()) return Status::Ok();
    if (!f_) return no_device();
    std::vector<State*> seqs;
    std::vector<int> lengths;
    std::vector<int32_t> ids;
    std::vector<std::vector<float>*> outs;
    bool want = false;
    for (const PrefillItem& it : items) {
      DSV41_TRY(check_chunk(*it.state, it.ids));
      seqs.push_back(it.state);
      lengths.push_back(int(it.ids.size()));
      ids.insert(ids.end(), it.ids.begin(), it.ids.end());
      outs.push_back(it.logits);
      want = want || it.logits;
    }
    auto sink = f_->logits_sink(nullptr, int(items.size()));
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::forward_chunks(*f_, std::span<State* const>(seqs), lengths, ids, false, sink->target(want)));
    return sink->read_rows(outs);
  }

  // One batched forward, one row per sequence; the rows' logits read back with one synchronization.
  Status decode(std::span<DecodeItem> batch) const {
    if (batch.empty()) return Status::Ok();
    if (!f_) return no_device();
    std::vector<State*> seqs;
    std::vector<int32_t> ids;
    std::vector<std::vector<float>*> outs;
    for (auto& item : batch) {
      seqs.push_back(item.state);
      ids.push_back(item.token);
      outs.push_back(item.logits);
    }
    auto sink = f_->logits_sink(nullptr, int(batch.size()));
    if (!sink.ok()) return sink.status();
    DSV41_TRY(blocks::decode(*f_, std::span<State* const>(seqs), ids, sink->target()));
    return sink->read_rows(outs);
  }

  Status rollback(State&, const Snapshot&, int) const { return not_speculative(); }
  static Status not_speculative() {
    return error(Code::unsupported, "stack model: speculative decoding is not available on the synthetic stack");
  }

 private:
  static Status no_device() { return error(Code::unsupported, "stack model: no device (--check-config)"); }
  ModelShape s_;
  const gpu::Forward* f_ = nullptr;
};

// Found by the engine's speculate() through argument-dependent lookup (generate.hpp's take a Model<C, B>).
Result<gpu::DeviceSnapshot> speculative_draft(const StackModel&, const gpu::DeviceSequence&, int32_t, int, Sampler&,
                                              int (*)(void*, std::span<const int32_t>, int, int32_t*), void*,
                                              std::span<const int32_t>, SpecScratch&) {
  return StackModel::not_speculative();
}
Result<SpecStep<gpu::DeviceSnapshot>> speculative_step(const StackModel&, gpu::DeviceSequence&, int32_t, int, Sampler&,
                                                       int (*)(void*, std::span<const int32_t>, int, int32_t*), void*,
                                                       std::span<const int32_t>, SpecScratch&) {
  return StackModel::not_speculative();
}

struct Options {
  std::string config = "bench/layer_stack/config.json", out;
  int layers = 0;  // 0: the config's
  std::vector<int64_t> concurrency{1, 8, 32, 64};
  int prompt = 512, gen = 64, step_tokens = 2048, prefill_chunk = 0, sequential_max = 64;
  double budget_s = 240, temperature = 0;
  uint64_t seed = 20261203;
  bool check_config = false;
  bool batch_prefill = true;  // --no-batch-prefill: one forward per prefill chunk (EngineOptions::batch_prefill)
};

std::vector<int64_t> parse_list(const std::string& v) {
  std::vector<int64_t> out;
  std::stringstream ss(v);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(std::stoll(t));
  return out;
}

// Nearest-rank percentile (q in (0, 1]).
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t k = size_t(std::ceil(q * double(v.size())));
  return v[std::clamp<size_t>(k, 1, v.size()) - 1];
}

// N prompts of n random ids from (seed, N): the same for the batched and the sequential run, distinct per request.
std::vector<std::vector<int32_t>> make_prompts(const ModelShape& s, uint64_t seed, int N, int n) {
  std::mt19937_64 rng(synth::mix64(seed ^ (uint64_t(N) << 32)));
  std::uniform_int_distribution<int32_t> tok(3, s.vocab_size - 1);
  std::vector<std::vector<int32_t>> p(static_cast<size_t>(N), std::vector<int32_t>(static_cast<size_t>(n)));
  for (auto& q : p)
    for (auto& t : q) t = tok(rng);
  return p;
}

EngineOptions engine_options(const Options& opt, int max_running, int n_requests) {
  EngineOptions o;
  o.step_tokens = opt.step_tokens;
  o.max_running = max_running;
  o.max_queued = n_requests;
  o.prefill_chunk = opt.prefill_chunk;
  o.batch_prefill = opt.batch_prefill;
  return o;
}

// The engine's cache estimate for a sequence of cap positions (Engine::sequence_bytes; default options).
int64_t sequence_bytes(const StackModel& m, int64_t cap) {
  auto e = Engine<StackModel>::make(m);
  return e.ok() ? e->sequence_bytes(cap) : -1;
}

Request make_request(const Options& opt, std::vector<int32_t> prompt, int gen, size_t i) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = gen;
  r.sampling.temperature = float(opt.temperature);
  r.sampling.seed = opt.seed + i;
  return r;
}

// Token times of one run, filled by on_token (ctx): seconds after the run's start.
struct Recorder {
  Clock::time_point t0;
  std::map<RequestId, size_t> index;
  std::vector<double> submitted;
  std::vector<std::vector<double>> at;
  std::vector<std::vector<int32_t>> tokens;
};
bool record_token(void* ctx, RequestId id, int32_t t) {
  auto* r = static_cast<Recorder*>(ctx);
  const auto it = r->index.find(id);
  if (it == r->index.end()) return true;
  r->at[it->second].push_back(since(r->t0));
  r->tokens[it->second].push_back(t);
  return true;
}

struct Run {
  std::string mode;  // "batched" or "sequential"
  int n = 0, ok = 0;
  int64_t tokens = 0;
  double wall_s = 0, ttft_p50 = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0, mean_batch = 0;
  uint64_t steps = 0;
  std::vector<std::vector<int32_t>> generated;  // per request
  std::vector<std::string> errors;              // requests that did not finish by length
  double tokens_per_s() const { return wall_s > 0 ? double(tokens) / wall_s : 0; }
};

// Submits every prompt at once to an engine of max_running, steps until idle, and measures.
Result<Run> run_engine(const StackModel& m, const Options& opt, const std::vector<std::vector<int32_t>>& prompts,
                       int gen, int max_running, const std::string& mode) {
  const int N = int(prompts.size());
  auto made = Engine<StackModel>::make(m, engine_options(opt, max_running, N));
  if (!made.ok()) return made.status();
  Engine<StackModel>& e = *made;
  Recorder rec;
  rec.at.resize(size_t(N));
  rec.tokens.resize(size_t(N));
  std::vector<RequestId> ids;
  uint64_t max_steps = 16;  // every step runs at least one token of some request
  rec.t0 = Clock::now();
  for (int i = 0; i < N; ++i) {
    Request r = make_request(opt, prompts[size_t(i)], gen, size_t(i));
    r.on_token = record_token;
    r.ctx = &rec;
    max_steps += r.prompt.size() + size_t(gen);
    rec.submitted.push_back(since(rec.t0));
    auto id = e.submit(std::move(r));
    if (!id.ok()) return Status(id.status().code(), "submit: " + id.status().message());
    rec.index[*id] = size_t(i);
    ids.push_back(*id);
  }
  Run run;
  run.mode = mode;
  run.n = N;
  uint64_t dec_steps = 0, dec_rows = 0;
  double last_print = 0;
  while (!e.idle()) {
    if (run.steps >= max_steps)
      return error(Code::internal, mode + " N=" + std::to_string(N) + ": not idle after " + std::to_string(max_steps) +
                                       " steps");
    const StepStats ss = e.step();
    ++run.steps;
    if (ss.decoded > 0) {
      ++dec_steps;
      dec_rows += uint64_t(ss.decoded);
    }
    if (since(rec.t0) - last_print > 5) {
      last_print = since(rec.t0);
      const EngineCounts c = e.counts();
      std::fprintf(stderr, "  %s N=%d: step %llu, %d decoding, %d prefilling, %d queued (%.1f s)\n", mode.c_str(), N,
                   (unsigned long long)run.steps, c.decoding, c.prefilling, c.queued, last_print);
    }
  }
  run.wall_s = since(rec.t0);
  run.mean_batch = dec_steps ? double(dec_rows) / double(dec_steps) : 0;
  std::vector<double> ttft, itl;
  for (int i = 0; i < N; ++i) {
    auto info = e.poll(ids[size_t(i)]);
    if (!info.ok()) return info.status();
    const auto& at = rec.at[size_t(i)];
    run.tokens += int64_t(at.size());
    if (info->finish == RequestFinish::length && info->completion_tokens == gen && int(at.size()) == gen) {
      ++run.ok;
    } else {
      run.errors.push_back("request " + std::to_string(i) + ": " + request_finish_name(info->finish) + " after " +
                           std::to_string(info->completion_tokens) + " tokens" +
                           (info->status.ok() ? std::string() : " (" + info->status.message() + ")"));
    }
    if (!at.empty()) ttft.push_back(at[0] - rec.submitted[size_t(i)]);
    for (size_t k = 1; k < at.size(); ++k) itl.push_back(at[k] - at[k - 1]);
    static_cast<void>(e.release(ids[size_t(i)]));
  }
  run.ttft_p50 = percentile(ttft, 0.5);
  run.ttft_p99 = percentile(ttft, 0.99);
  run.itl_p50 = percentile(itl, 0.5) * 1e3;
  run.itl_p99 = percentile(itl, 0.99) * 1e3;
  run.generated = std::move(rec.tokens);
  std::fprintf(stderr, "  %s N=%d: %lld tokens in %.2f s (%.1f tokens/s), %llu steps, %d/%d requests ok\n",
               mode.c_str(), N, (long long)run.tokens, run.wall_s, run.tokens_per_s(), (unsigned long long)run.steps,
               run.ok, N);
  return Result<Run>(std::move(run));
}

std::string table(const std::vector<Run>& runs) {
  // The sequential throughput a batched row is compared with: the same N, else the largest N that ran (marked *).
  std::map<int, double> seq;
  for (const Run& r : runs)
    if (r.mode == "sequential" && r.ok == r.n) seq[r.n] = r.tokens_per_s();
  std::string t =
      "| engine | N | tokens | wall s | tokens/s | × sequential | TTFT p50 (s) | TTFT p99 (s) | ITL p50 (ms) | "
      "ITL p99 (ms) | steps | mean decode batch | ok |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  bool marked = false;
  char b[512];
  for (const char* mode : {"batched", "sequential"})
    for (const Run& r : runs) {
      if (r.mode != mode) continue;
      std::string ratio = "—";
      if (r.mode == "batched" && !seq.empty()) {
        const auto it = seq.find(r.n);
        const double base = it != seq.end() ? it->second : seq.rbegin()->second;
        std::snprintf(b, sizeof b, "%.2f%s", r.tokens_per_s() / base, it != seq.end() ? "" : "*");
        ratio = b;
        marked = marked || it == seq.end();
      }
      std::snprintf(b, sizeof b, "| %s | %d | %lld | %.2f | %.1f | %s | %.3f | %.3f | %.1f | %.1f | %llu | %.1f | %s |\n",
                    r.mode.c_str(), r.n, (long long)r.tokens, r.wall_s, r.tokens_per_s(), ratio.c_str(), r.ttft_p50,
                    r.ttft_p99, r.itl_p50, r.itl_p99, (unsigned long long)r.steps, r.mean_batch,
                    r.ok == r.n ? "yes" : (std::to_string(r.ok) + "/" + std::to_string(r.n)).c_str());
      t += b;
    }
  if (marked)
    t += "\n\\* against the sequential run at N = " + std::to_string(seq.rbegin()->first) +
         " (none at this N; sequential throughput does not depend on N)\n";
  return t;
}

// --check-config: the plan and what Engine::submit says of the requests, without a device.
int check_config(const ModelShape& s, const Options& opt) {
  const StackModel m(s, nullptr);
  const int64_t cap = int64_t(opt.prompt) + opt.gen - 1;  // the engine's capacity: the last token is never run
  int bad = 0;  // runs the engine or its checks refuse
  for (int64_t N : opt.concurrency) {
    for (const bool sequential : {false, true}) {
      const int mr = sequential ? 1 : int(N);
      if (sequential && N > opt.sequential_max) {
        std::printf("N=%lld sequential: skipped (--sequential-max %d)\n", (long long)N, opt.sequential_max);
        continue;
      }
      auto made = Engine<StackModel>::make(m, engine_options(opt, mr, int(N)));
      if (!made.ok()) {
        std::printf("N=%lld max_running %d: %s\n", (long long)N, mr, made.status().message().c_str());
        ++bad;
        continue;
      }
      const auto prompts = make_prompts(s, opt.seed, int(N), opt.prompt);
      int accepted = 0;
      int64_t bytes = 0;
      std::string why;
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto id = made->submit(make_request(opt, prompts[i], opt.gen, i));
        if (!id.ok()) { why = id.status().message(); continue; }
        auto info = made->poll(*id);
        if (info.ok() && info->phase == RequestPhase::queued) {
          ++accepted;
          bytes += info->cache_bytes;
        } else if (info.ok()) why = info->status.message();
      }
      // Batched: the step budget less the decodes, over every prompt; sequential: each prompt alone.
      const int64_t prefill_steps = sequential ? N * ((opt.prompt + opt.step_tokens - 2) / (opt.step_tokens - 1))
                                            : (N * opt.prompt + opt.step_tokens - mr - 1) / (opt.step_tokens - mr);
      std::printf("N=%lld %s (max_running %d): %d/%lld requests accepted, %.1f MB of cache estimated, "
                  "prefill >= %lld steps%s%s\n",
                  (long long)N, sequential ? "sequential" : "batched", mr, accepted, (long long)N, bytes / 1e6,
                  (long long)prefill_steps, why.empty() ? "" : "; refused: ", why.c_str());
      bad += accepted != N;
    }
  }
  {  // a speculative request must fail clearly
    auto made = Engine<StackModel>::make(m, engine_options(opt, 1, 1));
    if (made.ok()) {
      Request r = make_request(opt, make_prompts(s, opt.seed, 1, opt.prompt)[0], opt.gen, 0);
      r.speculative = true;
      auto id = made->submit(std::move(r));
      auto info = id.ok() ? made->poll(*id) : Result<RequestInfo>(id.status());
      std::printf("a speculative request: %s\n",
                  info.ok() ? (info->status.ok() ? "accepted (unexpected)" : info->status.message().c_str())
                            : info.status().message().c_str());
    }
  }
  std::printf("cache per sequence of %lld positions: %lld bytes (Engine::sequence_bytes)\n", (long long)cap,
              (long long)sequence_bytes(m, cap));
  return bad == 0 ? 0 : 1;
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
    else if (a == "--concurrency") opt.concurrency = parse_list(val());
    else if (a == "--prompt") opt.prompt = std::stoi(val());
    else if (a == "--gen") opt.gen = std::stoi(val());
    else if (a == "--step-tokens") opt.step_tokens = std::stoi(val());
    else if (a == "--prefill-chunk") opt.prefill_chunk = std::stoi(val());
    else if (a == "--sequential-max") opt.sequential_max = std::stoi(val());
    else if (a == "--budget-s") opt.budget_s = std::stod(val());
    else if (a == "--temperature") opt.temperature = std::stod(val());
    else if (a == "--seed") opt.seed = std::stoull(val());
    else if (a == "--out") opt.out = val();
    else if (a == "--check-config") opt.check_config = true;
    else if (a == "--no-batch-prefill") opt.batch_prefill = false;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const bool bad_n = opt.concurrency.empty() || std::any_of(opt.concurrency.begin(), opt.concurrency.end(),
                                                            [](int64_t n) { return n < 1 || n > 4096; });
  if (bad_n || opt.prompt < 1 || opt.gen < 1 || opt.prefill_chunk < 0) {
    std::fprintf(stderr, "--concurrency entries in [1, 4096], --prompt and --gen positive, --prefill-chunk >= 0\n");
    return 2;
  }
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
  {
    std::string modes;
    for (const LayerRole& r : make_schedule(s))
      modes += std::string(modes.empty() ? "" : " ") + mode_name(r.mode) + "/" + std::to_string(r.ratio);
    std::fprintf(stderr, "%s: %d layers (mode/ratio: %s); prompt %d, gen %d, step budget %d, prefill chunk %d\n",
                 opt.config.c_str(), s.num_hidden_layers, modes.c_str(), opt.prompt, opt.gen, opt.step_tokens,
                 opt.prefill_chunk);
  }
  if (opt.check_config) return check_config(s, opt);

  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {  // blocking: ordered after new_sequence's memsets
    std::fprintf(stderr, "no CUDA stream\n");
    return 1;
  }
  std::fprintf(stderr, "building synthetic weights for %d layers...\n", s.num_hidden_layers);
  const auto t0 = Clock::now();
  auto hw = std::make_unique<synth::SyntheticWeights>(synth::make_synthetic_weights(s, opt.seed));
  auto fr = gpu::Forward::create(s, hw->w, engram::Setup{}, stream);
  if (!fr.ok()) {
    std::fprintf(stderr, "Forward::create: %s\n", fr.status().message().c_str());
    return 1;
  }
  hw.reset();
  size_t mem_free = 0, mem_total = 0;
  cudaMemGetInfo(&mem_free, &mem_total);
  std::fprintf(stderr, "weights on the device: %.2f GB (%.1f s); %.2f GB free of %.2f GB\n",
               (*fr)->weight_bytes() / 1e9, since(t0), mem_free / 1e9, mem_total / 1e9);
  const StackModel m(s, fr->get());

  {  // warm-up at the largest N: one request of --prompt tokens, the rest short, a few batched decodes
    const int N = int(*std::max_element(opt.concurrency.begin(), opt.concurrency.end()));
    auto prompts = make_prompts(s, opt.seed + 1, N, 8);
    prompts[0] = make_prompts(s, opt.seed + 1, 1, opt.prompt)[0];
    std::fprintf(stderr, "warm-up (N=%d)...\n", N);
    auto w = run_engine(m, opt, prompts, 4, N, "warm-up");
    if (!w.ok() || w->ok != N) {
      std::fprintf(stderr, "warm-up failed: %s\n",
                   !w.ok() ? w.status().message().c_str() : w->errors.empty() ? "?" : w->errors[0].c_str());
      return 1;
    }
  }

  std::vector<Run> runs;
  std::vector<std::string> notes;
  bool all_ok = true;
  double seq_per_request_s = 0;  // from the last sequential run
  auto failed = [&](const std::string& what, const std::string& why) {
    std::fprintf(stderr, "%s failed: %s\n", what.c_str(), why.c_str());
    notes.push_back(what + " failed: " + why);
    all_ok = false;
  };
  for (int64_t N64 : opt.concurrency) {
    const int N = int(N64);
    const auto prompts = make_prompts(s, opt.seed, N, opt.prompt);
    std::fprintf(stderr, "N=%d batched...\n", N);
    auto b = run_engine(m, opt, prompts, opt.gen, N, "batched");
    if (!b.ok()) failed("batched N=" + std::to_string(N), b.status().message());
    else runs.push_back(*b);

    if (N > opt.sequential_max) {
      notes.push_back("sequential N=" + std::to_string(N) + " skipped (--sequential-max " +
                      std::to_string(opt.sequential_max) + ")");
      std::fprintf(stderr, "%s\n", notes.back().c_str());
      continue;
    }
    if (seq_per_request_s * N > opt.budget_s) {
      char line[256];
      std::snprintf(line, sizeof line, "sequential N=%d skipped: it would take ~%.0f s (> --budget-s %.0f)", N,
                    seq_per_request_s * N, opt.budget_s);
      notes.push_back(line);
      std::fprintf(stderr, "%s\n", line);
      continue;
    }
    std::fprintf(stderr, "N=%d sequential...\n", N);
    auto q = run_engine(m, opt, prompts, opt.gen, 1, "sequential");
    if (!q.ok()) {
      failed("sequential N=" + std::to_string(N), q.status().message());
      continue;
    }
    seq_per_request_s = q->wall_s / N;
    if (b.ok() && opt.temperature <= 0) {  // informational: kernels chosen by batch size may round differently
      int same = 0;
      for (int i = 0; i < N; ++i) same += b->generated[size_t(i)] == q->generated[size_t(i)];
      notes.push_back("N=" + std::to_string(N) + ": " + std::to_string(same) + "/" + std::to_string(N) +
                      " requests returned the same greedy tokens batched and sequential");
    }
    runs.push_back(*q);
  }
  for (const Run& r : runs) {
    all_ok = all_ok && r.ok == r.n;
    for (const std::string& e : r.errors) notes.push_back(r.mode + " N=" + std::to_string(r.n) + ": " + e);
  }

  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const int64_t cap = int64_t(opt.prompt) + opt.gen - 1;
  char sampling[64];
  if (opt.temperature > 0) std::snprintf(sampling, sizeof sampling, "temperature %.2f (seeded)", opt.temperature);
  else std::snprintf(sampling, sizeof sampling, "greedy");
  const std::string head =
      "Engine (runtime/engine.hpp) on " + opt.config + " cut to " + std::to_string(s.num_hidden_layers) +
      " layers at released widths, synthetic weights, " + prop.name + ". Per N: N requests submitted at once, " +
      "prompts of " + std::to_string(opt.prompt) + " random ids (distinct per request), " + std::to_string(opt.gen) +
      " tokens each, " + sampling + "; step budget " + std::to_string(opt.step_tokens) + " tokens, prefill chunk " +
      (opt.prefill_chunk > 0 ? std::to_string(opt.prefill_chunk) : std::string("= what the budget leaves")) +
      "; batched: max_running N; sequential: max_running 1. Host wall clock: TTFT from submit to the token's return "
      "from step(), ITL between a request's successive tokens (p99: nearest rank). Sequence capacity " +
      std::to_string(cap) + " positions, ~" + std::to_string(sequence_bytes(m, cap)) +
      " cache bytes each (engine estimate).\n\n    " + cmd + "\n\n";
  std::string t = table(runs);
  if (!notes.empty()) {
    t += "\n";
    for (const std::string& n : notes) t += "- " + n + "\n";
  }
  std::printf("\n%s%s", head.c_str(), t.c_str());
  if (!opt.out.empty()) {
    if (FILE* f = std::fopen(opt.out.c_str(), "w")) {
      std::fprintf(f, "%s%s", head.c_str(), t.c_str());
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cannot write %s\n", opt.out.c_str());
      all_ok = false;
    }
  }
  fr->reset();
  cudaStreamDestroy(stream);
  return all_ok ? 0 : 1;
}
