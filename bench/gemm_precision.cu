// The block-scaled GEMM kernels' precision on the GPU (a bench program, not a test): a dense SwiGLU GEMM (M x 512
// x 1024, random E4M3 activations, FP8 or FP4 weights) on the register, staged (mma.sync), staged E4M3 wgmma and BF16 wgmma kernels,
// their bit differences row by row and run to run, then y = x·wᵀ against a double-precision sum of the same
// dequantized operands (errors in BF16 ulps of the exact value). Session 14 found the wgmma sums are not FP32's.
//   nvcc -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude \
//        bench/gemm_precision.cu -o build/gpu/gemm_precision && build/gpu/gemm_precision M {8|4}
// CUDA errors are printed, not fatal; device buffers are left to process exit.
#include <cstdio>
#include <vector>
#include <random>
#include <cmath>
#include <cstring>
#include <dsv41/backend/cuda/kernels/gemm_wgmma_bf16.cuh>
#include <dsv41/numeric/formats.hpp>
using namespace dsv41::gpu;
template <class T> T* up(const std::vector<T>& v) { T* p; cudaMalloc(&p, v.size() * sizeof(T) + 64); cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); return p; }
int main(int argc, char** argv) {
  const int M = argc > 1 ? atoi(argv[1]) : 200, N = 512, K = 1024;
  const bool fp4 = argc > 2 && argv[2][0] == '4';
  std::mt19937 rng(7);
  auto e4 = [&] { uint8_t b = rng() % 0x58; return uint8_t(b | ((rng() & 1) << 7)); };
  const int64_t wrow = fp4 ? K / 2 : K;
  std::vector<uint8_t> w1(int64_t(N) * wrow), w3(w1.size()), xc(int64_t(M) * K), xe(int64_t(M) * K / 32);
  for (auto& b : w1) b = fp4 ? uint8_t(rng()) : e4();
  for (auto& b : w3) b = fp4 ? uint8_t(rng()) : e4();
  for (auto& b : xc) b = e4();
  for (auto& b : xe) b = 120 + rng() % 6;
  const int64_t ns = fp4 ? int64_t(N) * K / 32 : int64_t(N / 32) * K / 32;
  std::vector<uint8_t> s1(ns), s3(ns);
  for (auto& b : s1) b = 118 + rng() % 4;
  for (auto& b : s3) b = 118 + rng() % 4;
  SkinnyParams p;
  p.w1 = {up(w1), up(s1), 0, 0}; p.w3 = {up(w3), up(s3), 0, 0};
  p.N = N; p.K = K; p.xc = up(xc); p.xe = up(xe); p.M = M; p.ldy = N;
  bf16_t* xb; cudaMalloc(&xb, size_t(M) * K * 2); p.xb = xb;
  if (!act_bf16_perm(p.xc, p.xe, M, K, xb, nullptr).ok()) std::printf("error act_bf16_perm\n");
  bf16_t* y; cudaMalloc(&y, size_t(M) * N * 2); p.y = y;
  auto run = [&](SkinnyKernel k) {
    cudaMemset(y, 0xFF, size_t(M) * N * 2);
    dsv41::Status s = fp4 ? gemm_skinny_or_staged<WFmt::FP4, true>(p, 0, M, k, 0, nullptr)
                   : gemm_skinny_or_staged<WFmt::FP8, true>(p, 0, M, k, 0, nullptr);
    cudaError_t e = cudaDeviceSynchronize();
    if (!s.ok() || e != cudaSuccess) std::printf("error %s %s\n", s.message().c_str(), cudaGetErrorString(e));
    std::vector<uint16_t> h(size_t(M) * N);
    cudaMemcpy(h.data(), y, h.size() * 2, cudaMemcpyDeviceToHost);
    return h;
  };
  auto bf = [](uint16_t b) { uint32_t u = uint32_t(b) << 16; float f; memcpy(&f, &u, 4); return f; };
  const auto r = run(SkinnyKernel::registers), st = run(SkinnyKernel::staged), w = run(SkinnyKernel::wgmma), w2 = run(SkinnyKernel::wgmma);
  const auto b = run(SkinnyKernel::wgmma_bf16), b2 = run(SkinnyKernel::wgmma_bf16);
  int dst = 0, dw = 0, dww = 0, db = 0, dbb = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    dst += r[i] != st[i]; dw += r[i] != w[i]; dww += w[i] != w2[i]; db += r[i] != b[i]; dbb += b[i] != b2[i];
  }
  std::printf("%s M=%d: staged vs register %d diffs, wgmma vs register %d, wgmma run-to-run %d, wgmma-bf16 vs register %d, wgmma-bf16 run-to-run %d (of %zu)\n",
              fp4 ? "FP4" : "FP8", M, dst, dw, dww, db, dbb, r.size());
  std::vector<int> rows, cols(N);
  for (int m = 0; m < M; ++m) {
    int c = 0; double mr = 0;
    for (int n = 0; n < N; ++n) if (r[size_t(m) * N + n] != w[size_t(m) * N + n]) { ++c; ++cols[n]; double a = bf(r[size_t(m)*N+n]), b = bf(w[size_t(m)*N+n]); mr = std::max(mr, std::fabs(a - b) / (std::fabs(a) + 1e-3)); }
    if (c && m < 3) std::printf("  row %d: %d cols differ, max rel %.3g\n", m, c, mr);
  }
  // Precision: y = x·wᵀ without SwiGLU against an exact (double) sum; errors in units of the row's L1 norm of
  // products (sum |x_k w_k| · scales) and in bf16 ulps of the exact value.
  {
    SkinnyParams q = p;
    q.w3 = {};
    auto run1 = [&](SkinnyKernel k) {
      cudaMemset(y, 0, size_t(M) * N * 2);
      dsv41::Status s2 = fp4 ? gemm_skinny_or_staged<WFmt::FP4, false>(q, 0, M, k, 0, nullptr)
                             : gemm_skinny_or_staged<WFmt::FP8, false>(q, 0, M, k, 0, nullptr);
      cudaDeviceSynchronize();
      if (!s2.ok()) std::printf("error %s\n", s2.message().c_str());
      std::vector<uint16_t> h(size_t(M) * N);
      cudaMemcpy(h.data(), y, h.size() * 2, cudaMemcpyDeviceToHost);
      return h;
    };
    const auto yr = run1(SkinnyKernel::registers), yw = run1(SkinnyKernel::wgmma), yb = run1(SkinnyKernel::wgmma_bf16);
    double er = 0, ew = 0, ur = 0, uw = 0, eb = 0, ub = 0;
    int nr = 0, nw = 0, nb = 0;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double ex = 0, l1 = 0;
        for (int kb = 0; kb < K / 32; ++kb) {
          const double sx = std::ldexp(1.0, int(xe[size_t(m) * (K / 32) + kb]) - 127);
          const double sw = std::ldexp(1.0, int(fp4 ? s1[size_t(n) * (K / 32) + kb] : s1[size_t(n / 32) * (K / 32) + kb]) - 127);
          for (int k = kb * 32; k < kb * 32 + 32; ++k) {
            const double a = dsv41::num::e4m3_to_f32(xc[size_t(m) * K + k]);
            const double b = fp4 ? dsv41::num::e2m1_to_f32((w1[size_t(n) * (K / 2) + k / 2] >> (4 * (k & 1))) & 15)
                                 : dsv41::num::e4m3_to_f32(w1[size_t(n) * K + k]);
            ex += a * b * sx * sw;
            l1 += std::fabs(a * b * sx * sw);
          }
        }
        const double ulp = std::ldexp(1.0, std::max(-133, int(std::floor(std::log2(std::fabs(ex) + 1e-300))) - 7));
        const double dr = std::fabs(bf(yr[size_t(m) * N + n]) - ex), dw = std::fabs(bf(yw[size_t(m) * N + n]) - ex);
        const double dbf = std::fabs(bf(yb[size_t(m) * N + n]) - ex);
        eb = std::max(eb, dbf / l1); ub = std::max(ub, dbf / ulp); nb += dbf > 0.5 * ulp * 1.0001;
        er = std::max(er, dr / l1); ew = std::max(ew, dw / l1);
        ur = std::max(ur, dr / ulp); uw = std::max(uw, dw / ulp);
        nr += dr > 0.5 * ulp * 1.0001; nw += dw > 0.5 * ulp * 1.0001;
      }
    std::printf("  exact check (no SwiGLU): register max err/L1 %.3g, max %.3g ulps, %d beyond half an ulp; wgmma max err/L1 %.3g, max %.3g ulps, %d beyond half an ulp\n",
                er, ur, nr, ew, uw, nw);
    std::printf("  exact check: wgmma-bf16 max err/L1 %.3g, max %.3g ulps, %d beyond half an ulp (of %d)\n", eb, ub, nb, M * N);
  }
  int nc = 0; for (int n = 0; n < N; ++n) nc += cols[n] > 0;
  std::printf("  %d of %d columns have a diff; first cols:", nc, N);
  for (int n = 0, k = 0; n < N && k < 40; ++n) if (cols[n]) { std::printf(" %d", n); ++k; }
  std::printf("\n");
  return 0;
}
