// The decode GEMMs on the register kernel (gemm_skinny) against the streaming kernel (gemm_stream, KS = 8, 16, 32 K
// blocks per row per stage), a bench program: the routed experts' grouped FP4 GEMMs at decode (E=384 top-6, d=5120,
// I=2304; T tokens routed uniformly at random, tiles of <= 16 rows per expert; 8 routings rotated so the experts
// change between calls) and the dense FP8 decode shapes through gemm_fp8's split-K (weights rotated past the L2).
// Every streaming output is compared bit for bit with the register kernel's; the BF16 wgmma kernel (gemm_wgmma_bf16.cuh,
// another summation by design; `wg` mode also over 2 or 4 K ranges) and the streaming kernel split over 2 or 4 K
// ranges (with the split-K reduce) are timed beside them with their counts of differing outputs. Bytes: the weights read (experts hit)
// and their scales; % of the copy rate measured in the same run (cudaMemcpy d2d, read + write).
//   nvcc -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude \
//        bench/gemm_stream.cu -lcublasLt -o build/gpu/gemm_stream && build/gpu/gemm_stream
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_bench.cuh"

using namespace dsv41;
using namespace dsv41::gpubench;
using gpu::SkinnyParams;
using gpu::WFmt;

namespace {

double copy_tbs = 0;
int mismatches = 0;

template <class T>
T* upload(const std::vector<T>& v, std::vector<DBuf<uint8_t>>& keep) {
  keep.emplace_back(v.size() * sizeof(T) + 16);
  GT_CUDA(cudaMemcpy(keep.back().p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return reinterpret_cast<T*>(keep.back().p);
}
std::vector<uint16_t> fetch(const bf16_t* y, size_t n) {
  std::vector<uint16_t> h(n);
  GT_SYNC();
  GT_CUDA(cudaMemcpy(h.data(), y, n * 2, cudaMemcpyDeviceToHost));
  return h;
}
void row(const char* op, const std::string& shape, const char* kernel, double us, double bytes, double base_us,
         int diffs) {
  const double tbs = bytes / (us * 1e-6) / 1e12;
  std::printf("| %s | %s | %s | %.1f | %.2f | %.2f | %.0f%% | %.0f%% | %.2fx | %s |\n", op, shape.c_str(), kernel, us,
              bytes / 1e6, tbs, 100 * tbs / copy_tbs, 100 * tbs / kCopyTBs, base_us / us,
              diffs < 0 ? "-" : diffs == 0 ? "same bits" : (std::to_string(diffs) + " DIFFER").c_str());
  // BF16 wgmma and split-K sum in another order by design: their differing outputs are reported, not failures.
  if (diffs > 0 && std::strcmp(kernel, "BF16 wgmma") != 0 && !std::strstr(kernel, "split")) ++mismatches;
}

// One call of the chosen kernel (KS 0: register kernel, -1: BF16 wgmma, which needs p.xb).
template <WFmt F, bool SW>
void call(const SkinnyParams& p, int max_tiles, int max_rows, int ks) {
  if (ks == 0) GT_OK((gpu::gemm_skinny<F, SW>(p, max_tiles, max_rows, nullptr)));
  else if (ks < 0) GT_OK((gpu::gemm_wgbf16<F, SW>(p, max_tiles, max_rows, nullptr)));
  else if (ks == 8) GT_OK((gpu::gemm_stream<F, SW, 8>(p, max_tiles, max_rows, nullptr)));
  else if (ks == 16) GT_OK((gpu::gemm_stream<F, SW, 16>(p, max_tiles, max_rows, nullptr)));
  else GT_OK((gpu::gemm_stream<F, SW, 32>(p, max_tiles, max_rows, nullptr)));
}

void routed(int T, const std::vector<int>& kernels) {
  const int E = 384, k = 6, d = 5120, I = 2304, NR = 8;
  static DBuf<uint8_t> w1(size_t(E) * I * d / 2), w3(w1.n), w2(w1.n), s1(size_t(E) * I * d / 32), s3(s1.n), s2(s1.n);
  static bool filled = false;
  if (!filled) {
    fill(w1.p, w1.n, 1, 0); fill(w3.p, w3.n, 2, 0); fill(w2.p, w2.n, 3, 0);
    for (auto* s : {&s1, &s3, &s2}) fill(s->p, s->n, 4, 2, 1, 118, 121);
    filled = true;
  }
  const int P = T * k;
  std::mt19937 rng(100 + T);
  std::vector<DBuf<uint8_t>> keep;
  struct Routing { gpu::RowTile* tiles; int* n_tiles; int* row_src; int n, hit; };
  std::vector<Routing> rs;
  for (int r = 0; r < NR; ++r) {
    std::vector<std::vector<int>> per(E);
    for (int t = 0; t < T; ++t) {
      std::vector<int> sel;
      while (int(sel.size()) < k) {
        const int e = int(rng() % E);
        if (std::find(sel.begin(), sel.end(), e) == sel.end()) sel.push_back(e);
      }
      for (int e : sel) per[size_t(e)].push_back(t);
    }
    std::vector<gpu::RowTile> tiles;
    std::vector<int> src;
    int hit = 0;
    for (int e = 0; e < E; ++e) {
      const int cnt = int(per[size_t(e)].size());
      hit += cnt > 0;
      for (int c = 0; c < cnt; c += 16) tiles.push_back({e, int(src.size()) + c, std::min(16, cnt - c), 0});
      for (int t : per[size_t(e)]) src.push_back(t);
    }
    const int n = int(tiles.size());
    rs.push_back({upload(tiles, keep), upload(std::vector<int>{n}, keep), upload(src, keep), n, hit});
  }
  DBuf<uint8_t> xc(size_t(T) * d), xe(size_t(T) * d / 32), hc(size_t(P) * I), he(size_t(P) * I / 32);
  fill(xc.p, xc.n, 5, 1); fill(xe.p, xe.n, 6, 2, 1, 120, 125); fill(hc.p, hc.n, 7, 1); fill(he.p, he.n, 8, 2, 1, 120, 125);
  DBuf<bf16_t> xb(size_t(T) * d), hb(size_t(P) * I);  // the BF16 wgmma kernel's widened activations
  GT_OK(gpu::act_bf16_perm(xc.p, xe.p, T, d, xb.p, nullptr));
  GT_OK(gpu::act_bf16_perm(hc.p, he.p, P, I, hb.p, nullptr));
  DBuf<float> rw{size_t(P)};
  fill(rw.p, rw.n, 9, 5, 1.f);
  DBuf<bf16_t> h(size_t(P) * I), ys(size_t(P) * d);
  DBuf<float> part{size_t(8) * P * std::max(I, d)};  // split-K partials: up to 2 x 4 planes
  int max_tiles = 0;
  double hit = 0;
  for (auto& r : rs) { max_tiles = std::max(max_tiles, r.n); hit += r.hit; }
  hit /= NR;
  const int64_t gw = int64_t(I) * d / 2, gs = int64_t(I) * d / 32;
  auto params = [&](int i, bool first) {
    const Routing& r = rs[size_t(i % NR)];
    SkinnyParams p;
    if (first) {
      p.w1 = {w1.p, s1.p, gw, gs}; p.w3 = {w3.p, s3.p, gw, gs}; p.N = I; p.K = d; p.xc = xc.p; p.xe = xe.p; p.xb = xb.p;
      p.row_src = r.row_src; p.row_weight = rw.p; p.y = h.p; p.ldy = I; p.limit = 10.f;
    } else {
      p.w1 = {w2.p, s2.p, gw, gs}; p.N = d; p.K = I; p.xc = hc.p; p.xe = he.p; p.xb = hb.p; p.y = ys.p; p.ldy = d;
    }
    p.tiles = r.tiles; p.n_tiles = r.n_tiles; p.M = P;
    return p;
  };
  const double mat = double(I) * d * (0.5 + 1.0 / 32);
  const std::string shape = "T=" + std::to_string(T) + " (" + std::to_string(int(hit + 0.5)) + " experts hit)";
  for (int first = 1; first >= 0; --first) {
    const double bytes = hit * mat * (first ? 2 : 1);
    double base = 0;
    std::vector<uint16_t> ref;
    for (int code : kernels) {
      // code: 0 register, -1 BF16 wgmma, KS (8, 16, 32) streaming, 100·z + KS streaming split over z K ranges (the
      // FP32 partials reduced by the library's split-K reduce kernels, timed with it; another sum, so not the bits).
      // -1, -2, -4: BF16 wgmma over 1, 2, 4 K ranges.
      const int ks = code < 0 ? -1 : code % 100, z = code < 0 ? -code : code < 100 ? 1 : code / 100;
      auto go = [&](int i) {
        SkinnyParams p = params(i, first);
        if (z > 1) { p.ksplit = z; p.partial = part.p; }
        if (first) call<WFmt::FP4, true>(p, max_tiles, 16, ks);
        else call<WFmt::FP4, false>(p, max_tiles, 16, ks);
        if (z > 1 && first) GT_OK(gpu::swiglu_splitk_reduce(p, nullptr));
        if (z > 1 && !first)
          gpu::detail::splitk_reduce_kernel<<<unsigned(gpu::ceil_div64(int64_t(P) * d, 256)), 256>>>(part.p, z, P, d,
                                                                                                    ys.p, d, nullptr);
      };
      const double us = median_us(go, 3, 24);
      go(0);
      auto out = fetch(first ? h.p : ys.p, first ? h.n : ys.n);
      int diffs = -1;
      if (code == 0) { base = us; ref = out; }
      else { diffs = 0; for (size_t q = 0; q < out.size(); ++q) diffs += out[q] != ref[q]; }
      const std::string kn = (code == 0 ? std::string("register") : code < 0 ? std::string("BF16 wgmma")
                              : "stream KS=" + std::to_string(ks)) + (z > 1 ? " split " + std::to_string(z) : "");
      row(first ? "routed w1/w3 FP4" : "routed w2 FP4", shape, kn.c_str(), us, bytes, base, diffs);
    }
  }
}

void dense(int M, int N, int K, const char* name) {
  const double wbytes = double(N) * K + double(N / 32) * (K / 32);
  const int ns = rotation(wbytes);
  std::vector<DBuf<uint8_t>> w, s;
  for (int i = 0; i < ns; ++i) {
    w.emplace_back(size_t(N) * K); s.emplace_back(size_t(N / 32) * (K / 32));
    fill(w.back().p, w.back().n, 20 + i, 1); fill(s.back().p, s.back().n, 40 + i, 2, 1, 113, 116);
  }
  DBuf<uint8_t> xc(size_t(M) * K), xe(size_t(M) * K / 32);
  fill(xc.p, xc.n, 60, 1); fill(xe.p, xe.n, 61, 2, 1, 120, 125);
  DBuf<bf16_t> y(size_t(M) * N);
  const int ksplit = gpu::detail::skinny_ksplit(M, N, K);
  DBuf<float> part(size_t(ksplit) * M * N + 1);
  double base = 0;
  std::vector<uint16_t> ref;
  const std::string shape = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                            " split " + std::to_string(ksplit);
  for (int ks : {0, 8, 16}) {
    auto go = [&](int i) {
      SkinnyParams p;
      p.w1 = {w[size_t(i % ns)].p, s[size_t(i % ns)].p, 0, 0};
      p.N = N; p.K = K; p.xc = xc.p; p.xe = xe.p; p.M = M; p.y = y.p; p.ldy = N; p.ksplit = ksplit; p.partial = part.p;
      call<WFmt::FP8, false>(p, 0, M, ks);
      if (ksplit > 1)
        gpu::detail::splitk_reduce_kernel<<<unsigned(gpu::ceil_div64(int64_t(M) * N, 256)), 256>>>(part.p, ksplit, M, N,
                                                                                                 y.p, N, nullptr);
    };
    const double us = median_us(go, 3, 24);
    go(0);
    auto out = fetch(y.p, y.n);
    int diffs = -1;
    if (ks == 0) { base = us; ref = out; }
    else { diffs = 0; for (size_t q = 0; q < out.size(); ++q) diffs += out[q] != ref[q]; }
    const std::string kn = ks == 0 ? "register" : "stream KS=" + std::to_string(ks);
    row(name, shape, kn.c_str(), us, wbytes, base, diffs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Row c = bench_copy();
    copy_tbs = c.bytes / (c.us * 1e-6) / 1e12;
    std::printf("copy d2d 1 GiB: %.1f us, %.2f TB/s (read + write)\n\n", c.us, copy_tbs);
    std::printf("| op | shape | kernel | us | MB read | TB/s | %% of copy (this run) | %% of 4.25 TB/s | x register | bits |\n");
    std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    // moe: the routed GEMMs only; wg: the routed GEMMs on register, stream KS=8 (whole K and split 2 / 4) and BF16
    // wgmma only.
    const bool wg = argc > 1 && !std::strcmp(argv[1], "wg"), only_moe = wg || (argc > 1 && !std::strcmp(argv[1], "moe"));
    const std::vector<int> kernels = wg ? std::vector<int>{0, 8, 208, 408, -1, -2, -4} : std::vector<int>{0, 8, 16, 32, 208, 408, -1};
    for (int T : {1, 8, 64}) routed(T, kernels);
    if (!only_moe) {
      dense(1, 32768, 1280, "dense FP8 wq_b");
      dense(4, 32768, 1280, "dense FP8 wq_b");
      dense(64, 32768, 1280, "dense FP8 wq_b");
      dense(1, 5120, 8192, "dense FP8 wo_b");
      dense(4, 5120, 8192, "dense FP8 wo_b");
      dense(64, 5120, 8192, "dense FP8 wo_b");
      dense(1, 1280, 5120, "dense FP8 wq_a");
      dense(1, 512, 5120, "dense FP8 wkv");
      dense(1, 2304, 5120, "dense FP8 shared w1");
    }
    std::printf("\n%s\n", mismatches ? "BITS DIFFER" : "all streaming outputs equal the register kernel's (BF16 wgmma: its own sums)");
    return mismatches ? 1 : 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
}
