// GPU check: the one-CTA-per-row candidate block choice (radix select, serial fallback on straddling ties)
// picks exactly the blocks of the serial introselect kernel (libstdc++'s order, which the fixtures follow).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include <dsv41/backend/cuda/kernels/glue.cuh>

using namespace dsv41;
using namespace dsv41::gpu;

TEST_CASE("candidate blocks: radix select equals the serial introselect", "[gpu][candidates]") {
  std::mt19937 rng(7);
  struct Case {
    int S, n, topk, blk;
    int tie_mode;  // 0 continuous, 1 few distinct values (ties straddle), 2 mostly −inf, 3 zeros with a few positive
  };
  const std::vector<Case> cases = {{8, 4000, 16, 8, 0},   {8, 4000, 16, 8, 1},     {8, 4000, 16, 8, 2},
                                   {8, 4000, 16, 8, 3},   {4, 131072, 2048, 8, 0}, {4, 131072, 2048, 8, 1},
                                   {4, 131072, 2048, 8, 3}, {16, 700, 2048, 8, 1},   {3, 64, 4, 8, 0}};
  int64_t rows = 0, expected_rows = 0;
  for (const Case& c : cases) {
    expected_rows += c.S;
    std::vector<float> sc(size_t(c.S) * c.n);
    std::vector<int> vis(size_t(c.S));
    for (int t = 0; t < c.S; ++t) {
      vis[t] = t == 0 ? c.n : int(rng() % uint32_t(c.n + 1));
      for (int j = 0; j < c.n; ++j) {
        float v = std::normal_distribution<float>(0.f, 1.f)(rng);
        if (c.tie_mode == 1) v = std::floor(v * 2.f) / 2.f;
        if (c.tie_mode == 2) v = (rng() % 50 == 0) ? v : -INFINITY;
        if (c.tie_mode == 3) v = (rng() % 40 == 0) ? std::fabs(v) : 0.f;
        sc[size_t(t) * c.n + j] = v;
      }
    }
    const int nb = (c.n + c.blk - 1) / c.blk;
    float* d_sc;
    int* d_vis;
    stdsel::Pair* d_work;
    uint8_t *d_a, *d_b;
    REQUIRE(cudaMalloc(&d_sc, sc.size() * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&d_vis, vis.size() * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&d_work, size_t(c.S) * nb * sizeof(stdsel::Pair)) == cudaSuccess);
    REQUIRE(cudaMalloc(&d_a, size_t(c.S) * nb) == cudaSuccess);
    REQUIRE(cudaMalloc(&d_b, size_t(c.S) * nb) == cudaSuccess);
    cudaMemcpy(d_sc, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d_vis, vis.data(), vis.size() * 4, cudaMemcpyHostToDevice);
    glue::candidate_kernel<<<glue::blocks_for(c.S, 64), 64>>>(d_sc, c.n, d_vis, c.S, c.topk, c.blk, d_work, nb, d_a);
    glue::candidate_fast_kernel<256><<<c.S, 256>>>(d_sc, c.n, d_vis, c.topk, c.blk, d_work, nb, d_b);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<uint8_t> a(size_t(c.S) * nb), b(a.size());
    cudaMemcpy(a.data(), d_a, a.size(), cudaMemcpyDeviceToHost);
    cudaMemcpy(b.data(), d_b, b.size(), cudaMemcpyDeviceToHost);
    for (int t = 0; t < c.S; ++t) {
      INFO("n " << c.n << " topk " << c.topk << " ties " << c.tie_mode << " row " << t << " vis " << vis[t]);
      int chosen = 0;
      for (int i = 0; i < nb; ++i) chosen += a[size_t(t) * nb + i];
      CHECK(chosen <= c.topk);
      CHECK(std::equal(a.begin() + size_t(t) * nb, a.begin() + size_t(t + 1) * nb, b.begin() + size_t(t) * nb));
      ++rows;
    }
    cudaFree(d_sc);
    cudaFree(d_vis);
    cudaFree(d_work);
    cudaFree(d_a);
    cudaFree(d_b);
  }
  CHECK(rows == expected_rows);  // every row of every case was compared
}
