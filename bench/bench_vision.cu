// Vision tower + aligner at the released shape (SPEC §2 vision_config: 32 layers, width 1024, 16 heads,
// MLP 2816, patch 14, downsample 3, ≤ 1024 image tokens; aligner out = the text width 5120), random weights.
// Times one image end to end (patch embed → 32 blocks → final norm → 3×3 merge → aligner) with CUDA events:
// warm-up, then the median of N, at 448×448 (32×32 = 1024 ViT tokens) and at the largest grid that
// max_image_tokens allows (h'·(w'+1) + 2 ≤ 1024 with h' = n_h/3, w' = n_w/3: 93×93 = 8649 tokens), plus one
// layer's ops alone and the attention variants. FLOPs are the nominal 2·m·n·k of every product (attention:
// 4·n²·d; the hi/lo P's second P·V product is not counted); TFLOP/s is also given as a share of 786 (the
// measured BF16 ceiling of this H200).
//   build/gpu/bench_vision [--reps N] [--out FILE.md]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/vision_ops.hpp>

using namespace dsv41;
using gpu::bf16_t;
namespace gv = dsv41::gpu::vision;

namespace {

constexpr double kBf16TF = 786;

#define BV_CHECK(expr)                                                                        \
  do {                                                                                        \
    const ::dsv41::Status bv_s_ = (expr);                                                     \
    if (!bv_s_.ok()) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, bv_s_.to_string().c_str());    \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define BV_CUDA(expr) BV_CHECK(::dsv41::gpu::cuda_status((expr), #expr))

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// BF16 uniform in [mean − a, mean + a].
__global__ void fill_bf16(bf16_t* p, size_t n, uint64_t seed, float a, float mean) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(mix64(seed * 0x9E3779B97F4A7C15ull + i) >> 40) * (1.f / 16777216.f);
    p[i] = __float2bfloat16_rn(mean + a * (2.f * u - 1.f));
  }
}
__global__ void fill_f32(float* p, size_t n, uint64_t seed, float a, float mean) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float u = float(mix64(seed * 0x9E3779B97F4A7C15ull + i) >> 40) * (1.f / 16777216.f);
    p[i] = mean + a * (2.f * u - 1.f);
  }
}
struct Filler {
  uint64_t seed = 1;
  void operator()(bf16_t* p, size_t n, float a, float mean = 0.f) { fill_bf16<<<1024, 256>>>(p, n, seed++, a, mean); }
  void operator()(float* p, size_t n, float a, float mean = 0.f) { fill_f32<<<256, 256>>>(p, n, seed++, a, mean); }
};

// Uniform weights with the variance of N(0, 1/K): a = √(3/K).
void random_weights(gv::Weights& W, Filler& fb) {
  const gv::Dims& v = W.dims;
  Filler& ff = fb;
  auto a = [](int k) { return std::sqrt(3.f / float(k)); };
  fb(W.patch_w, size_t(v.d) * v.patch_in_pad(), a(v.patch_in()));
  fb(W.patch_b, v.d, 0.1f);
  for (gv::Block& b : W.blocks) {
    ff(b.norm1, v.d, 0.1f, 1.f);
    ff(b.norm2, v.d, 0.1f, 1.f);
    fb(b.wqkv, size_t(3) * v.d * v.d, a(v.d));
    fb(b.bqkv, size_t(3) * v.d, 0.1f);
    fb(b.wo, size_t(v.d) * v.d, a(v.d));
    fb(b.bo, v.d, 0.1f);
    fb(b.w1, size_t(2) * v.inter * v.d, a(v.d));
    fb(b.w2, size_t(v.d) * v.inter, a(v.inter));
  }
  ff(W.norm, v.d, 0.1f, 1.f);
  fb(W.al_w1, size_t(v.out_dim) * v.merge_in(), a(v.merge_in()));
  fb(W.al_b1, v.out_dim, 0.1f);
  fb(W.al_w2, size_t(v.out_dim) * v.out_dim, a(v.out_dim));
  fb(W.al_b2, v.out_dim, 0.1f);
}

// Median ms of fn over reps runs after warm runs (each run timed with its own events).
double time_ms(const std::function<void()>& fn, cudaStream_t s, int reps, int warm = 3) {
  for (int i = 0; i < warm; ++i) fn();
  BV_CUDA(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  BV_CUDA(cudaEventCreate(&a));
  BV_CUDA(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    BV_CUDA(cudaEventRecord(a, s));
    fn();
    BV_CUDA(cudaEventRecord(b, s));
    BV_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BV_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Flops {
  double patch = 0, linear = 0, attn = 0, aligner = 0;
  double total() const { return patch + linear + attn + aligner; }
};
Flops flops(const gv::Dims& v, int n_h, int n_w) {
  const double n = double(n_h) * n_w, d = v.d, I = v.inter, c = gv::merged_rows(v, n_h, n_w);
  Flops f;
  f.patch = 2 * n * v.patch_in() * d;
  f.linear = v.layers * 2 * n * (d * 3 * d + d * d + d * 2 * I + I * d);
  f.attn = v.layers * 4 * n * n * d;
  f.aligner = 2 * c * (double(v.merge_in()) * v.out_dim + double(v.out_dim) * v.out_dim);
  return f;
}

// Prints one line and appends it to md.
void row(std::string& md, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void row(std::string& md, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::printf("%s\n", buf);
  md += buf;
  md += "\n";
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--out FILE.md]\n", argv[0]);
      return 2;
    }
  }
  gv::Dims v;  // SPEC §2 vision_config; the presets carry no vision numbers
  v.layers = 32;
  v.d = 1024;
  v.heads = 16;
  v.inter = 2816;
  v.out_dim = 5120;
  BV_CHECK(v.check());
  const int max_image_tokens = 1024;
  // the largest ViT grid whose span h'·(w'+1) + 2 fits max_image_tokens (n_h = 3h', n_w = 3w')
  int best_h = 0, best_w = 0;
  for (int h = 1; h <= max_image_tokens; ++h)
    for (int w = 1; h * (w + 1) + 2 <= max_image_tokens; ++w)
      if (h * w > best_h * best_w || (h * w == best_h * best_w && std::abs(h - w) < std::abs(best_h - best_w))) {
        best_h = h;
        best_w = w;
      }
  struct Size {
    const char* name;
    int n_h, n_w;
  };
  const std::vector<Size> sizes = {{"448x448", 32, 32}, {"largest", 3 * best_h, 3 * best_w}};
  const int max_n = 9 * best_h * best_w;

  cudaDeviceProp prop{};
  BV_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  BV_CUDA(cudaStreamCreate(&s));
  gv::Weights W;
  BV_CHECK(gv::alloc_weights(v, W));
  Filler fill;
  random_weights(W, fill);
  gv::Workspace ws;
  BV_CHECK(ws.init(v, max_n));
  bf16_t *patches = nullptr, *tower = nullptr, *embeds = nullptr;
  BV_CUDA(cudaMalloc(&patches, size_t(max_n) * v.patch_in() * 2));
  BV_CUDA(cudaMalloc(&tower, size_t(max_n) * v.d * 2));
  BV_CUDA(cudaMalloc(&embeds, size_t(gv::Workspace::max_cells(v, max_n)) * v.out_dim * 2));
  fill(patches, size_t(max_n) * v.patch_in(), 1.f);
  BV_CUDA(cudaDeviceSynchronize());
  std::printf("weights %.2f GB; vision %d layers, width %d, %d heads, MLP %d; aligner → %d\n", W.mem.bytes() / 1e9,
              v.layers, v.d, v.heads, v.inter, v.out_dim);

  // one full run first, so that every buffer holds the values of a real image
  BV_CHECK(gv::encode(ws, W, patches, sizes[1].n_h, sizes[1].n_w, embeds, s, tower));
  BV_CUDA(cudaStreamSynchronize(s));
  std::string md;  // the table as markdown
  const gv::AttnOpts variants[4] = {{16, false}, {32, false}, {16, true}, {32, true}};
  auto vname = [](const gv::AttnOpts& o) {
    return std::string(o.rows_per_warp == 16 ? "16 rows/warp" : "32 rows/warp") + (o.bf16_p ? ", P bf16" : ", P hi/lo");
  };

  row(md, "| image | ViT tokens | image rows | what | ms (median) | TFLOP/s | of 786 |");
  row(md, "|---|---|---|---|---|---|---|");
  for (const Size& z : sizes) {
    const int n = z.n_h * z.n_w, rows = gv::merged_rows(v, z.n_h, z.n_w);
    const int span = ((z.n_h + v.ratio - 1) / v.ratio) * ((z.n_w + v.ratio - 1) / v.ratio + 1) + 2;
    std::printf("%s: %dx%d patches = %d ViT tokens, %d image rows, span of %d tokens\n", z.name, z.n_h, z.n_w, n, rows,
                span);
    const Flops f = flops(v, z.n_h, z.n_w);
    const int r = n > 2048 ? std::max(3, reps / 4) : reps;
    // attention variants, one layer's call
    double best_ms = 1e30;
    gv::AttnOpts best{};
    for (const gv::AttnOpts& o : variants) {
      const double ms = time_ms([&] { BV_CHECK(gv::attention(v, ws.qkv, n, ws.att, s, o)); }, s, r);
      const double fl = f.attn / v.layers;
      row(md, "| %s (%dx%d) | %d | %d | attention, %s | %.3f | %.0f | %.2f |", z.name, z.n_h, z.n_w, n, rows, vname(o).c_str(),
          ms, fl / ms / 1e9, fl / ms / 1e9 / kBf16TF);
      if (!o.bf16_p && ms < best_ms) {
        best_ms = ms;
        best = o;
      }
    }
    // one layer's ops alone (default attention)
    const gv::Block& b = W.blocks[0];
    const double nd = double(n) * v.d;
    struct Op {
      const char* name;
      double fl;
      std::function<void()> fn;
    };
    const std::vector<Op> ops = {
        {"norm1", 0, [&] { BV_CHECK(gv::norm(v, b.norm1, ws.x, n, ws.h, s)); }},
        {"qkv GEMM", 2 * nd * 3 * v.d, [&] { BV_CHECK(gv::qkv(ws, v, b, ws.h, n, ws.qkv, s)); }},
        {"rope2d", 0, [&] { BV_CHECK(gv::rope2d(v, ws.qkv, z.n_h, z.n_w, s)); }},
        {"wo GEMM + add", 2 * nd * v.d, [&] { BV_CHECK(gv::wo(ws, v, b, ws.att, n, ws.x, s)); }},
        {"mlp (w1, silu·u, w2, add)", 2 * nd * 3.0 * v.inter, [&] { BV_CHECK(gv::mlp(ws, v, b, ws.h, n, ws.x, s)); }},
    };
    for (const Op& op : ops) {
      const double ms = time_ms(op.fn, s, r);
      if (op.fl > 0)
        row(md, "| %s | %d | %d | layer op: %s | %.3f | %.0f | %.2f |", z.name, n, rows, op.name, ms, op.fl / ms / 1e9,
            op.fl / ms / 1e9 / kBf16TF);
      else
        row(md, "| %s | %d | %d | layer op: %s | %.3f | - | - |", z.name, n, rows, op.name, ms);
    }
    // the whole image, default attention and the fastest hi/lo variant
    for (const gv::AttnOpts& o : {gv::AttnOpts{}, best}) {
      const double ms = time_ms([&] { BV_CHECK(gv::encode(ws, W, patches, z.n_h, z.n_w, embeds, s, tower, o)); }, s, r, 2);
      row(md, "| %s (%dx%d) | %d | %d | **whole image** (%s) | %.2f | %.0f | %.2f |", z.name, z.n_h, z.n_w, n, rows,
          vname(o).c_str(), ms, f.total() / ms / 1e9, f.total() / ms / 1e9 / kBf16TF);
    }
    row(md, "| %s | %d | %d | nominal GFLOP: patch %.1f, linears %.1f, attention %.1f, aligner %.1f | | | |", z.name, n, rows,
        f.patch / 1e9, f.linear / 1e9, f.attn / 1e9, f.aligner / 1e9);
  }
  BV_CUDA(cudaDeviceSynchronize());
  if (!out.empty()) {
    if (FILE* fp = std::fopen(out.c_str(), "w")) {
      std::fputs(md.c_str(), fp);
      std::fclose(fp);
    }
  }
  cudaFree(patches);
  cudaFree(tower);
  cudaFree(embeds);
  cudaStreamDestroy(s);
  return 0;
}
