// A synthetic model at any shape for timing runs (bench/bench_layer_stack.cu): host Weights whose views point
// into a few shared random pools (values finite and of plausible scale, not a trained model), and a device
// sequence filled as if it had processed `pos` tokens. Include from a .cu file (nvcc).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include <dsv41/config/parse_config.hpp>
#include <dsv41/model/cuda_model.hpp>
#include <dsv41/numeric/quant.hpp>

namespace dsv41::synth {

DSV41_HD inline uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Bytes of a Linear as stored (weights + scales), as gpu::Forward uploads it.
inline size_t linear_bytes(const Linear& l) {
  const size_t o = size_t(l.out), i = size_t(l.in);
  switch (l.kind) {
    case WKind::BF16: return o * i * 2;
    case WKind::F32: return o * i * 4;
    case WKind::FP8: return o * i + ((o + 31) / 32) * ((i + 31) / 32);
    case WKind::FP4: return o * i / 2 + o * (i / 32);
    case WKind::None: return 0;
  }
  return 0;
}

// Calls f on every Linear a layer has: the dense ones, then each routed expert's w1, w2, w3.
inline void for_each_linear(LayerWeights& L, const std::function<void(Linear&)>& f) {
  for (Linear* p : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.c_wkv, &L.c_wgate, &L.i_wk, &L.i_wq_b, &L.i_wproj,
                    &L.gate, &L.engram_wkv, &L.main_proj, &L.markov_embed, &L.markov_head, &L.conf_proj, &L.shared[0],
                    &L.shared[1], &L.shared[2]})
    if (*p) f(*p);
  for (auto& e : L.experts)
    for (Linear& l : e) f(l);
}
inline void for_each_linear(Weights& w, const std::function<void(Linear&)>& f) {
  f(w.embed);
  f(w.head);
  for (auto& L : w.layers) for_each_linear(L, f);
}

// Bytes of a layer's FP32 vectors (norms, sink, mHC, gate biases) as uploaded.
inline size_t vector_bytes(const LayerWeights& L) {
  size_t n = 0;
  for (const auto* v : {&L.q_norm, &L.kv_norm, &L.attn_sink, &L.attn_norm, &L.ffn_norm, &L.c_norm, &L.i_knorm,
                        &L.gate_bias, &L.gate_bias_vl, &L.engram_qk, &L.main_norm, &L.norm, &L.hc_attn.fn,
                        &L.hc_attn.base, &L.hc_attn.scale, &L.hc_ffn.fn, &L.hc_ffn.base, &L.hc_ffn.scale})
    n += v->size() * 4;
  return n;
}

// Host pools and the Weights that view them. Every Linear of a kind views the same pool at a small
// per-tensor offset: ~1.4 GB of host memory at the released widths, mostly the BF16 pool ([V, d] head).
struct SyntheticWeights {
  std::vector<uint8_t> fp8;             // E4M3 codes ≈ 64·N(0,1): never the NaN codes 0x7F/0xFF
  std::vector<uint8_t> fp4;             // random E2M1 pairs
  std::vector<uint16_t> bf16;           // bf16 bits, N(0, 1/d)
  std::map<int, std::vector<uint8_t>> scales;  // UE8M0 pools, one per exponent
  Weights w;
  SyntheticWeights() = default;
  SyntheticWeights(SyntheticWeights&&) = default;  // vectors keep their buffers, so the views stay valid
  SyntheticWeights& operator=(SyntheticWeights&&) = default;
};

namespace detail {
constexpr size_t kSlack = size_t(1) << 20;  // offsets spread tensors over the first MiB of a pool

// UE8M0 exponent giving dequantized weights an RMS of about 1/sqrt(in), for codes of RMS `code_rms`.
inline int weight_exponent(int in, double code_rms) {
  return 127 - int(std::lround(std::log2(code_rms * std::sqrt(double(in)))));
}

// Values ≈ N(0,1) from a hash: sum of four 16-bit uniforms, centred and scaled.
DSV41_HD inline float gauss(uint64_t h) {
  float s = 0.f;
  for (int k = 0; k < 4; ++k) s += float((h >> (16 * k)) & 0xFFFF) * (1.f / 65536.f);
  return (s - 2.f) * 1.7320508f;
}
}  // namespace detail

// The first n backbone layers of s (sources, candidate source and DSpark taps past them dropped).
inline Result<ModelShape> cut_layers(ModelShape s, int n) {
  if (n <= 0 || n >= s.num_hidden_layers) return Result<ModelShape>(std::move(s));
  if (s.num_nextn_predict_layers != 0) return error(Code::invalid_argument, "--layers: the config has DSpark stages");
  s.num_hidden_layers = n;
  s.compress_ratios.resize(size_t(n));
  auto keep = [n](std::vector<int>& v) { std::erase_if(v, [n](int l) { return l >= n; }); };
  keep(s.kv_source_layer_ids);
  keep(s.index_source_layer_ids);
  keep(s.dspark_target_layer_ids);
  if (s.candidate_source_layer_id >= n) s.candidate_source_layer_id = -1;
  DSV41_TRY(validate_shape(s));
  return Result<ModelShape>(std::move(s));
}

// Linear shapes per role as bind_weights (model/weights.hpp) makes them; pools filled from `seed`.
inline SyntheticWeights make_synthetic_weights(const ModelShape& s, uint64_t seed) {
  SyntheticWeights sw;
  Weights& w = sw.w;
  const int d = s.hidden_size, H = s.num_attention_heads, D = s.head_dim, I = s.moe_intermediate_size;
  const int ql = s.q_lora_rank, nI = s.index_n_heads, dI = s.index_head_dim, hc = s.hc_mult;
  auto lin = [](WKind k, int out, int in) {
    Linear l;
    l.kind = k;
    l.out = out;
    l.in = in;
    return l;
  };
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto gauss_vec = [&](size_t n, float mean, float sd) {
    std::vector<float> v(n);
    for (auto& x : v) x = mean + sd * nd(rng);
    return v;
  };
  w.embed = lin(WKind::BF16, s.vocab_size, d);
  w.head = lin(WKind::BF16, s.vocab_size, d);
  w.norm.assign(size_t(d), 1.f);
  const int mix = (2 + hc) * hc;
  for (const LayerRole& r : make_schedule(s)) {
    LayerWeights L;
    L.wq_a = lin(WKind::FP8, ql, d);
    L.wq_b = lin(WKind::FP8, H * D, ql);
    L.wkv = lin(WKind::FP8, D, d);
    L.wo_a = lin(WKind::FP8, s.o_groups * s.o_lora_rank, H * D / s.o_groups);
    L.wo_b = lin(WKind::FP8, d, s.o_groups * s.o_lora_rank);
    L.q_norm.assign(size_t(ql), 1.f);
    L.kv_norm.assign(size_t(D), 1.f);
    L.attn_sink.assign(size_t(H), 0.f);
    L.attn_norm.assign(size_t(d), 1.f);
    L.ffn_norm.assign(size_t(d), 1.f);
    for (HcWeights* h : {&L.hc_attn, &L.hc_ffn}) {  // make_synth_golden's ranges
      h->fn = gauss_vec(size_t(mix) * hc * d, 0.f, 1.f / std::sqrt(float(hc * d)));
      h->base = gauss_vec(size_t(mix), 0.f, 0.5f);
      h->scale = gauss_vec(3, 0.75f, 0.1f);
    }
    if (r.mode == AttnMode::Full) {
      L.c_wkv = lin(WKind::BF16, D, d);
      if (r.ratio > 1) L.c_wgate = lin(WKind::BF16, D, d);
      L.c_norm.assign(size_t(D), 1.f);
      L.i_wk = lin(WKind::BF16, dI, D);
      L.i_knorm.assign(size_t(dI), 1.f);
    }
    if (r.mode == AttnMode::Full || r.mode == AttnMode::Reindex) {
      L.i_wq_b = lin(WKind::FP8, nI * dI, ql);
      L.i_wproj = lin(WKind::BF16, nI, d);
    }
    L.gate = lin(WKind::BF16, r.n_experts, d);
    L.gate_bias.assign(size_t(r.n_experts), 0.f);
    if (s.has_vision && !r.dspark) L.gate_bias_vl.assign(size_t(r.n_experts), 0.f);
    L.experts.assign(size_t(r.n_experts), {lin(WKind::FP4, I, d), lin(WKind::FP4, d, I), lin(WKind::FP4, I, d)});
    L.shared = {lin(WKind::FP8, I, d), lin(WKind::FP8, d, I), lin(WKind::FP8, I, d)};
    if (r.engram_slot >= 0 || r.dspark) {
      // Engram tables (~98 GB at release) and DSpark stages are not synthesized: use a config without them.
      std::fprintf(stderr, "synthetic weights: Engram layers and DSpark stages are not supported\n");
      std::abort();
    }
    w.layers.push_back(std::move(L));
  }
  // Pool sizes from the largest tensor of each kind, then the views.
  size_t n8 = 0, n4 = 0, n16 = 0, nsc = 0;
  for_each_linear(w, [&](Linear& l) {
    const size_t o = size_t(l.out), i = size_t(l.in);
    if (l.kind == WKind::FP8) { n8 = std::max(n8, o * i); nsc = std::max(nsc, ((o + 31) / 32) * ((i + 31) / 32)); }
    if (l.kind == WKind::FP4) { n4 = std::max(n4, o * i / 2); nsc = std::max(nsc, o * (i / 32)); }
    if (l.kind == WKind::BF16) n16 = std::max(n16, o * i);
  });
  sw.fp8.resize(n8 + detail::kSlack);
  sw.fp4.resize(n4 + detail::kSlack);
  sw.bf16.resize(n16 + detail::kSlack);
  {
    std::vector<uint8_t> t8(65536);
    std::vector<uint16_t> t16(65536);
    const float sd16 = 1.f / std::sqrt(float(d));
    for (auto& c : t8) c = num::e4m3_from_f32(64.f * nd(rng));  // |x| ≥ 448 saturates to 0x7E: no NaN code
    for (auto& b : t16) b = num::bf16_bits(sd16 * nd(rng));
    const uint64_t s0 = rng();
    for (size_t i = 0; i < sw.fp8.size(); i += 4) {
      const uint64_t h = mix64(s0 + i);
      for (size_t k = 0; k < 4 && i + k < sw.fp8.size(); ++k) sw.fp8[i + k] = t8[(h >> (16 * k)) & 0xFFFF];
    }
    for (size_t i = 0; i < sw.fp4.size(); i += 8) {
      const uint64_t h = mix64(s0 + 1 + i);
      for (size_t k = 0; k < 8 && i + k < sw.fp4.size(); ++k) sw.fp4[i + k] = uint8_t(h >> (8 * k));
    }
    for (size_t i = 0; i < sw.bf16.size(); i += 4) {
      const uint64_t h = mix64(s0 + 2 + i);
      for (size_t k = 0; k < 4 && i + k < sw.bf16.size(); ++k) sw.bf16[i + k] = t16[(h >> (16 * k)) & 0xFFFF];
    }
  }
  auto scale_pool = [&](int e) -> const uint8_t* {
    auto& p = sw.scales[e];
    if (p.empty()) p.assign(nsc, uint8_t(std::clamp(e, 1, 254)));
    return p.data();
  };
  // Scale exponents from the codes' RMS: E4M3 ≈ 64 (the table above), a uniform random E2M1 nibble ≈ 2.93.
  uint64_t k = 0;
  for_each_linear(w, [&](Linear& l) {
    const size_t off = size_t((mix64(seed ^ ++k) % (detail::kSlack / 64)) * 64);
    switch (l.kind) {
      case WKind::FP8: l.w = sw.fp8.data() + off; l.s = scale_pool(detail::weight_exponent(l.in, 64.0)); break;
      case WKind::FP4: l.w = sw.fp4.data() + off; l.s = scale_pool(detail::weight_exponent(l.in, 2.93)); break;
      case WKind::BF16: l.w = reinterpret_cast<const uint8_t*>(sw.bf16.data() + off / 2); break;
      default: break;
    }
  });
  return sw;
}

// ---- device sequence fill ----
namespace kernels {

// Block t of a packed entry array (entry t / (n/32), 32 values from the hash): kind 0 window (E4M3 + UE8M0/32),
// 1 main KV (E2M1 + E4M3/16), 2 index key (E2M1 + UE8M0/32). The values ~N(0,1), as after an RMSNorm.
DSV41_HD inline void fill_entry_block(uint8_t* out, int64_t t, int n, int kind, uint64_t seed) {
  const int nb = n / 32;
  const int64_t e = t / nb;
  const int b = int(t % nb);
  float x[32];
  uint8_t nib[32];
  for (int i = 0; i < 32; ++i) x[i] = detail::gauss(mix64(seed ^ (uint64_t(t) * 32 + uint64_t(i))));
  if (kind == 0) {
    uint8_t* o = out + e * num::window_entry_size(n);
    num::fp8_quant_block32(x, 32, o + b * 32, o + n + b);
    return;
  }
  uint8_t* o = out + e * (kind == 1 ? num::main_entry_size(n) : num::index_entry_size(n));
  if (kind == 1) num::fp4_quant_block16(x, 32, nib, o + n / 2 + 2 * b);
  else num::fp4_quant_block32(x, 32, nib, o + n / 2 + b);
  for (int i = 0; i < 16; ++i) o[b * 16 + i] = num::pack_e2m1(nib[2 * i], nib[2 * i + 1]);
}

template <int = 0>
__global__ void fill_entries_kernel(uint8_t* out, int64_t n_entries, int n, int kind, uint64_t seed) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n_entries * (n / 32)) fill_entry_block(out, t, n, kind, seed);
}

template <int = 0>
__global__ void fill_floats_kernel(float* p, int64_t n, uint64_t seed) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = detail::gauss(mix64(seed ^ uint64_t(i)));
}

}  // namespace kernels

// Makes a fresh sequence (Forward::new_sequence) look as if it had processed `pos` tokens: every ring slot,
// the first pos/ratio compressed entries and index keys of each Full layer and its pending rows hold valid
// random entries (SPEC §6 layouts, no NaN codes); counters set, history empty. Stream-ordered, no sync.
inline Status fill_sequence(gpu::DeviceSequence& q, const ModelShape& s, const std::vector<LayerRole>& sched,
                            int64_t pos, uint64_t seed, cudaStream_t stream) {
  if (pos < 0 || pos > q.max_positions) return error(Code::invalid_argument, "fill_sequence: pos outside capacity");
  if (q.layers.size() != sched.size()) return error(Code::invalid_argument, "fill_sequence: schedule mismatch");
  const int D = s.head_dim, dI = s.index_head_dim, W = s.sliding_window;
  auto launch = [&](uint8_t* p, int64_t n, int width, int kind, uint64_t sd) -> Status {
    if (n <= 0) return Status::Ok();
    const int64_t threads = n * (width / 32);
    kernels::fill_entries_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(p, n, width, kind, sd);
    DSV41_CUDA_TRY(cudaGetLastError(), "fill_sequence");
    return Status::Ok();
  };
  for (const LayerRole& r : sched) {
    gpu::DeviceLayerState& ls = q.layers[size_t(r.id)];
    const uint64_t sd = mix64(seed * 131 + uint64_t(r.id));
    DSV41_TRY(launch(ls.ring, W, D, 0, sd));
    ls.n_entries = 0;
    ls.n_pend = 0;
    if (r.mode != AttnMode::Full) continue;
    const int64_t n = pos / r.ratio;
    if (n > ls.cap) return error(Code::out_of_range, "fill_sequence: entries exceed capacity");
    DSV41_TRY(launch(ls.comp, n, D, 1, mix64(sd + 1)));
    DSV41_TRY(launch(ls.ikeys, n, dI, 2, mix64(sd + 2)));
    ls.n_entries = n;
    ls.n_pend = int(pos % r.ratio);
    for (float* p : {ls.pend_kv, ls.pend_score}) {
      if (!p) continue;
      const int64_t m = int64_t(r.ratio) * D;
      kernels::fill_floats_kernel<<<unsigned((m + 255) / 256), 256, 0, stream>>>(p, m, mix64(sd + 3 + (p == ls.pend_score)));
      DSV41_CUDA_TRY(cudaGetLastError(), "fill_sequence");
    }
  }
  q.pos = pos;
  q.history.clear();
  return Status::Ok();
}

}  // namespace dsv41::synth
