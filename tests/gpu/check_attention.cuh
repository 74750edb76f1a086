// Check of the sparse attention with sink over packed window (FP8) and compressed (FP4) entries against
// cpu::sparse_attention on the unpacked entries.
#pragma once
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/numeric/quant.hpp>

#include "gpu_check.cuh"

namespace dsv41::gputest {

struct AttnCfg {
  int R, H, D, n_win, n_comp, pool_win, pool_comp;
};

// Bound per output element i of a head: ulp_bf16(|o_i|) + 2^-8·max_j|e_j[i]| + 2^-20.
// Entries are exact in BF16 on both sides; scores differ only by the order of D FP32 products
// (relative ~D·2^-24); each numerator bf16(exp(s_j − m)) can then differ by one BF16 ulp (2^-8 of
// itself, when exp lands next to a rounding boundary, or by expf's ≤ 2 ulp), so
// |Δo_i| ≤ 2^-8·Σ_j p_j|e_j[i]|/den ≤ 2^-8·max_j|e_j[i]|, plus the final rounding.
// FH, FD > 0: the output compared is sparse_attention_fixed<FH, FD>'s (a preset's compile-time sizes), which
// must also equal sparse_attention_any's on the same inputs bit for bit (same kernel source, same order).
template <int FH = 0, int FD = 0>
inline CheckResult check_attention(const AttnCfg& cfg, uint64_t seed) {
  const int R = cfg.R, H = cfg.H, D = cfg.D;
  Rng rng(seed);
  const int we = num::window_entry_size(D), me = num::main_entry_size(D);
  std::vector<uint8_t> wpool(size_t(cfg.pool_win) * we), cpool(size_t(cfg.pool_comp) * me);
  std::vector<float> wval(size_t(cfg.pool_win) * D), cval(size_t(cfg.pool_comp) * D), tmp(static_cast<size_t>(D));
  for (int e = 0; e < cfg.pool_win; ++e) {
    const float amp = 0.5f + float(rng.uniform()) * 2.f;
    for (auto& v : tmp) v = bf16f(amp * rng.normal());
    num::pack_window_entry(tmp.data(), D, wpool.data() + size_t(e) * we);
    num::unpack_window_entry(wpool.data() + size_t(e) * we, D, wval.data() + size_t(e) * D);
  }
  for (int e = 0; e < cfg.pool_comp; ++e) {
    for (auto& v : tmp) v = bf16f(rng.normal());
    num::pack_main_entry(tmp.data(), D, cpool.data() + size_t(e) * me);
    num::unpack_main_entry(cpool.data() + size_t(e) * me, D, cval.data() + size_t(e) * D);
  }
  // lists: row r has a window of min(n_win, 3 + 5r) slots (rest −1), and n_comp picks (some −1);
  // the last row of the tiny case has no entries at all.
  std::vector<int> widx(size_t(R) * cfg.n_win, -1), cidx(size_t(R) * cfg.n_comp, -1);
  for (int r = 0; r < R; ++r) {
    const bool empty = R > 1 && r == R - 1 && cfg.n_win < 64;
    if (empty) continue;
    const int nw = std::min(cfg.n_win, 3 + 5 * r + (cfg.n_win >= 64 ? cfg.n_win : 0));
    for (int j = 0; j < nw; ++j) widx[size_t(r) * cfg.n_win + (cfg.n_win - nw) + j] = rng.below(cfg.pool_win);
    for (int j = 0; j < cfg.n_comp; ++j)
      if (rng.below(10) != 0) cidx[size_t(r) * cfg.n_comp + j] = rng.below(cfg.pool_comp);
  }
  const std::vector<float> q = rand_bf16(rng, size_t(R) * H * D, 1.5f);
  std::vector<float> sink(static_cast<size_t>(H));
  for (auto& s : sink) s = rng.normal();
  const float scale = float(std::pow(double(D), -0.5));

  auto dq = to_dev(to_bits(q));
  auto dwp = to_dev(wpool);
  auto dcp = to_dev(cpool);
  auto dwi = to_dev(widx);
  auto dci = to_dev(cidx);
  auto dsink = to_dev(sink);
  DBuf<uint16_t> dout(size_t(R) * H * D);
  dout.poison();
  gpu::SparseAttnParams p;
  p.q = reinterpret_cast<const gpu::bf16_t*>(dq.p);
  p.win_pool = dwp.p; p.win_idx = dwi.p; p.n_win = cfg.n_win;
  p.comp_pool = dcp.p; p.comp_idx = dci.p; p.n_comp = cfg.n_comp;
  p.sink = dsink.p; p.scale = scale; p.R = R; p.H = H; p.D = D;
  p.out = reinterpret_cast<gpu::bf16_t*>(dout.p);
  GT_OK(gpu::sparse_attention_any(p, nullptr));  // as the forward: tensor cores where the shape allows
  GT_SYNC();
  std::vector<uint16_t> bits = dout.download();
  int64_t fixed_diff = 0;
  if constexpr (FD > 0) {
    if (H != FH || D != FD) throw std::runtime_error("check_attention: cfg H, D are not the fixed sizes");
    const std::vector<uint16_t> any_bits = bits;
    dout.poison();
    GT_OK((gpu::sparse_attention_fixed<FH, FD>(p, nullptr)));
    GT_SYNC();
    bits = dout.download();
    for (size_t i = 0; i < bits.size(); ++i) fixed_diff += bits[i] != any_bits[i];
  }
  const std::vector<float> out = from_bits(bits);

  Cmp c;
  c.r.op = "attention";
  c.r.shape = shape_str({{"R", R}, {"H", H}, {"D", D}, {"win", cfg.n_win}, {"sel", cfg.n_comp}});
  c.r.bound = "ulp+2^-8*max|e_i|";
  const bool tc = gpu::sparse_attention_fast_shape(H, D) && gpu::detail::attn::smem_bytes(p, 16) <= 227 * 1024;
  const int split = tc ? gpu::detail::attn::split_for(p) : 1;
  c.r.note = tc ? (split > 1 ? "tensor cores, cluster split " + std::to_string(split) : std::string("tensor cores")) : (size_t(D) * 4 + size_t(cfg.n_win + cfg.n_comp) * 8 <= 200 * 1024 ? "generic" : "generic, scores recomputed");
  if constexpr (FD > 0) c.r.note += ", fixed<H, D>: " + std::to_string(fixed_diff) + " outputs differ from run time";
  std::vector<float> o(size_t(H) * D), maxe(static_cast<size_t>(D));
  for (int r = 0; r < R; ++r) {
    std::vector<const float*> ent;
    for (int j = 0; j < cfg.n_win; ++j)
      if (int v = widx[size_t(r) * cfg.n_win + j]; v >= 0) ent.push_back(wval.data() + size_t(v) * D);
    for (int j = 0; j < cfg.n_comp; ++j)
      if (int v = cidx[size_t(r) * cfg.n_comp + j]; v >= 0) ent.push_back(cval.data() + size_t(v) * D);
    ref().sparse_attention(q.data() + size_t(r) * H * D, H, D, ent, sink.data(), scale, o.data());
    std::fill(maxe.begin(), maxe.end(), 0.f);
    for (const float* e : ent)
      for (int i = 0; i < D; ++i) maxe[i] = std::max(maxe[i], std::fabs(e[i]));
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < D; ++i) {
        const float rv = o[size_t(h) * D + i];
        c.add(out[(size_t(r) * H + h) * D + i], rv, bf16_ulp(rv) + std::ldexp(double(maxe[i]), -8) + 1e-6);
      }
  }
  return c.done(fixed_diff == 0);
}

}  // namespace dsv41::gputest
