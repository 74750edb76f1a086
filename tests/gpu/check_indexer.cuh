// Checks of the indexer (scores of FP4 queries vs packed FP4 keys, relu, head weights; top-k) against
// cpu::index_select and cpu::topk_row.
#pragma once
#include <cstring>

#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/backend/cuda/kernels/rope.cuh>
#include <dsv41/numeric/quant.hpp>

#include "gpu_check.cuh"

namespace dsv41::gputest {

namespace detail_idx {
template <int = 0>
__global__ void head_weights_kernel(const gpu::bf16_t* raw, int n, float wscale, float* w) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] = gpu::bf16r(__fmul_rn(__bfloat162float(raw[i]), wscale));
}
}  // namespace detail_idx

struct IndexCfg {
  int S, d, q_lora, nI, dI, K, ratio, n;
  int64_t p0;
  bool structured;  // exact projections (see below)
};

// The GPU pipeline of cpu::index_select: q = wq_b(act_quant(qr)) (FP8 GEMM), w = bf16(bf16(x·wprojᵀ)·dI^-½·nI^-½),
// rope on q, FP4 quant per 32, scores, top-k.
// structured = true: wq_b is a 0/1 selection matrix (one E4M3 1.0 per row, unit scales) and wproj has 4
// nonzeros ±1, ±0.5 per row, so both projections are exact on any summation order; rope and the
// quantizers are bit-exact, and the scores are exact (indexer.cuh), so scores and lists must match
// cpu::index_select exactly. structured = false: dense random weights; the projections may differ by
// one BF16 ulp (check_gemm), which moves FP4 codes of q: reported, bounded by 2^-5·max|score| and
// ≥ 95% overlap of the lists.
// FNI, FDI > 0: the scores and lists compared are index_scores_fixed<FNI, FDI>'s (a preset's compile-time
// sizes); its scores must also equal index_scores_any's on the same inputs bit for bit.
template <int FNI = 0, int FDI = 0>
inline CheckResult check_indexer(const IndexCfg& cfg, uint64_t seed) {
  const int S = cfg.S, d = cfg.d, QL = cfg.q_lora, nI = cfg.nI, dI = cfg.dI, K = cfg.K, n = cfg.n, NQ = nI * dI;
  Rng rng(seed);
  const std::vector<float> x = rand_bf16(rng, size_t(S) * d, 1.f), qr = rand_bf16(rng, size_t(S) * QL, 1.f);
  std::vector<uint8_t> wq, wqs;
  std::vector<float> wproj(size_t(nI) * d, 0.f);
  if (cfg.structured) {
    wq.assign(size_t(NQ) * QL, 0);
    for (int o = 0; o < NQ; ++o) wq[size_t(o) * QL + rng.below(QL)] = 0x38;  // 1.0
    wqs.assign(size_t(NQ / 32) * (QL / 32), 127);
    const float vals[4] = {1.f, -1.f, 0.5f, -0.5f};
    for (int h = 0; h < nI; ++h)
      for (int j = 0; j < 4; ++j) wproj[size_t(h) * d + rng.below(d)] = vals[rng.below(4)];
  } else {
    wq = rand_e4m3(rng, size_t(NQ) * QL);
    wqs = rand_ue8m0(rng, size_t(NQ / 32) * (QL / 32), 114, 115);
    for (auto& v : wproj) v = bf16f(0.05f * rng.normal());
  }
  const int ie = num::index_entry_size(dI);
  std::vector<uint8_t> keys(size_t(n) * ie);
  std::vector<float> tmp(static_cast<size_t>(dI));
  for (int j = 0; j < n; ++j) {
    for (auto& v : tmp) v = bf16f(rng.normal());
    num::pack_index_entry(tmp.data(), dI, keys.data() + size_t(j) * ie);
  }
  const int rd = std::min(64, dI);
  const double theta = 160000, factor = 16, bfast = 32, bslow = 1, orig = 65536;
  const std::vector<float> freqs = ref().rope_freqs(rd, theta, true, factor, bfast, bslow, orig);

  // GPU pipeline
  auto dx = to_dev(to_bits(x));
  auto dqr = to_dev(to_bits(qr));
  auto dwq = to_dev(wq);
  auto dwqs = to_dev(wqs);
  auto dwp = to_dev(to_bits(wproj));
  auto dkeys = to_dev(keys);
  auto dfreq = to_dev(freqs);
  DBuf<uint8_t> qc(size_t(S) * QL), qe(size_t(S) * QL / 32), q4(size_t(S) * NQ / 2), q4e(size_t(S) * NQ / 32);
  DBuf<uint16_t> q(size_t(S) * NQ), wraw(size_t(S) * nI);
  DBuf<float> w(size_t(S) * nI), scores(size_t(S) * n);
  DBuf<int> lists(size_t(S) * K);
  q.poison(); wraw.poison(); w.poison(); scores.poison(); lists.poison(0xA5);
  const size_t wsb = std::max(gpu::gemm_workspace_bytes(S, NQ, QL), gpu::gemm_workspace_bytes(S, nI, d));
  DBuf<float> work(wsb / 4 + 1);
  std::vector<int> vis(static_cast<size_t>(S));
  for (int t = 0; t < S; ++t) vis[t] = int(std::min<int64_t>((cfg.p0 + t + 1) / cfg.ratio, n));
  auto dvis = to_dev(vis);
  auto B = [](DBuf<uint16_t>& b) { return reinterpret_cast<gpu::bf16_t*>(b.p); };
  GT_OK(gpu::act_quant_fp8(reinterpret_cast<gpu::bf16_t*>(dqr.p), QL, S, QL, qc.p, qe.p, nullptr, nullptr));
  GT_OK(gpu::gemm_fp8(qc.p, qe.p, S, dwq.p, dwqs.p, NQ, QL, B(q), NQ, work.p, wsb, nullptr));
  if (nI % 16 == 0) {  // as the forward's linear_bf16: tensor cores when N % 16 == 0, else one warp per output
    GT_OK(gpu::gemm_bf16(reinterpret_cast<gpu::bf16_t*>(dx.p), S, reinterpret_cast<gpu::bf16_t*>(dwp.p), nI, d, nullptr,
                         B(wraw), nI, work.p, wsb, nullptr));
  } else {
    gpu::glue::linear_bf16_simple_kernel<<<gpu::glue::blocks_for(int64_t(S) * nI * 32), gpu::glue::kThreads>>>(
        reinterpret_cast<gpu::bf16_t*>(dx.p), d, reinterpret_cast<gpu::bf16_t*>(dwp.p), S, nI, d, nullptr, B(wraw), nI);
    GT_CUDA(cudaGetLastError());
  }
  const float wscale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
  detail_idx::head_weights_kernel<<<gpu::ceil_div(S * nI, 128), 128>>>(B(wraw), S * nI, wscale, w.p);
  GT_CUDA(cudaGetLastError());
  GT_OK(gpu::rope(B(q), S, nI, dI, rd, dfreq.p, cfg.p0, false, nullptr));
  GT_OK(gpu::quant_fp4_b32(B(q), NQ, S, NQ, q4.p, q4e.p, nullptr));
  gpu::IndexScoreParams ip;
  ip.q = q4.p; ip.qe = q4e.p; ip.w = w.p; ip.keys = dkeys.p; ip.n = n; ip.vis = dvis.p; ip.R = S; ip.nI = nI; ip.dI = dI;
  ip.scores = scores.p;
  GT_OK(gpu::index_scores_any(ip, nullptr));  // tensor cores at nI ∈ {16, 32}, dI = 128; else the generic kernel
  int64_t fixed_diff = 0;
  if constexpr (FDI > 0) {
    if (nI != FNI || dI != FDI) throw std::runtime_error("check_indexer: cfg nI, dI are not the fixed sizes");
    GT_SYNC();
    const std::vector<float> any_scores = scores.download();
    scores.poison();
    GT_OK((gpu::index_scores_fixed<FNI, FDI>(ip, nullptr)));
    GT_SYNC();
    const std::vector<float> fs = scores.download();
    for (size_t i = 0; i < fs.size(); ++i) fixed_diff += std::memcmp(&fs[i], &any_scores[i], 4) != 0;
  }
  GT_OK(gpu::topk(scores.p, S, n, dvis.p, K, lists.p, nullptr));
  GT_SYNC();
  const std::vector<float> gs = scores.download();
  const std::vector<int> gl = lists.download();

  std::vector<float> rs;
  std::vector<int32_t> rl;
  const std::vector<uint16_t> wq_bits = to_bits(wproj);
  IndexRefIn in{S, d, QL, nI, dI, K, cfg.ratio, cfg.p0, x.data(), qr.data(), wq.data(), wqs.data(), wq_bits.data(),
                keys.data(), n, rd, theta, factor, bfast, bslow, orig};
  ref().index_select(in, rs, rl);

  Cmp c;
  c.r.op = cfg.structured ? "indexer" : "indexer~";
  c.r.shape = shape_str({{"S", S}, {"nI", nI}, {"dI", dI}, {"keys", n}, {"K", K}, {"ratio", cfg.ratio}});
  double maxs = 0;
  for (float v : rs) if (std::isfinite(v)) maxs = std::max(maxs, double(std::fabs(v)));
  c.r.bound = cfg.structured ? "exact scores and lists" : "2^-5*max|score|, lists overlap>=95%";
  const double bnd = cfg.structured ? -1.0 : std::ldexp(maxs, -5);
  for (size_t i = 0; i < rs.size(); ++i) c.add(gs[i], rs[i], bnd);
  int64_t list_diff = 0, common = 0, total = 0;
  for (int t = 0; t < S; ++t) {
    std::vector<int> a, b;
    for (int i = 0; i < K; ++i) {
      if (gl[size_t(t) * K + i] >= 0) a.push_back(gl[size_t(t) * K + i]);
      if (rl[size_t(t) * K + i] >= 0) b.push_back(rl[size_t(t) * K + i]);
      list_diff += gl[size_t(t) * K + i] != rl[size_t(t) * K + i];
    }
    std::vector<int> inter;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(inter));
    common += int64_t(inter.size());
    total += int64_t(b.size());
  }
  char note[160];
  std::snprintf(note, sizeof note, "list slots differing %lld, overlap %lld/%lld", (long long)list_diff,
                (long long)common, (long long)total);
  c.r.note = note;
  if constexpr (FDI > 0) c.r.note += ", fixed<nI, dI>: " + std::to_string(fixed_diff) + " scores differ from run time";
  const bool lists_ok = cfg.structured ? list_diff == 0 : (total == 0 || common * 100 >= total * 95);
  return c.done(lists_ok && fixed_diff == 0);
}

// Top-k alone on given scores with many exact ties and −inf, against cpu::topk_row: exact.
inline CheckResult check_topk(int R, int n, int K, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> s(size_t(R) * n);
  std::vector<int> vis(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    vis[r] = r == 0 ? std::min(n, K / 2 + 1) : n - rng.below(std::max(1, n / 4));
    const int levels = r % 2 ? 7 : 1 << 20;  // odd rows: heavy ties
    for (int j = 0; j < n; ++j) {
      float v = float(rng.below(levels)) / float(levels) - 0.3f;
      if (rng.below(13) == 0) v = -INFINITY;
      s[size_t(r) * n + j] = j < vis[r] ? v : -INFINITY;
    }
  }
  auto ds = to_dev(s);
  auto dv = to_dev(vis);
  DBuf<int> dl(size_t(R) * K);
  dl.poison(0xA5);
  GT_OK(gpu::topk(ds.p, R, n, dv.p, K, dl.p, nullptr));
  GT_SYNC();
  const std::vector<int> gl = dl.download();
  Cmp c;
  c.r.op = "topk";
  c.r.shape = shape_str({{"R", R}, {"n", n}, {"K", K}});
  c.r.bound = "exact (ties to lower index)";
  for (int r = 0; r < R; ++r) {
    std::vector<int32_t> ref_l = ref().topk_row(s.data() + size_t(r) * n, vis[r], K);
    ref_l.resize(size_t(K), -1);
    for (int i = 0; i < K; ++i) c.add(float(gl[size_t(r) * K + i]), float(ref_l[i]), -1);
  }
  return c.done();
}

}  // namespace dsv41::gputest
