// Kernel timings at the released shapes (CUDA events, warm-up, median of 25, inputs rotated past the
// 60 MB L2 where one set would fit in it), with bytes and FLOPs counted per call. Used by
// bench/gpu_harness.cu; the table it prints is recorded in bench/README.md.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/kernels/attention.cuh>
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_f32.cuh>
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/backend/cuda/kernels/indexer.cuh>
#include <dsv41/backend/cuda/kernels/mhc.cuh>
#include <dsv41/backend/cuda/kernels/moe.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/backend/cuda/kernels/rmsnorm.cuh>
#include <dsv41/backend/cuda/wo_a_blas.hpp>

#include "../tests/gpu/gpu_check.cuh"

namespace dsv41::gpubench {

using gputest::DBuf;
using gpu::bf16_t;

// Measured ceilings of this workplace's H200 (device README / METHOD.md).
constexpr double kCopyTBs = 4.25, kFp8TF = 1422, kBf16TF = 786;

struct Row {
  std::string op, shape;
  double us = 0, bytes = 0, flops = 0;
  char unit = '-';  // compute ceiling: '8' FP8, 'b' BF16, '-' none
  std::string note;
};

// ---- device-side random fill (fast; the timings need no host reference) ----
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
template <int = 0>
__global__ void fill_kernel(uint8_t* p, size_t n, uint64_t seed, int kind, float scale, int lo, int hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ull + i);
    if (kind == 0) p[i] = uint8_t(h);                                   // bytes (FP4 pairs)
    else if (kind == 1) { uint8_t c = uint8_t(h); if ((c & 0x7F) == 0x7F) c ^= 1; p[i] = c; }  // E4M3
    else if (kind == 2) p[i] = uint8_t(lo + int(h % uint64_t(hi - lo + 1)));                   // UE8M0
    else if (kind == 3) {                                               // BF16 ~ N(0, scale²)
      float s = 0.f;
      for (int k = 0; k < 4; ++k) s += float((h >> (16 * k)) & 0xFFFF) * (1.f / 65536.f);
      reinterpret_cast<bf16_t*>(p)[i] = __float2bfloat16_rn((s - 2.f) * 1.7320508f * scale);
    } else if (kind == 4) reinterpret_cast<int*>(p)[i] = int(h % uint64_t(hi));  // ids in [0, hi)
    else if (kind == 5) reinterpret_cast<float*>(p)[i] = (float(h & 0xFFFFFF) / 16777216.f - 0.5f) * scale;
  }
}
// n elements of the kind's element type.
inline void fill(void* p, size_t n, uint64_t seed, int kind, float scale = 1.f, int lo = 0, int hi = 0) {
  fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, kind, scale, lo, hi);
  GT_CUDA(cudaGetLastError());
}

// Median time (µs) of f(i) over `iters` calls after `warm` calls; f(i) should rotate its inputs on i.
inline double median_us(const std::function<void(int)>& f, int warm = 3, int iters = 25) {
  cudaEvent_t a, b;
  GT_CUDA(cudaEventCreate(&a));
  GT_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f(i);
  GT_SYNC();
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    GT_CUDA(cudaEventRecord(a));
    f(warm + i);
    GT_CUDA(cudaEventRecord(b));
    GT_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    GT_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  GT_CUDA(cudaGetLastError());
  GT_CUDA(cudaEventDestroy(a));
  GT_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return 1000.0 * t[t.size() / 2];
}
// Sets of inputs so that all sets together exceed ~3x the L2.
inline int rotation(double bytes_per_set) { return std::clamp(int(200e6 / std::max(bytes_per_set, 1.0)) + 1, 1, 64); }

inline Row bench_copy() {
  const size_t n = size_t(1) << 30;
  DBuf<uint8_t> a(n), b(n);
  GT_CUDA(cudaMemset(a.p, 1, n));
  Row r{"copy d2d", "1 GiB", 0, 2.0 * n, 0, '-', "ceiling check"};
  r.us = median_us([&](int) { GT_CUDA(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice)); }, 2, 10);
  return r;
}

inline Row bench_rmsnorm(int T, int d) {
  const double set = 4.0 * T * d;
  const int ns = rotation(set);
  std::vector<DBuf<bf16_t>> x, y;
  for (int s = 0; s < ns; ++s) { x.emplace_back(size_t(T) * d); y.emplace_back(size_t(T) * d); fill(x[s].p, x[s].n, s, 3); }
  DBuf<float> w(d);
  fill(w.p, d, 99, 5, 1.f);
  Row r{"rmsnorm", "T=" + std::to_string(T) + " d=" + std::to_string(d), 0, set + 4.0 * d, 3.0 * T * d, '-', ""};
  r.us = median_us([&](int i) { GT_OK(gpu::rmsnorm(x[i % ns].p, d, w.p, T, d, 1e-20f, y[i % ns].p, d, nullptr)); });
  return r;
}

inline Row bench_act_quant(int T, int K) {
  const double set = 2.0 * T * K + T * K + T * K / 32.0;
  const int ns = rotation(set);
  std::vector<DBuf<bf16_t>> x;
  std::vector<DBuf<uint8_t>> c, e;
  for (int s = 0; s < ns; ++s) {
    x.emplace_back(size_t(T) * K); c.emplace_back(size_t(T) * K); e.emplace_back(size_t(T) * K / 32);
    fill(x[s].p, x[s].n, 10 + s, 3);
  }
  Row r{"act_quant", "T=" + std::to_string(T) + " K=" + std::to_string(K), 0, set, 0, '-', "fp8 e4m3 + ue8m0/32"};
  r.us = median_us([&](int i) {
    GT_OK(gpu::act_quant_fp8(x[i % ns].p, K, T, K, c[i % ns].p, e[i % ns].p, nullptr, nullptr));
  });
  return r;
}

inline Row bench_gemm(const char* name, int M, int N, int K) {
  const double wbytes = double(N) * K + double(N / 32) * (K / 32), xbytes = double(M) * K * (1 + 1.0 / 32);
  const int ns = rotation(wbytes + xbytes);
  std::vector<DBuf<uint8_t>> w, ws, xc, xe;
  for (int s = 0; s < ns; ++s) {
    w.emplace_back(size_t(N) * K); ws.emplace_back(size_t(N / 32) * (K / 32));
    xc.emplace_back(size_t(M) * K); xe.emplace_back(size_t(M) * K / 32);
    fill(w[s].p, w[s].n, 20 + s, 1); fill(ws[s].p, ws[s].n, 40 + s, 2, 1, 112, 116);
    fill(xc[s].p, xc[s].n, 60 + s, 1); fill(xe[s].p, xe[s].n, 80 + s, 2, 1, 120, 124);
  }
  DBuf<bf16_t> y(size_t(M) * N);
  const size_t wsb = gpu::gemm_workspace_bytes(M, N, K);
  DBuf<float> work(wsb / 4 + 1);
  Row r{std::string("gemm_fp8 ") + name, "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K),
        0, wbytes + xbytes + 2.0 * M * N, 2.0 * M * N * K, '8', M > 64 ? "wide" : (wsb ? "skinny split-K" : "skinny")};
  r.us = median_us([&](int i) {
    const int s = i % ns;
    GT_OK(gpu::gemm_fp8(xc[s].p, xe[s].p, M, w[s].p, ws[s].p, N, K, y.p, N, work.p, wsb, nullptr));
  });
  return r;
}

// The grouped wo_a projection at the released shape (8 groups of 1024 rank over 4096 inputs, FP8 weights, BF16
// activations): kernel 0 the per-output warp kernel (up to 16 rows before session 8), 1 the rows kernel, 2 the
// tiled FP32 GEMM (17 rows and more before session 8).
inline Row bench_wo_a(int S, int kernel) {
  const int G = 8, R = 1024, gw = 4096;
  const double wbytes = double(G) * R * gw * (1 + 1.0 / 1024), xbytes = 2.0 * S * G * gw;
  const int ns = rotation(wbytes + xbytes);
  std::vector<DBuf<uint8_t>> w, ws;
  for (int s = 0; s < ns; ++s) {
    w.emplace_back(size_t(G) * R * gw); ws.emplace_back(size_t(G) * R / 32 * (gw / 32));
    fill(w[s].p, w[s].n, 90 + s, 1); fill(ws[s].p, ws[s].n, 95 + s, 2, 1, 112, 116);
  }
  DBuf<bf16_t> o(size_t(S) * G * gw), u(size_t(S) * G * R);
  fill(o.p, o.n, 99, 3);
  const char* names[] = {"wo_a per output", "wo_a rows", "wo_a tiled f32", "wo_a cuBLASLt"};
  const char* notes[] = {"warp per output", S <= 16 ? "warp per 2 weight rows" : "warp per weight row", "gemm_f32",
                         "dequantize to BF16 + G cuBLASLt GEMMs"};
  gpu::BlasLt blas;
  DBuf<bf16_t> wdeq(kernel == 3 ? size_t(G) * R * gw : 1);
  if (kernel == 3) GT_OK(blas.init());
  Row r{names[kernel], "S=" + std::to_string(S) + " G=8 R=1024 gw=4096", 0, wbytes + xbytes + 2.0 * S * G * R,
        2.0 * S * G * R * gw, '-', notes[kernel]};
  r.us = median_us([&](int i) {
    const int s = i % ns;
    if (kernel == 3) {
      GT_OK(gpu::wo_a_blas(blas, o.p, S, G, R, gw, w[s].p, ws[s].p, wdeq.p, u.p, nullptr));
    } else if (kernel == 1) {
      GT_OK(gpu::glue::wo_a_rows(o.p, S, G, R, gw, w[s].p, ws[s].p, u.p, nullptr));
    } else if (kernel == 2) {
      gpu::GemmF32Params gp;
      gp.A = o.p; gp.lda = int64_t(G) * gw; gp.a_goff = gw; gp.W = w[s].p; gp.Ws = ws[s].p;
      gp.M = S; gp.N = R; gp.K = gw; gp.G = G; gp.yb = u.p; gp.ldy = int64_t(G) * R;
      GT_OK(gpu::gemm_f32(gp, nullptr));
    } else {
      gpu::glue::wo_a_kernel<<<gpu::glue::blocks_for(int64_t(S) * G * R * 32), gpu::glue::kThreads>>>(o.p, S, G, R, gw,
                                                                                                   w[s].p, ws[s].p, u.p);
      GT_OK(gpu::launch_status("wo_a"));
    }
  });
  return r;
}

// The whole MoE layer (all launches of gpu::moe) at the released expert shapes.
struct MoeBench {
  int d = 5120, E = 384, k = 6, I = 2304;
  DBuf<uint8_t> w1, w3, w2, w1s, w3s, w2s, s1, s3, s2, s1s, s3s, s2s;
  DBuf<bf16_t> gate;
  DBuf<float> bias;
  gpu::SideStream side;  // the shared expert's second stream (run(..., overlap))
  MoeBench()
      : w1(size_t(E) * I * d / 2), w3(w1.n), w2(w1.n), w1s(size_t(E) * I * d / 32), w3s(w1s.n), w2s(w1s.n),
        s1(size_t(I) * d), s3(s1.n), s2(s1.n), s1s(size_t(I / 32) * (d / 32)), s3s(s1s.n), s2s(s1s.n),
        gate(size_t(E) * d), bias(E) {
    int seed = 200;
    for (auto* b : {&w1, &w3, &w2}) fill(b->p, b->n, seed++, 0);
    for (auto* b : {&w1s, &w3s, &w2s}) fill(b->p, b->n, seed++, 2, 1, 118, 120);
    for (auto* b : {&s1, &s3, &s2}) fill(b->p, b->n, seed++, 1);
    for (auto* b : {&s1s, &s3s, &s2s}) fill(b->p, b->n, seed++, 2, 1, 113, 114);
    fill(gate.p, gate.n, seed++, 3, 0.02f);
    fill(bias.p, bias.n, seed++, 5, 0.1f);
    GT_OK(side.create());
  }
  Row run(int T, int tile_rows = 0, gpu::SkinnyKernel kernel = gpu::SkinnyKernel::automatic, bool fused = true,
          bool w2_bf16 = false, bool overlap = false, int w13_split = 0) {
    const gpu::MoeOverlap* ov = overlap ? side.overlap() : nullptr;
    gpu::MoeShape sh{T, d, E, k, I, 1.5f, 10.f, true};
    sh.tile_rows = tile_rows;
    sh.kernel = kernel;
    sh.fused_routing = fused;
    sh.w2_bf16 = w2_bf16;
    sh.w13_split = w13_split;
    gpu::MoeWeights W;
    W.gate = gate.p; W.bias = bias.p;
    const int64_t gw = int64_t(I) * d / 2, gs = int64_t(I) * d / 32;
    W.w1 = {w1.p, w1s.p, gw, gs}; W.w3 = {w3.p, w3s.p, gw, gs}; W.w2 = {w2.p, w2s.p, gw, gs};
    W.s1 = {s1.p, s1s.p, 0, 0}; W.s3 = {s3.p, s3s.p, 0, 0}; W.s2 = {s2.p, s2s.p, 0, 0};
    const int ns = 4;
    std::vector<DBuf<bf16_t>> x;
    for (int s = 0; s < ns; ++s) { x.emplace_back(size_t(T) * d); fill(x[s].p, x[s].n, 300 + s, 3); }
    DBuf<bf16_t> out(size_t(T) * d);
    const size_t wsb = gpu::moe_workspace_bytes(sh);
    DBuf<uint8_t> work(wsb);
    GT_OK(gpu::moe(sh, W, x[0].p, out.p, work.p, wsb, nullptr));
    GT_SYNC();
    // bytes: the weights of the experts actually hit (on x[0]), shared expert, gate, activations
    std::vector<int> sel(size_t(T) * k);
    GT_CUDA(cudaMemcpy(sel.data(), gpu::moe_work(sh, work.p).sel, sel.size() * 4, cudaMemcpyDeviceToHost));
    std::sort(sel.begin(), sel.end());
    const int active = int(std::unique(sel.begin(), sel.end()) - sel.begin());
    const double ebytes = 3.0 * I * d * (0.5 + 1.0 / 32), sbytes = 3.0 * I * d * (1.0 + 1.0 / 1024);
    Row r{"moe layer", "T=" + std::to_string(T) + " E=384 k=6 I=2304", 0,
          active * ebytes + sbytes + 2.0 * E * d + 4.0 * T * d, 2.0 * T * (k + 1) * 3.0 * I * d + 2.0 * T * E * d, '8',
          std::to_string(active) + " experts hit, " + gpu::detail::moe_kernels_name(sh) +
              " kernel, tiles of " + std::to_string(gpu::detail::moe_tile_rows(sh)) + " rows" +
              (tile_rows || kernel != gpu::SkinnyKernel::automatic ? " (forced)" : "") +
              (gpu::detail::moe_route_small_fits(sh) ? ", fused routing" : ", CUB routing") +
              (overlap ? ", shared expert on a second stream" : "")};
    r.us = median_us([&](int i) { GT_OK(gpu::moe(sh, W, x[i % ns].p, out.p, work.p, wsb, nullptr, nullptr, ov)); });
    return r;
  }
};

inline Row bench_attention(int R) {
  const int H = 64, D = 512, nw = 128, nc = 512, pw = 2048, pc = 32768;
  DBuf<uint8_t> wpool(size_t(pw) * (D + D / 32)), cpool(size_t(pc) * (D / 2 + D / 16));
  fill(wpool.p, wpool.n, 400, 1);
  // packed pools: random codes; scale bytes are overwritten by the fill too (UE8M0 / E4M3 random): fine
  fill(cpool.p, cpool.n, 401, 0);
  DBuf<int> widx(size_t(R) * nw), cidx(size_t(R) * nc);
  fill(widx.p, widx.n, 402, 4, 1, 0, pw);
  fill(cidx.p, cidx.n, 403, 4, 1, 0, pc);
  const int ns = R >= 256 ? 2 : 1;
  std::vector<DBuf<bf16_t>> q;
  for (int s = 0; s < ns; ++s) { q.emplace_back(size_t(R) * H * D); fill(q[s].p, q[s].n, 404 + s, 3); }
  DBuf<bf16_t> out(size_t(R) * H * D);
  DBuf<float> sink(H);
  fill(sink.p, H, 405, 5, 1.f);
  gpu::SparseAttnParams p;
  p.win_pool = wpool.p; p.win_idx = widx.p; p.n_win = nw; p.comp_pool = cpool.p; p.comp_idx = cidx.p; p.n_comp = nc;
  p.sink = sink.p; p.scale = 1.f / std::sqrt(float(D)); p.R = R; p.H = H; p.D = D; p.out = out.p;
  const double entries = std::min<double>(double(R) * nw, pw) * (D + D / 32) + std::min<double>(double(R) * nc, pc) * (D / 2 + D / 16);
  Row r{"attention", "R=" + std::to_string(R) + " H=64 D=512 128+512", 0, 4.0 * R * H * D + entries,
        4.0 * R * H * double(nw + nc) * D, 'b',
        gpu::detail::attn::split_for(p) > 1 ? "cluster split " + std::to_string(gpu::detail::attn::split_for(p))
                                            : std::string("one CTA per row, 16/32 heads")};
  r.us = median_us([&](int i) {
    p.q = q[i % ns].p;
    GT_OK(gpu::sparse_attention(p, nullptr));
  });
  return r;
}

inline std::vector<Row> bench_indexer(int S, int n) {
  const int nI = 32, dI = 128, K = 512;
  DBuf<uint8_t> q(size_t(S) * nI * dI / 2), qe(size_t(S) * nI * dI / 32), keys(size_t(n) * 68);
  fill(q.p, q.n, 500, 0); fill(qe.p, qe.n, 501, 2, 1, 124, 126); fill(keys.p, keys.n, 502, 0);
  DBuf<float> w(size_t(S) * nI), scores(size_t(S) * n);
  fill(w.p, w.n, 503, 5, 0.1f);
  std::vector<int> vis(size_t(S), n);
  auto dvis = gputest::to_dev(vis);
  DBuf<int> lists(size_t(S) * K);
  gpu::IndexScoreParams p;
  p.q = q.p; p.qe = qe.p; p.w = w.p; p.keys = keys.p; p.n = n; p.vis = dvis.p; p.R = S; p.nI = nI; p.dI = dI;
  p.scores = scores.p;
  const std::string sh = "S=" + std::to_string(S) + " keys=" + std::to_string(n);
  Row a{"idx scores", sh + " 32x128", 0, double(n) * 68 + 4.0 * S * n + S * nI * (dI / 2 + 4 + 4.0 * dI / 32),
        2.0 * S * n * nI * dI, '8', "fp4 as e4m3 mma"};
  a.us = median_us([&](int) { GT_OK(gpu::index_scores(p, nullptr)); });
  GT_OK(gpu::index_scores(p, nullptr));
  GT_SYNC();
  Row b{"topk", sh + " K=512", 0, 4.0 * S * n + 4.0 * S * K, 0, '-', "5 passes over the row"};
  b.us = median_us([&](int) { GT_OK(gpu::topk(scores.p, S, n, dvis.p, K, lists.p, nullptr)); });
  return {a, b};
}

inline Row bench_mhc(int T) {
  const int d = 5120, hc = 4, NM = 24;
  const int ns = T >= 256 ? 3 : 1;
  std::vector<DBuf<bf16_t>> H, Ho;
  for (int s = 0; s < ns; ++s) {
    H.emplace_back(size_t(T) * hc * d); Ho.emplace_back(size_t(T) * hc * d);
    fill(H[s].p, H[s].n, 600 + s, 3);
  }
  DBuf<bf16_t> x(size_t(T) * d), y(size_t(T) * d);
  fill(x.p, x.n, 610, 3);
  DBuf<float> fn(size_t(NM) * hc * d), base(NM), scale(3), nw(d), mprev(size_t(T) * NM), mout(size_t(T) * NM);
  fill(fn.p, fn.n, 611, 5, 0.04f); fill(base.p, NM, 612, 5, 1.f); fill(scale.p, 3, 613, 5, 1.f); fill(nw.p, d, 614, 5, 2.f);
  fill(mprev.p, mprev.n, 615, 5, 0.5f);
  DBuf<uint8_t> ws(gpu::mhc_workspace_bytes(T, d, hc));
  gpu::MhcParams p;
  p.T = T; p.d = d; p.x = x.p; p.mix_prev = mprev.p; p.pre_use = mprev.p; p.pre_stride = NM;
  p.fn = fn.p; p.base = base.p; p.scale = scale.p; p.norm_w = nw.p; p.mix_out = mout.p; p.y = y.p;
  gpu::mhc_set_workspace(p, hc, ws.p);
  Row r{"mhc step", "T=" + std::to_string(T) + " hc=4 d=5120", 0,
        double(T) * (2.0 * 2 * hc * d + 2.0 * d + 4.0 * d + 2.0 * d) + 4.0 * NM * hc * d,
        double(T) * (2.0 * NM * hc * d + 10.0 * hc * d), '-', "post+mixes+pre+norm, 2 kernels"};
  r.us = median_us([&](int i) {
    p.H_in = H[i % ns].p; p.H_out = Ho[i % ns].p;
    GT_OK(gpu::mhc_step(p, hc, nullptr));
  });
  return r;
}

inline void print_rows(const std::vector<Row>& rows, FILE* f) {
  std::fprintf(f, "| op | shape | time (us) | MB moved | GFLOP | TB/s | %% of 4.25 TB/s | TFLOP/s | %% of peak | note |\n");
  std::fprintf(f, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const auto& r : rows) {
    const double tbs = r.bytes / (r.us * 1e-6) / 1e12, tf = r.flops / (r.us * 1e-6) / 1e12;
    const double peak = r.unit == '8' ? kFp8TF : r.unit == 'b' ? kBf16TF : 0;
    char pk[32] = "-", tfs[32] = "-";
    if (r.flops > 0) std::snprintf(tfs, sizeof tfs, "%.1f", tf);
    if (peak > 0) std::snprintf(pk, sizeof pk, "%.1f%% %s", 100 * tf / peak, r.unit == '8' ? "fp8" : "bf16");
    std::fprintf(f, "| %s | %s | %.1f | %.1f | %.2f | %.2f | %.0f%% | %s | %s | %s |\n", r.op.c_str(), r.shape.c_str(),
                 r.us, r.bytes / 1e6, r.flops / 1e9, tbs, 100 * tbs / kCopyTBs, tfs, pk, r.note.c_str());
  }
}

}  // namespace dsv41::gpubench
