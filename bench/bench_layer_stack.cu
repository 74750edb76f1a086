// Decode step of a released-width layer stack (bench/layer_stack/config.json: 12 layers, the release's mode
// pattern, ~91 GB of weights) on one GPU with synthetic weights (bench/synthetic_model.hpp), at several batch
// sizes and context lengths. No Engram layers (each released table is ~98 GB of E4M3 codes plus ~3 GB of
// scales) and no DSpark stages. CUDA events, warm-up, medians; bytes and FLOPs per step estimated from the
// shapes and reported against the measured H200 ceilings.
//
//   bench_layer_stack [--config F] [--contexts 4096,131072] [--batches 1,8,64] [--warmup 3] [--steps 20] [--profile]
//                     [--prefill 512,2048] [--long 32768,131072] [--chunk 4096] [--out FILE.md] [--check-config]
//                     [--moe-kernel auto|staged|wgmma-bf16|registers|stream]  (staged: the MoE prefill before
//                     session 16; wgmma-bf16: also the shared expert; registers: the decode MoE before session 17;
//                     stream: the streaming kernel wherever it fits: the routed GEMMs, the shared expert's w1/w3
//                     up to 64 tokens) [--cub-routing] (MoeShape::fused_routing off) [--moe-w2-bf16] (MoeShape::w2_bf16)
//                     [--moe-overlap] (the shared expert on a second stream) [--moe-w13-split Z]
//                     (MoeShape::w13_split: the routed w1/w3 on BF16 wgmma over Z K ranges)
//                     [--fixed] [--graph] [--graph-loop]
//
// --prefill T,...: also a prefill chunk of T tokens into a fresh sequence (position 0, no logits), timed the same way
// (--contexts "" --batches "" for the prefill alone); with --profile, where its time goes.
// --long T,...: a prompt of T tokens prefilled in chunks of --chunk tokens into a fresh sequence, once exactly and
// once with SPEC §5's decoder bounded replay (ForwardOptions::bounded_replay), one pass each; GPU time per chunk
// (CUDA events, a synchronization between chunks), FLOPs summed over the chunks at their mean contexts.
//
// --fixed: the ops of the V41Flash preset (gpu::Ops<configs::V41Flash>: hc, attention H/D and indexer nI/dI as
// kernel template arguments) instead of gpu::Forward's run-time sizes; the config must have those sizes.
// --check-config: host only (no CUDA call): schedule, per-layer weight bytes, and the estimated bytes per case.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/tensors.hpp>
#include <dsv41/model/cuda_model.hpp>

#include "synthetic_model.hpp"

using namespace dsv41;

namespace {

constexpr double kCopyTBs = 4.25, kFp8TF = 1422;  // measured ceilings of the H200 (notes/gpu.md)

// One decode step of the batch through the blocks' order on the GPU ops (one forward of B rows).
constexpr const char* kBatchPath = "blocks::decode on gpu::Ops";
template <class F>
Status forward_batch(const F& f, std::span<gpu::DeviceSequence* const> seqs, std::span<const int32_t> ids,
                     float* d_logits) {
  return blocks::decode(f, seqs, ids, d_logits);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Per-layer weight bytes as uploaded (from the synthetic Weights), kept after the host copy is freed.
struct LayerSizes {
  double attn = 0, moe_dense = 0, expert = 0, vectors = 0;  // expert: one routed expert (w1 + w2 + w3)
  double attn_flops = 0, moe_flops = 0;                      // per token: 2·out·in of the dense linears
  int n_experts = 0, top_k = 0;
};
struct Sizes {
  std::vector<LayerSizes> layers;
  double head = 0, embed_row = 0, head_flops = 0;
  double total() const {
    double t = 2 * head;  // embed + head
    for (const auto& l : layers) t += l.attn + l.moe_dense + l.expert * l.n_experts + l.vectors;
    return t;
  }
};

Sizes measure(const ModelShape& s, const std::vector<LayerRole>& sched, const Weights& w) {
  Sizes z;
  z.head = double(synth::linear_bytes(w.head));
  z.embed_row = double(s.hidden_size) * 2;
  z.head_flops = 2.0 * w.head.out * w.head.in;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& L = w.layers[i];
    LayerSizes ls;
    for (const Linear* p : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.c_wkv, &L.c_wgate, &L.i_wk, &L.i_wq_b, &L.i_wproj}) {
      ls.attn += double(synth::linear_bytes(*p));
      if (*p) ls.attn_flops += 2.0 * p->out * p->in;
    }
    for (const Linear* p : {&L.gate, &L.shared[0], &L.shared[1], &L.shared[2]}) {
      ls.moe_dense += double(synth::linear_bytes(*p));
      ls.moe_flops += 2.0 * p->out * p->in;
    }
    for (const Linear& l : L.experts.at(0)) ls.expert += double(synth::linear_bytes(l));
    ls.vectors = double(synth::vector_bytes(L));
    ls.n_experts = sched[i].n_experts;
    ls.top_k = sched[i].top_k;
    z.layers.push_back(ls);
  }
  return z;
}

// Expected distinct experts hit by B tokens each picking k of E uniformly (without replacement per token).
double experts_hit(int E, int k, int B) { return E * (1.0 - std::pow(1.0 - double(k) / E, B)); }

struct Cost {
  double weights = 0, kv = 0, flops = 0;
  double bytes() const { return weights + kv; }
};

// Bytes that one decode step must read (weights at least once; KV as each layer reads it) and its FLOPs.
Cost step_cost(const ModelShape& s, const std::vector<LayerRole>& sched, const Sizes& z, int64_t ctx, int B, bool logits) {
  Cost c;
  const int W = s.sliding_window, K = s.index_topk, H = s.num_attention_heads, D = s.head_dim;
  const double we = num::window_entry_size(D), me = num::main_entry_size(D), ie = num::index_entry_size(s.index_head_dim);
  const double mix_flops = 2.0 * 2 * (2 + s.hc_mult) * s.hc_mult * s.hc_mult * s.hidden_size;  // both mHC steps
  c.weights += B * z.embed_row;
  for (size_t l = 0; l < z.layers.size(); ++l) {
    const LayerSizes& ls = z.layers[l];
    const LayerRole& r = sched[l];
    c.weights += ls.attn + ls.moe_dense + ls.vectors + experts_hit(ls.n_experts, ls.top_k, B) * ls.expert;
    double per_seq_kv = std::min<int64_t>(W, ctx) * we, entries = std::min<int64_t>(W, ctx);
    if (r.ratio > 0) {
      const int64_t vis = ctx / r.ratio;
      per_seq_kv += std::min<int64_t>(K, vis) * me;
      entries += std::min<int64_t>(K, vis);
      if (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex) {
        const int64_t keys = ctx / sched[size_t(r.kv_source)].ratio;
        per_seq_kv += keys * ie;
        c.flops += B * 2.0 * s.index_n_heads * s.index_head_dim * keys;
      }
    }
    c.kv += B * per_seq_kv;
    const double expert_flops = ls.top_k * 3 * 2.0 * s.moe_intermediate_size * s.hidden_size;
    c.flops += B * (ls.attn_flops + ls.moe_flops + expert_flops + 4.0 * H * D * entries + mix_flops);
  }
  if (logits) {
    c.weights += z.head;
    c.flops += B * z.head_flops;
  }
  return c;
}

// Device bytes new_sequence allocates for max_positions (rings, compressed entries, index keys, pending rows).
double sequence_bytes(const ModelShape& s, const std::vector<LayerRole>& sched, int64_t max_positions) {
  const int D = s.head_dim;
  double b = 0;
  for (const auto& r : sched) {
    b += double(s.sliding_window) * num::window_entry_size(D);
    if (r.mode != AttnMode::Full) continue;
    b += double(max_positions / r.ratio) * (num::main_entry_size(D) + num::index_entry_size(s.index_head_dim));
    if (r.ratio > 1) b += 2.0 * r.ratio * D * 4;
  }
  return b;
}

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

void print_mem(const char* when) {
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) == cudaSuccess)
    std::printf("device memory %s: %.2f GB used, %.2f GB free of %.2f GB\n", when, (tot - fr) / 1e9, fr / 1e9, tot / 1e9);
}

struct Options {
  std::string config = "bench/layer_stack/config.json", out;
  std::vector<int64_t> contexts{4096, 131072}, batches{1, 8, 64}, prefill, long_prompts;
  int chunk = 4096;
  int warmup = 3, steps = 20;
  bool check_config = false, profile = false;
  gpu::SkinnyKernel moe_kernel = gpu::SkinnyKernel::automatic;  // --moe-kernel auto | staged | wgmma-bf16 | registers | stream
  bool fused_routing = true;                                     // --cub-routing: false (MoeShape::fused_routing)
  bool w2_bf16 = false;                                          // --moe-w2-bf16 (MoeShape::w2_bf16)
  bool overlap = false;                                          // --moe-overlap (UnitOps::set_moe_overlap)
  int w13_split = 0;                                             // --moe-w13-split Z (MoeShape::w13_split)
  bool fixed = false;  // --fixed: gpu::Ops<configs::V41Flash> (the release's kernel sizes as template arguments)
  bool graph = false;  // --graph: also one captured step replayed as a CUDA graph (the GPU time without the host)
  bool graph_loop = false;  // --graph-loop: also a decode loop over one captured step (gpu::DecodeGraph)
  uint64_t seed = 20261201;
};

std::string table_header() {
  return "| context | batch | logits | ms/step (GPU median) | min ms | host enqueue ms/step | tokens/s | MB read (est.) "
         "| TB/s | % of 4.25 TB/s | GFLOP (est.) | % of FP8 peak |\n"
         "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
}

std::string table_row(int64_t ctx, int B, const char* logits, double ms, double ms_min, double host_ms, const Cost& c) {
  char buf[512];
  const double tbs = ms > 0 ? c.bytes() / (ms * 1e-3) / 1e12 : 0, tf = ms > 0 ? c.flops / (ms * 1e-3) / 1e12 : 0;
  std::snprintf(buf, sizeof buf, "| %lld | %d | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.3f | %.1f%% | %.1f | %.2f%% |\n",
                (long long)ctx, B, logits, ms, ms_min, host_ms, ms > 0 ? B / (ms * 1e-3) : 0.0,
                c.bytes() / 1e6, tbs, 100 * tbs / kCopyTBs, c.flops / 1e9, 100 * tf / kFp8TF);
  return buf;
}

int check_config(const ModelShape& s, const std::vector<LayerRole>& sched, const Sizes& z, const Options& opt) {
  std::printf("schedule (%d layers):\n  layer ratio mode     kv_src idx_src cand  attn MB  gate+shared MB  experts MB  vectors MB\n",
              s.num_hidden_layers);
  for (size_t l = 0; l < sched.size(); ++l) {
    const auto& r = sched[l];
    const auto& ls = z.layers[l];
    std::printf("  %5d %5d %-8s %6d %7d %4s %8.1f %15.1f %11.1f %11.2f\n", r.id, r.ratio, mode_name(r.mode), r.kv_source,
                r.index_source, r.candidate_source ? "src" : (r.uses_candidates ? "use" : "-"), ls.attn / 1e6,
                ls.moe_dense / 1e6, ls.expert * ls.n_experts / 1e6, ls.vectors / 1e6);
  }
  // Cross-check: the matrices (all but F32) of the checkpoint's expected tensor list, in bytes.
  double ck = 0;
  for (const auto& t : expected_tensors(s)) {
    if (t.dtype == "F32" || t.shape.size() < 2) continue;
    double n = 1;
    for (auto d : t.shape) n *= double(d);
    ck += n * (t.dtype == "BF16" ? 2 : 1);
  }
  double lin = 2 * z.head;
  for (const auto& l : z.layers) lin += l.attn + l.moe_dense + l.expert * l.n_experts;
  std::printf("embed + head: %.2f GB\nweights to upload: %.2f GB (matrices %.3f GB; checkpoint's matrices %.3f GB: %s)\n",
              2 * z.head / 1e9, z.total() / 1e9, lin / 1e9, ck / 1e9, std::fabs(lin - ck) < 1 ? "equal" : "DIFFER");
  std::printf("one routed expert: %.2f MB; experts hit (uniform): B=1 %.1f, B=8 %.1f, B=64 %.1f of %d\n",
              z.layers[0].expert / 1e6, experts_hit(s.n_routed_experts, s.num_experts_per_tok, 1),
              experts_hit(s.n_routed_experts, s.num_experts_per_tok, 8),
              experts_hit(s.n_routed_experts, s.num_experts_per_tok, 64), s.n_routed_experts);
  std::printf("\nestimated per step (weights read once, KV as each layer reads it):\n");
  std::printf("| context | batch | logits | weights MB | KV MB | total MB | GFLOP | floor ms at 4.25 TB/s | seq alloc MB each |\n"
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t ctx : opt.contexts)
    for (int64_t B : opt.batches)
      for (bool lg : {true, false}) {
        const Cost c = step_cost(s, sched, z, ctx, int(B), lg);
        std::printf("| %lld | %lld | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.1f |\n", (long long)ctx, (long long)B,
                    lg ? "yes" : "no", c.weights / 1e6, c.kv / 1e6, c.bytes() / 1e6, c.flops / 1e9,
                    c.bytes() / (kCopyTBs * 1e12) * 1e3, sequence_bytes(s, sched, ctx + 64) / 1e6);
      }
  return 0;
}

// Device buffers and events freed on scope exit.
struct DeviceBuf {
  float* p = nullptr;
  ~DeviceBuf() { if (p) cudaFree(p); }
};
struct Events {
  std::vector<cudaEvent_t> ev;
  ~Events() { for (auto e : ev) cudaEventDestroy(e); }
  Status create(size_t n) {
    ev.resize(n);
    for (auto& e : ev) DSV41_CUDA_TRY(cudaEventCreate(&e), "event");
    return Status::Ok();
  }
  // Milliseconds between consecutive events, appended to ms (the events have completed).
  Status gaps(std::vector<double>& ms) const {
    for (size_t i = 0; i + 1 < ev.size(); ++i) {
      float t = 0;
      DSV41_CUDA_TRY(cudaEventElapsedTime(&t, ev[i], ev[i + 1]), "event time");
      ms.push_back(t);
    }
    return Status::Ok();
  }
};

// One (context, batch) case: sequences filled to `ctx` positions, then warm-up + timed steps with and
// without logits. Appends table rows; `ok` turns false when the logits are not finite.
template <class F>
Status run_case(F& f, const std::vector<LayerRole>& sched, const Sizes& z, const Options& opt,
                int64_t ctx, int B, cudaStream_t stream, std::string& table, bool& ok) {
  const ModelShape& s = f.shape();
  const int V = s.vocab_size;
  const int64_t cap = ctx + std::max<int64_t>(64, 2 * (opt.warmup + opt.steps) + (opt.profile ? opt.steps : 0) +
                                                      (opt.graph_loop ? opt.warmup + 2 * opt.steps : 0));
  std::printf("context %lld, batch %d: %d sequences of %.1f MB\n", (long long)ctx, B, B, sequence_bytes(s, sched, cap) / 1e6);
  std::vector<gpu::DeviceSequence> seqs;
  for (int b = 0; b < B; ++b) {
    auto q = f.new_sequence(cap);
    if (!q.ok()) {
      print_mem("at the failed allocation");
      return q.status();
    }
    seqs.push_back(std::move(q).value());
    DSV41_TRY(synth::fill_sequence(seqs.back(), s, sched, ctx, opt.seed + 1000 * uint64_t(ctx) + uint64_t(b), stream));
  }
  std::vector<gpu::DeviceSequence*> ptrs;
  for (auto& q : seqs) ptrs.push_back(&q);
  DeviceBuf logits_buf;
  DSV41_CUDA_TRY(cudaMalloc(&logits_buf.p, size_t(B) * V * 4), "logits allocation");
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "sequence fill");
  print_mem("after allocating the sequences");
  std::mt19937 rng(uint32_t(ctx + B));
  std::uniform_int_distribution<int32_t> tok(3, V - 1);
  std::vector<int32_t> ids(static_cast<size_t>(B));
  for (bool logits : {true, false}) {
    float* out = logits ? logits_buf.p : nullptr;
    Events ev;
    DSV41_TRY(ev.create(size_t(opt.steps) + 1));
    for (int i = 0; i < opt.warmup; ++i) {
      for (auto& x : ids) x = tok(rng);
      DSV41_TRY(forward_batch(f, ptrs, ids, out));
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "warm-up");
    std::vector<double> host_ms, gpu_ms;
    const double w0 = now_s();
    for (int i = 0; i < opt.steps; ++i) {
      for (auto& x : ids) x = tok(rng);
      DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(i)], stream), "event");
      const double h0 = now_s();
      DSV41_TRY(forward_batch(f, ptrs, ids, out));
      host_ms.push_back((now_s() - h0) * 1e3);
    }
    DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(opt.steps)], stream), "event");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "timed steps");
    const double wall = (now_s() - w0) * 1e3 / std::max(opt.steps, 1);
    DSV41_TRY(ev.gaps(gpu_ms));
    const double med = median(gpu_ms), mn = gpu_ms.empty() ? 0 : *std::min_element(gpu_ms.begin(), gpu_ms.end());
    table += table_row(ctx, B, logits ? "yes" : "no", med, mn, median(host_ms), step_cost(s, sched, z, ctx, B, logits));
    std::printf("  logits %s: %.3f ms/step GPU median (min %.3f), host enqueue %.3f ms/step, wall %.3f ms/step\n",
                logits ? "yes" : "no", med, mn, median(host_ms), wall);
    if (logits) {  // smoke check: the last step's logits are finite
      std::vector<float> h(size_t(B) * V);
      DSV41_CUDA_TRY(cudaMemcpy(h.data(), logits_buf.p, h.size() * 4, cudaMemcpyDeviceToHost), "logits copy");
      size_t bad = 0;
      for (float x : h) bad += !std::isfinite(x);
      const auto amax = std::max_element(h.begin(), h.begin() + V) - h.begin();
      std::printf("  logits finite: %s (%zu of %zu not finite); sequence 0 argmax %lld\n", bad ? "NO" : "yes", bad,
                  h.size(), (long long)amax);
      ok = ok && bad == 0;
    }
  }
  if (opt.graph) {
    // One step (with logits) captured and replayed: the same positions each time, so each replay rewrites the same
    // cache entries. What it shows is the GPU time of today's kernels when the host enqueue is off the critical
    // path; a decode loop over graphs needs positions read from device memory (not done yet).
    for (auto& x : ids) x = tok(rng);
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    DSV41_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "graph capture");
    const Status cs = forward_batch(f, ptrs, ids, logits_buf.p);
    DSV41_CUDA_TRY(cudaStreamEndCapture(stream, &g), "graph capture");
    if (!cs.ok()) {
      cudaGraphDestroy(g);
      return cs;
    }
    const cudaError_t ie = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    DSV41_CUDA_TRY(ie, "graph instantiate");
    Events ev;
    DSV41_TRY(ev.create(size_t(opt.steps) + 1));
    std::vector<double> gpu_ms;
    const Status gs = [&]() -> Status {
      for (int i = 0; i < opt.warmup; ++i) DSV41_CUDA_TRY(cudaGraphLaunch(ge, stream), "graph launch");
      for (int i = 0; i < opt.steps; ++i) {
        DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(i)], stream), "event");
        DSV41_CUDA_TRY(cudaGraphLaunch(ge, stream), "graph launch");
      }
      DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(opt.steps)], stream), "event");
      DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "graph replays");
      DSV41_TRY(ev.gaps(gpu_ms));
      return Status::Ok();
    }();
    cudaGraphExecDestroy(ge);
    DSV41_TRY(gs);
    const double med = median(gpu_ms), mn = *std::min_element(gpu_ms.begin(), gpu_ms.end());
    table += table_row(ctx, B, "yes, graph replay", med, mn, 0, step_cost(s, sched, z, ctx, B, true));
    std::printf("  graph replay (logits): %.3f ms/step GPU median (min %.3f)\n", med, mn);
  }
  if (opt.graph_loop) {
    // A decode loop: one step captured (gpu::DecodeGraph), replayed with new ids and positions each step. GPU time:
    // events around each step of a free-running loop (the host runs ahead). Host time: the step() call (the step
    // inputs' fill, one copy, one graph launch, the counters) in a second loop that waits for the GPU before each
    // call, so that no call blocks on a pinned buffer still in use.
    auto dg = gpu::DecodeGraph<F>::capture(f, ptrs, logits_buf.p, opt.warmup + 2 * opt.steps);
    if (!dg.ok()) return dg.status();
    Events ev;
    DSV41_TRY(ev.create(size_t(opt.steps) + 1));
    for (int i = 0; i < opt.warmup; ++i) {
      for (auto& x : ids) x = tok(rng);
      DSV41_TRY((*dg)->step(ids));
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "graph loop warm-up");
    std::vector<double> host_ms, gpu_ms;
    for (int i = 0; i < opt.steps; ++i) {
      for (auto& x : ids) x = tok(rng);
      DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(i)], stream), "event");
      DSV41_TRY((*dg)->step(ids));
    }
    DSV41_CUDA_TRY(cudaEventRecord(ev.ev[size_t(opt.steps)], stream), "event");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "graph loop");
    DSV41_TRY(ev.gaps(gpu_ms));
    for (int i = 0; i < opt.steps; ++i) {
      for (auto& x : ids) x = tok(rng);
      DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "graph loop");
      const double h0 = now_s();
      DSV41_TRY((*dg)->step(ids));
      host_ms.push_back((now_s() - h0) * 1e3);
    }
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "graph loop");
    const double med = median(gpu_ms), mn = *std::min_element(gpu_ms.begin(), gpu_ms.end());
    table += table_row(ctx, B, "yes, graph loop", med, mn, median(host_ms), step_cost(s, sched, z, ctx, B, true));
    std::printf("  graph loop (logits): %.3f ms/step GPU median (min %.3f), host %.3f ms/step\n", med, mn,
                median(host_ms));
  }
  if (opt.profile) {  // where a step's GPU time goes (op_timer.hpp), with logits, one sync per step
    gpu::OpTimer timer;
    std::map<std::string, double> tot;
    f.set_timer(&timer);
    for (int i = 0; i < opt.steps; ++i) {
      for (auto& x : ids) x = tok(rng);
      Status st = forward_batch(f, ptrs, ids, logits_buf.p);
      if (st.ok()) st = timer.collect(stream, tot);
      if (!st.ok()) {
        f.set_timer(nullptr);
        return st;
      }
    }
    f.set_timer(nullptr);
    double sum = 0;
    for (const auto& kv : tot) sum += kv.second;
    std::printf("  profile, context %lld batch %d (per step, sections sum to %.3f ms):\n", (long long)ctx, B,
                sum / std::max(opt.steps, 1));
    for (const auto& [name, ms] : tot)
      std::printf("    %-20s %8.3f ms  %5.1f%%\n", name.c_str(), ms / std::max(opt.steps, 1), 100.0 * ms / sum);
  }
  return Status::Ok();
}

std::string prefill_header() {
  return "| prefill tokens | ms (GPU median) | min ms | host enqueue ms | tokens/s | GFLOP (est.) | TFLOP/s "
         "| % of FP8 peak | weights MB (est.) | TB/s of weights |\n"
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
}

// A prefill chunk of T tokens into a fresh sequence (allocated outside the timed region), no logits: warm-up, timed
// repetitions, then (--profile) as many with the op timer. Cost: step_cost of T rows at the chunk's mean context.
template <class F>
Status run_prefill(F& f, const std::vector<LayerRole>& sched, const Sizes& z, const Options& opt, int T,
                   cudaStream_t stream, std::string& table) {
  const ModelShape& s = f.shape();
  std::mt19937 rng{uint32_t(T)};
  std::uniform_int_distribution<int32_t> tok(3, s.vocab_size - 1);
  std::vector<int32_t> ids(size_t(T), 0);
  Events ev;
  DSV41_TRY(ev.create(2));
  gpu::OpTimer timer;
  std::map<std::string, double> tot;
  std::vector<double> gpu_ms, host_ms;
  const int reps = opt.warmup + opt.steps + (opt.profile ? opt.steps : 0);
  for (int i = 0; i < reps; ++i) {
    for (auto& x : ids) x = tok(rng);
    auto q = f.new_sequence(T + 16);
    if (!q.ok()) return q.status();
    gpu::DeviceSequence seq = std::move(q).value();
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "sequence allocation");
    const bool timed = i >= opt.warmup && i < opt.warmup + opt.steps, prof = i >= opt.warmup + opt.steps;
    if (prof) f.set_timer(&timer);
    DSV41_CUDA_TRY(cudaEventRecord(ev.ev[0], stream), "event");
    const double h0 = now_s();
    Status st = blocks::forward(f, seq, ids, ForwardOptions{}, static_cast<float*>(nullptr));
    const double h = (now_s() - h0) * 1e3;
    if (st.ok() && cudaEventRecord(ev.ev[1], stream) != cudaSuccess) st = error(Code::internal, "prefill: event");
    if (prof) {
      if (st.ok()) st = timer.collect(stream, tot);
      f.set_timer(nullptr);
    }
    DSV41_TRY(st);
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "prefill");
    float ms = 0;
    DSV41_CUDA_TRY(cudaEventElapsedTime(&ms, ev.ev[0], ev.ev[1]), "event time");
    if (timed) { gpu_ms.push_back(ms); host_ms.push_back(h); }
  }
  const double med = median(gpu_ms), mn = gpu_ms.empty() ? 0 : *std::min_element(gpu_ms.begin(), gpu_ms.end());
  const Cost c = step_cost(s, sched, z, T / 2, T, false);
  const double tf = med > 0 ? c.flops / (med * 1e-3) / 1e12 : 0;
  char buf[512];
  std::snprintf(buf, sizeof buf, "| %d | %.3f | %.3f | %.3f | %.0f | %.1f | %.1f | %.2f%% | %.1f | %.3f |\n", T, med, mn,
                median(host_ms), med > 0 ? T / (med * 1e-3) : 0.0, c.flops / 1e9, tf, 100 * tf / kFp8TF,
                c.weights / 1e6, med > 0 ? c.weights / (med * 1e-3) / 1e12 : 0.0);
  table += buf;
  std::printf("prefill %d tokens: %.3f ms GPU median (min %.3f), host enqueue %.3f ms, %.1f TFLOP/s (est.)\n", T, med, mn,
              median(host_ms), tf);
  if (opt.profile) {
    double sum = 0;
    for (const auto& kv : tot) sum += kv.second;
    std::printf("  profile, prefill %d (per chunk, sections sum to %.3f ms):\n", T, sum / std::max(opt.steps, 1));
    for (const auto& [name, ms] : tot)
      std::printf("    %-20s %8.3f ms  %5.1f%%\n", name.c_str(), ms / std::max(opt.steps, 1), 100.0 * ms / sum);
  }
  return Status::Ok();
}

std::string long_header() {
  return "| prompt tokens | chunk | path | GPU s | tokens/s | first chunk ms | last chunk ms | GFLOP (est.) | TFLOP/s "
         "| % of FP8 peak |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n";
}

// A prompt of T random tokens in chunks of C into a fresh sequence, exact or with decoder bounded replay.
template <class F>
Status run_long(F& f, const std::vector<LayerRole>& sched, const Sizes& z, int64_t T, int C, bool bounded,
                cudaStream_t stream, std::string& table) {
  const ModelShape& s = f.shape();
  std::mt19937 rng{uint32_t(T) ^ 0x5151u};
  std::uniform_int_distribution<int32_t> tok(3, s.vocab_size - 1);
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& x : ids) x = tok(rng);
  auto q = f.new_sequence(T + 16);
  if (!q.ok()) return q.status();
  gpu::DeviceSequence seq = std::move(q).value();
  DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "sequence allocation");
  Events ev;
  DSV41_TRY(ev.create(2));
  ForwardOptions fo;
  fo.bounded_replay = bounded;
  double total_ms = 0, flops = 0, first_ms = 0, last_ms = 0;
  for (int64_t p0 = 0; p0 < T; p0 += C) {
    const int n = int(std::min<int64_t>(C, T - p0));
    DSV41_CUDA_TRY(cudaEventRecord(ev.ev[0], stream), "event");
    DSV41_TRY(blocks::forward(f, seq, std::span<const int32_t>(ids.data() + p0, size_t(n)), fo,
                              static_cast<float*>(nullptr)));
    DSV41_CUDA_TRY(cudaEventRecord(ev.ev[1], stream), "event");
    DSV41_CUDA_TRY(cudaStreamSynchronize(stream), "long prefill");
    float ms = 0;
    DSV41_CUDA_TRY(cudaEventElapsedTime(&ms, ev.ev[0], ev.ev[1]), "event time");
    if (p0 == 0) first_ms = ms;
    last_ms = ms;
    total_ms += ms;
    flops += step_cost(s, sched, z, p0 + n / 2, n, false).flops;
  }
  const double tf = total_ms > 0 ? flops / (total_ms * 1e-3) / 1e12 : 0;
  char buf[512];
  std::snprintf(buf, sizeof buf, "| %lld | %d | %s | %.3f | %.0f | %.1f | %.1f | %.0f | %.1f | %.2f%% |\n", (long long)T, C,
                bounded ? "bounded replay" : "exact", total_ms / 1e3, T / (total_ms * 1e-3), first_ms, last_ms,
                flops / 1e9, tf, 100 * tf / kFp8TF);
  table += buf;
  std::printf("prefill %lld tokens in chunks of %d, %s: %.3f s GPU, %.0f tokens/s, first chunk %.1f ms, last %.1f ms\n",
              (long long)T, C, bounded ? "bounded replay" : "exact", total_ms / 1e3, T / (total_ms * 1e-3), first_ms,
              last_ms);
  return Status::Ok();
}

// Uploads the weights into ops F (gpu::Forward, or a preset's gpu::Ops) and runs every case.
template <class F>
int run_all(const ModelShape& s, const std::vector<LayerRole>& sched, const Sizes& z, const Options& opt,
            std::unique_ptr<synth::SyntheticWeights> hw, cudaStream_t stream) {
  print_mem("before upload");
  const double t0 = now_s();
  auto fr = F::create(s, hw->w, engram::Setup{}, stream);
  const double t_up = now_s() - t0;
  if (!fr.ok()) { std::fprintf(stderr, "Forward::create: %s\n", fr.status().message().c_str()); return 1; }
  F& f = **fr;
  f.set_moe_kernel(opt.moe_kernel);
  f.set_moe_fused_routing(opt.fused_routing);
  f.set_moe_w2_bf16(opt.w2_bf16);
  f.set_moe_w13_split(opt.w13_split);
  if (opt.w13_split) std::printf("MoE: routed w1/w3 on the BF16 wgmma kernel over %d K ranges (--moe-w13-split)\n", opt.w13_split);
  if (opt.overlap) {
    if (Status os = f.set_moe_overlap(true); !os.ok()) {
      std::fprintf(stderr, "--moe-overlap: %s\n", os.message().c_str());
      return 1;
    }
    std::printf("MoE: the shared expert on a second stream (--moe-overlap)\n");
  }
  if (opt.w2_bf16) std::printf("MoE: routed w2 on the BF16 wgmma kernel at every size (--moe-w2-bf16)\n");
  if (!opt.fused_routing) std::printf("MoE routing: CUB sort and tile launches at every size (--cub-routing)\n");
  if (opt.moe_kernel != gpu::SkinnyKernel::automatic)
    std::printf("MoE GEMMs: %s kernel (--moe-kernel)\n", opt.moe_kernel == gpu::SkinnyKernel::staged ? "staged"
                : opt.moe_kernel == gpu::SkinnyKernel::registers ? "register"
                : opt.moe_kernel == gpu::SkinnyKernel::stream ? "streaming where it fits" : "BF16 wgmma");
  hw.reset();  // the device holds its own copy
  std::printf("weights uploaded: %.2f GB in %.1f s (%.1f GB/s); estimated %.2f GB\n",
              f.weight_bytes() / 1e9, t_up, f.weight_bytes() / 1e9 / t_up, z.total() / 1e9);
  print_mem("after upload");
  std::printf("batched step: %s%s\n\n", kBatchPath, opt.fixed ? " (V41Flash kernel sizes)" : "");

  std::string table = table_header();
  bool all_ok = true;
  for (int64_t ctx : opt.contexts)
    for (int64_t B : opt.batches) {
      Status st = run_case(f, sched, z, opt, ctx, int(B), stream, table, all_ok);
      if (!st.ok()) {
        std::printf("  context %lld, batch %lld failed: %s\n", (long long)ctx, (long long)B, st.message().c_str());
        all_ok = false;
      }
    }
  std::string ptable = prefill_header();
  for (int64_t T : opt.prefill) {
    Status st = run_prefill(f, sched, z, opt, int(T), stream, ptable);
    if (!st.ok()) {
      std::printf("  prefill %lld failed: %s\n", (long long)T, st.message().c_str());
      all_ok = false;
    }
  }
  if (!opt.prefill.empty()) table += "\n" + ptable;
  std::string ltable = long_header();
  for (int64_t T : opt.long_prompts)
    for (bool bounded : {false, true}) {
      Status st = run_long(f, sched, z, T, opt.chunk, bounded, stream, ltable);
      if (!st.ok()) {
        std::printf("  prefill %lld (%s) failed: %s\n", (long long)T, bounded ? "bounded replay" : "exact",
                    st.message().c_str());
        if (!bounded) all_ok = false;  // bounded replay may not apply to the stack's schedule: reported, not fatal
      }
    }
  if (!opt.long_prompts.empty()) table += "\n" + ltable;
  std::printf("\n%s", table.c_str());
  if (!opt.out.empty()) {
    if (FILE* fo = std::fopen(opt.out.c_str(), "w")) {
      std::fprintf(fo,
                   "Decode step, %s (%d layers at released widths), synthetic weights; batched step: %s%s.\n"
                   "Bytes: weights read once per step (routed experts: expected distinct hits of uniform top-%d "
                   "picks), KV as each layer reads it; FLOPs counted against the FP8 peak.\n\n%s",
                   opt.config.c_str(), s.num_hidden_layers, kBatchPath, opt.fixed ? " (V41Flash kernel sizes)" : "",
                   s.num_experts_per_tok, table.c_str());
      std::fclose(fo);
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--config") opt.config = val();
    else if (a == "--contexts") opt.contexts = parse_list(val());
    else if (a == "--batches") opt.batches = parse_list(val());
    else if (a == "--prefill") opt.prefill = parse_list(val());
    else if (a == "--long") opt.long_prompts = parse_list(val());
    else if (a == "--chunk") opt.chunk = std::max(1, std::stoi(val()));
    else if (a == "--warmup") opt.warmup = std::stoi(val());
    else if (a == "--steps") opt.steps = std::stoi(val());
    else if (a == "--out") opt.out = val();
    else if (a == "--check-config") opt.check_config = true;
    else if (a == "--profile") opt.profile = true;
    else if (a == "--fixed") opt.fixed = true;
    else if (a == "--graph") opt.graph = true;
    else if (a == "--graph-loop") opt.graph_loop = true;
    else if (a == "--cub-routing") opt.fused_routing = false;
    else if (a == "--moe-w2-bf16") opt.w2_bf16 = true;
    else if (a == "--moe-overlap") opt.overlap = true;
    else if (a == "--moe-w13-split") opt.w13_split = std::clamp(std::stoi(val()), 0, 8);
    else if (a == "--moe-kernel") {
      const std::string k = val();
      if (k == "auto") opt.moe_kernel = gpu::SkinnyKernel::automatic;
      else if (k == "staged") opt.moe_kernel = gpu::SkinnyKernel::staged;
      else if (k == "wgmma-bf16") opt.moe_kernel = gpu::SkinnyKernel::wgmma_bf16;
      else if (k == "registers") opt.moe_kernel = gpu::SkinnyKernel::registers;
      else if (k == "stream") opt.moe_kernel = gpu::SkinnyKernel::stream;
      else { std::fprintf(stderr, "--moe-kernel: auto, staged, wgmma-bf16, registers or stream\n"); return 2; }
    }
    else { std::fprintf(stderr, "unknown argument %s\n", a.c_str()); return 2; }
  }
  auto shape = load_config(opt.config);
  if (!shape.ok()) { std::fprintf(stderr, "%s\n", shape.status().message().c_str()); return 1; }
  const ModelShape& s = *shape;
  const auto sched = make_schedule(s);

  double t0 = now_s();
  auto hw = std::make_unique<synth::SyntheticWeights>(synth::make_synthetic_weights(s, opt.seed));
  const double t_host = now_s() - t0;
  const Sizes z = measure(s, sched, hw->w);
  std::printf("config %s: %d layers, d %d, %d experts top-%d; host weights built in %.1f s\n", opt.config.c_str(),
              s.num_hidden_layers, s.hidden_size, s.n_routed_experts, s.num_experts_per_tok, t_host);
  if (opt.check_config) return check_config(s, sched, z, opt);

  cudaStream_t stream = nullptr;
  // A blocking stream: ordered after new_sequence's memsets on the legacy default stream.
  if (cudaStreamCreate(&stream) != cudaSuccess) { std::fprintf(stderr, "no CUDA stream\n"); return 1; }
  if (!opt.fixed) return run_all<gpu::Forward>(s, sched, z, opt, std::move(hw), stream);
  // The stack has fewer layers than the release; the ops read only the kernel sizes from the preset.
  const DynamicDims ds(s), df{Dims<configs::V41Flash>{}};
  if (ds.hc != df.hc || ds.heads != df.heads || ds.head_dim != df.head_dim || ds.index_heads != df.index_heads ||
      ds.index_head_dim != df.index_head_dim) {
    std::fprintf(stderr, "--fixed: the config's hc, heads, head_dim, index heads/dim are not V41Flash's\n");
    return 2;
  }
  return run_all<gpu::Ops<configs::V41Flash>>(s, sched, z, opt, std::move(hw), stream);
}
