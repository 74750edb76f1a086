// Checks of the block-scaled GEMMs (FP8 weights: skinny + split-K and wide kernels; FP4 weights: skinny)
// against cpu::linear (Lin::Auto: FP8 activation quant, FP32 sum, BF16 out).
#pragma once
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_stream.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/numeric/quant.hpp>

#include "gpu_check.cuh"

namespace dsv41::gputest {

// Bound per output: ulp_bf16(|ref|) + (2^-12 + K·2^-24)·A, A = Σ_k |x_q[k]·w[k]|. Products are exact on
// both sides; the FP32 sums differ in order (≤ K·2^-24·A), and the tensor core's 32-term inner sum keeps
// ~14 bits below its largest product (≤ 2^-13 of that block's largest |product| ≤ 2^-12·A overall); the
// BF16 rounding then adds at most one ulp.
inline CheckResult check_gemm(bool fp4, int M, int N, int K, int check_rows, uint64_t seed) {
  Rng rng(seed);
  const std::vector<float> x = rand_bf16(rng, size_t(M) * K, 1.f);
  std::vector<uint8_t> w, ws;
  if (fp4) {
    w = rand_bytes(rng, size_t(N) * K / 2);
    ws = rand_ue8m0(rng, size_t(N) * K / 32, 118, 121);
  } else {
    w = rand_e4m3(rng, size_t(N) * K);
    ws = rand_ue8m0(rng, size_t(N / 32) * (K / 32), 112, 116);
  }
  auto dx = to_dev(to_bits(x));
  auto dw = to_dev(w);
  auto dws = to_dev(ws);
  DBuf<uint8_t> dc(size_t(M) * K), de(size_t(M) * K / 32);
  DBuf<uint16_t> dy(size_t(M) * N);
  dy.poison();
  GT_OK(gpu::act_quant_fp8(reinterpret_cast<gpu::bf16_t*>(dx.p), K, M, K, dc.p, de.p, nullptr, nullptr));
  std::string kernel;
  if (fp4) {
    gpu::SkinnyParams p;
    p.w1 = {dw.p, dws.p, 0, 0};
    p.N = N; p.K = K; p.xc = dc.p; p.xe = de.p; p.M = M; p.y = reinterpret_cast<gpu::bf16_t*>(dy.p); p.ldy = N;
    GT_OK((gpu::gemm_skinny<gpu::WFmt::FP4, false>(p, 0, M, nullptr)));
    kernel = "skinny fp4";
  } else {
    const size_t wsb = gpu::gemm_workspace_bytes(M, N, K);
    DBuf<float> work(wsb / 4 + 1);
    GT_OK(gpu::gemm_fp8(dc.p, de.p, M, dw.p, dws.p, N, K, reinterpret_cast<gpu::bf16_t*>(dy.p), N, work.p, wsb, nullptr));
    kernel = M > 64 ? "wide fp8" : (wsb ? "skinny fp8 split-K" : "skinny fp8");
    GT_SYNC();
  }
  GT_SYNC();
  const std::vector<float> y = from_bits(dy.download());
  // rows to check: first, last, and random ones
  std::vector<int> rows = {0, M - 1};
  while (int(rows.size()) < std::min(M, check_rows)) rows.push_back(rng.below(M));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const int R = int(rows.size());
  std::vector<float> xs(size_t(R) * K), yr(size_t(R) * N);
  for (int i = 0; i < R; ++i) std::copy_n(x.data() + size_t(rows[i]) * K, K, xs.data() + size_t(i) * K);
  ref().linear(fp4 ? RefW::FP4 : RefW::FP8, w.data(), ws.data(), N, K, xs.data(), R, yr.data(), RefLin::Auto);
  // A = Σ |x_q w| for the bound
  std::vector<float> xq = xs;
  for (int i = 0; i < R; ++i) num::fp8_quant_block32(xq.data() + size_t(i) * K, K);
  std::vector<float> wrow(static_cast<size_t>(K));
  Cmp c;
  c.r.op = fp4 ? "gemm_fp4" : "gemm_fp8";
  c.r.shape = shape_str({{"M", M}, {"N", N}, {"K", K}, {"rows_checked", R}});
  c.r.bound = "ulp+(2^-12+K*2^-24)*sum|xw|";
  c.r.note = kernel;
  const double cb = std::ldexp(1.0, -12) + K * std::ldexp(1.0, -24);
  for (int n = 0; n < N; ++n) {
    for (int k = 0; k < K; ++k) {
      if (fp4) {
        const uint8_t b = w[size_t(n) * K / 2 + k / 2];
        wrow[k] = num::e2m1_to_f32((k & 1) ? (b >> 4) : (b & 15)) * num::ue8m0_to_f32(ws[size_t(n) * (K / 32) + k / 32]);
      } else {
        wrow[k] = num::e4m3_to_f32(w[size_t(n) * K + k]) * num::ue8m0_to_f32(ws[size_t(n / 32) * (K / 32) + k / 32]);
      }
    }
    for (int i = 0; i < R; ++i) {
      double A = 0;
      const float* xr = xq.data() + size_t(i) * K;
      for (int k = 0; k < K; ++k) A += std::fabs(double(xr[k]) * wrow[k]);
      const float rv = yr[size_t(i) * N + n];
      c.add(y[size_t(rows[i]) * N + n], rv, bf16_ulp(rv) + cb * A);
    }
  }
  // every output element written (no poison left), not only the checked rows
  int64_t nan = 0;
  for (float v : y) nan += std::isnan(v);
  c.r.n_nan += nan;
  c.r.n_bad += nan;
  return c.done();
}

// The streamed skinny kernel (gemm_stream.cuh) against the register kernel (gemm_skinny.cuh), bit for bit: both
// take each 32-wide K block of a split in ascending order the same way. G > 0: grouped over tiles of rows[i] rows,
// each on a random one of G weight groups, as the MoE (SwiGLU reads activation rows through a random row_src and
// scales each output row by a random routing weight); G == 0: dense, M = rows[0]. ksplit > 1: the FP32 partial
// planes are compared. Every output is written (poison left in either is a failure).
inline CheckResult check_stream(bool fp8, bool swiglu, int G, int N, int K, const std::vector<int>& rows, int ksplit,
                                uint64_t seed) {
  Rng rng(seed);
  const bool dense = G == 0;
  int P = 0;
  std::vector<gpu::RowTile> tiles;
  if (dense) P = rows[0];
  else
    for (int r : rows) {
      tiles.push_back({rng.below(G), P, r, 0});
      P += r;
    }
  const int X = swiglu && !dense ? std::max(1, P / 3 + 1) : P;  // activation rows (grouped SwiGLU: via row_src)
  std::vector<int> src(P);
  for (int i = 0; i < P; ++i) src[i] = X == P ? i : rng.below(X);
  std::vector<float> rw(P);
  for (auto& v : rw) v = float(0.25 + rng.uniform());
  auto dx = to_dev(to_bits(rand_bf16(rng, size_t(X) * K, 1.f)));
  DBuf<uint8_t> dc(size_t(X) * K), de(size_t(X) * K / 32);
  GT_OK(gpu::act_quant_fp8(reinterpret_cast<gpu::bf16_t*>(dx.p), K, X, K, dc.p, de.p, nullptr, nullptr));
  const int NG = std::max(G, 1);
  const int64_t gw = fp8 ? int64_t(N) * K : int64_t(N) * K / 2;
  const int64_t gs = fp8 ? int64_t((N + 31) / 32) * (K / 32) : int64_t(N) * K / 32;
  auto wbytes = [&] { return fp8 ? rand_e4m3(rng, size_t(NG) * gw) : rand_bytes(rng, size_t(NG) * gw); };
  auto sbytes = [&] { return fp8 ? rand_ue8m0(rng, size_t(NG) * gs, 112, 116) : rand_ue8m0(rng, size_t(NG) * gs, 118, 121); };
  auto w1 = to_dev(wbytes()), w3 = to_dev(wbytes());
  auto s1 = to_dev(sbytes()), s3 = to_dev(sbytes());
  auto dtiles = to_dev(tiles.empty() ? std::vector<gpu::RowTile>{{0, 0, 1, 0}} : tiles);
  auto dn = to_dev(std::vector<int>{int(tiles.size())});
  auto dsrc = to_dev(src);
  auto drw = to_dev(rw);
  const size_t planes = ksplit > 1 ? size_t(swiglu ? 2 : 1) * ksplit : 0;
  DBuf<uint16_t> y0(size_t(P) * N), y1(size_t(P) * N);
  DBuf<float> q0(std::max<size_t>(1, planes * P * N)), q1(q0.n);
  y0.poison(); y1.poison(0x7F); q0.poison(); q1.poison(0x7F);
  gpu::SkinnyParams p;
  p.w1 = {w1.p, s1.p, dense ? 0 : gw, dense ? 0 : gs};
  if (swiglu) p.w3 = {w3.p, s3.p, dense ? 0 : gw, dense ? 0 : gs};
  p.N = N; p.K = K; p.xc = dc.p; p.xe = de.p; p.M = P; p.ldy = N; p.ksplit = ksplit;
  if (!dense) { p.tiles = dtiles.p; p.n_tiles = dn.p; }
  if (swiglu) { p.limit = 10.f; if (!dense) { p.row_src = dsrc.p; p.row_weight = drw.p; } }
  const int max_rows = *std::max_element(rows.begin(), rows.end());
  const int mt = int(tiles.size());
  const bool fits = gpu::stream_gemm_fits(p, max_rows, swiglu);
  auto run = [&](bool streamed, DBuf<uint16_t>& y, DBuf<float>& q) {
    p.y = reinterpret_cast<gpu::bf16_t*>(y.p);
    p.partial = ksplit > 1 ? q.p : nullptr;
    using gpu::WFmt;
    if (fp8 && swiglu) GT_OK(streamed ? (gpu::gemm_skinny_stream<WFmt::FP8, true>(p, mt, max_rows, nullptr))
                                      : (gpu::gemm_skinny_regs<WFmt::FP8, true>(p, mt, max_rows, nullptr)));
    if (fp8 && !swiglu) GT_OK(streamed ? (gpu::gemm_skinny_stream<WFmt::FP8, false>(p, mt, max_rows, nullptr))
                                       : (gpu::gemm_skinny_regs<WFmt::FP8, false>(p, mt, max_rows, nullptr)));
    if (!fp8 && swiglu) GT_OK(streamed ? (gpu::gemm_skinny_stream<WFmt::FP4, true>(p, mt, max_rows, nullptr))
                                       : (gpu::gemm_skinny_regs<WFmt::FP4, true>(p, mt, max_rows, nullptr)));
    if (!fp8 && !swiglu) GT_OK(streamed ? (gpu::gemm_skinny_stream<WFmt::FP4, false>(p, mt, max_rows, nullptr))
                                        : (gpu::gemm_skinny_regs<WFmt::FP4, false>(p, mt, max_rows, nullptr)));
  };
  Cmp c;
  c.r.op = std::string(fp8 ? "fp8" : "fp4") + (dense ? " dense" : " grouped") + (swiglu ? " swiglu" : "");
  c.r.shape = shape_str({{"G", G}, {"N", N}, {"K", K}, {"tiles", int64_t(tiles.size())}, {"rows", P}, {"ksplit", ksplit}});
  c.r.bound = "bit-equal to the register kernel";
  if (!fits) {
    c.r.note = "the shape does not fit the streamed kernel";
    return c.done(false);
  }
  c.r.note = "streamed kernel";
  run(false, y0, q0);
  run(true, y1, q1);
  GT_SYNC();
  int64_t nan = 0;
  if (ksplit > 1) {
    const std::vector<float> a = q0.download(), b = q1.download();
    for (size_t i = 0; i < planes * P * N; ++i) {
      c.add(b[i], a[i], -1);
      nan += std::isnan(a[i]) || std::isnan(b[i]);
    }
  } else {
    const std::vector<float> a = from_bits(y0.download()), b = from_bits(y1.download());
    for (size_t i = 0; i < a.size(); ++i) {
      c.add(b[i], a[i], -1);
      nan += std::isnan(a[i]) || std::isnan(b[i]);
    }
  }
  c.r.n_nan += nan;
  c.r.n_bad += nan;
  return c.done();
}

}  // namespace dsv41::gputest
