// Checks of the block-scaled GEMMs (FP8 weights: skinny + split-K and wide kernels; FP4 weights: skinny)
// against cpu::linear (Lin::Auto: FP8 activation quant, FP32 sum, BF16 out).
#pragma once
#include <dsv41/backend/cuda/kernels/gemm.cuh>
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

}  // namespace dsv41::gputest
