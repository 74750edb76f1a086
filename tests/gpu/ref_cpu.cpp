// Host-only: the GPU checks' access to the CPU reference (see ref_api.hpp). Compile without FMA
// contraction (-ffp-contract=off) so the reference rounds exactly as written.
#include "ref_api.hpp"

#include <dsv41/backend/cpu/csa2_ops.hpp>
#include <dsv41/backend/cpu/unit_ops.hpp>
#include <dsv41/backend/cpu/math.hpp>

namespace {
using namespace dsv41;
using gputest::RefLin;
using gputest::RefW;

Linear make_lin(RefW kind, const void* w, const uint8_t* s, int N, int K) {
  Linear l;
  l.kind = kind == RefW::BF16 ? WKind::BF16 : kind == RefW::FP8 ? WKind::FP8 : WKind::FP4;
  l.out = N;
  l.in = K;
  l.w = static_cast<const uint8_t*>(w);
  l.s = s;
  return l;
}

void r_rmsnorm(const float* x, const float* w, int rows, int n, float eps, float* y) { cpu::rmsnorm(x, w, rows, n, eps, y); }

void r_linear(RefW kind, const void* w, const uint8_t* s, int N, int K, const float* x, int M, float* y, RefLin mode) {
  cpu::linear(make_lin(kind, w, s, N, K), x, M, y,
              mode == RefLin::Auto ? cpu::Lin::Auto : mode == RefLin::NoQuant ? cpu::Lin::NoQuant : cpu::Lin::F32);
}

void r_route(const float* logits, const float* bias, int E, int k, bool norm, float scale, int* sel, float* w) {
  cpu::route(logits, bias, E, k, norm, scale, sel, w);
}

void r_moe(const gputest::MoeRefIn& in, float* out) {
  ModelShape s;
  s.hidden_size = in.d;
  s.moe_intermediate_size = in.I;
  s.norm_topk_prob = in.norm_topk;
  s.routed_scaling_factor = in.route_scale;
  s.swiglu_limit = in.limit;
  s.image_token_id = -1;
  LayerRole role;
  role.n_experts = in.E;
  role.top_k = in.k;
  LayerWeights w;
  w.gate = make_lin(RefW::BF16, in.gate, nullptr, in.E, in.d);
  w.gate_bias.assign(in.bias, in.bias + in.E);
  const size_t b13 = size_t(in.I) * in.d / 2, s13 = size_t(in.I) * in.d / 32;
  const size_t b2 = size_t(in.d) * in.I / 2, s2 = size_t(in.d) * in.I / 32;
  w.experts.resize(size_t(in.E));
  for (int e = 0; e < in.E; ++e) {
    w.experts[e][0] = make_lin(RefW::FP4, in.w1 + e * b13, in.w1s + e * s13, in.I, in.d);
    w.experts[e][1] = make_lin(RefW::FP4, in.w2 + e * b2, in.w2s + e * s2, in.d, in.I);
    w.experts[e][2] = make_lin(RefW::FP4, in.w3 + e * b13, in.w3s + e * s13, in.I, in.d);
  }
  w.shared[0] = make_lin(RefW::FP8, in.s1, in.s1s, in.I, in.d);
  w.shared[1] = make_lin(RefW::FP8, in.s2, in.s2s, in.d, in.I);
  w.shared[2] = make_lin(RefW::FP8, in.s3, in.s3s, in.I, in.d);
  (void)cpu::moe(s, role, w, in.x, nullptr, in.T, out);  // every expert held: cannot fail
}

void r_attn(const float* q, int H, int D, const std::vector<const float*>& entries, const float* sink, float scale,
            float* out) {
  cpu::sparse_attention(q, H, D, entries, sink, scale, out);
}

std::vector<int32_t> r_topk(const float* score, int n, int k) { return cpu::topk_row(score, n, k); }

std::vector<float> r_rope(int rd, double theta, bool yarn, double factor, double bf, double bs, double orig) {
  return RopeTable::make(rd, theta, yarn, factor, bf, bs, orig).freqs;
}

struct ScoreCapture {
  std::vector<float>* out;
};

void r_index(const gputest::IndexRefIn& in, std::vector<float>& scores, std::vector<int32_t>& lists) {
  ModelShape s;
  s.hidden_size = in.d;
  s.q_lora_rank = in.q_lora;
  s.index_n_heads = in.nI;
  s.index_head_dim = in.dI;
  s.index_topk = in.K;
  s.head_dim = 512;
  s.candidate_topk_blocks = 2048;
  s.candidate_block_size = 8;
  LayerRole role;
  role.id = 0;
  role.ratio = in.ratio;
  role.mode = AttnMode::Full;
  role.kv_source = role.index_source = 0;
  LayerWeights w;
  w.i_wq_b = make_lin(RefW::FP8, in.wq_b, in.wq_b_s, in.nI * in.dI, in.q_lora);
  w.i_wproj = make_lin(RefW::BF16, in.wproj, nullptr, in.nI, in.d);
  const RopeTable rope =
      RopeTable::make(in.rope_dim, in.theta, true, in.factor, in.beta_fast, in.beta_slow, in.original);
  ForwardHooks hooks;
  ScoreCapture cap{&scores};
  hooks.ctx = &cap;
  hooks.index_scores = [](void* ctx, int, int64_t, int rows, int n, const float* sc) {
    auto* c = static_cast<ScoreCapture*>(ctx);
    c->out->assign(sc, sc + size_t(rows) * n);
  };
  cpu::AttnLayer ctx{s, role, w, rope, &hooks, in.S, in.p0};
  LayerState src;
  src.ikeys.assign(in.keys, in.keys + size_t(in.n) * num::index_entry_size(in.dI));
  src.n_entries = in.n;
  cpu::IndexHandoff sh;
  sh.lists.resize(1);
  lists = cpu::index_select(ctx, src, sh, in.x, in.qr);
}

void r_mixes(const float* Hrow, int hc, int d, const float* fn, const float* base, const float* scale, float norm_eps,
             int iters, float hc_eps, float* pre, float* post, float* comb) {
  HcWeights w;
  const int nm = (2 + hc) * hc;
  w.fn.assign(fn, fn + size_t(nm) * hc * d);
  w.base.assign(base, base + nm);
  w.scale.assign(scale, scale + 3);
  const cpu::HcMix m = cpu::hc_mixes(Hrow, hc, d, w, norm_eps, iters, hc_eps);
  std::copy(m.pre.begin(), m.pre.end(), pre);
  std::copy(m.post.begin(), m.post.end(), post);
  std::copy(m.comb.begin(), m.comb.end(), comb);
}

void r_pre(const float* Hrow, const float* pre, int hc, int d, float* y) { cpu::hc_pre(Hrow, pre, hc, d, y); }

void r_post(const float* x, const float* Hrow, const float* post, const float* comb, int hc, int d, float* out) {
  cpu::HcMix m;
  m.post.assign(post, post + hc);
  m.comb.assign(comb, comb + hc * hc);
  cpu::hc_post(x, Hrow, m, hc, d, out);
}

const gputest::RefApi kApi = {r_rmsnorm, r_linear, r_route, r_moe,  r_attn, r_topk,
                              r_rope,    r_index,  r_mixes, r_pre,  r_post};
}  // namespace

extern "C" const dsv41::gputest::RefApi* dsv41_gpu_cpu_reference() { return &kApi; }
