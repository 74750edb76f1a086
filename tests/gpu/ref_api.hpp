// The CPU reference (include/dsv41/backend/cpu/) as seen from the GPU checks. The .cu files must not include
// nlohmann-json, which cpu/ops.hpp pulls in through model/weights.hpp, so the reference is compiled in a
// host-only translation unit (tests/gpu/ref_cpu.cpp) and reached through this table of plain functions.
// The table is a weak symbol: a GPU test binary built without ref_cpu.cpp links, and its checks fail
// with "CPU reference not linked" instead of passing vacuously.
#pragma once
#include <cstdint>
#include <vector>

namespace dsv41::gputest {

enum class RefW : int { BF16 = 0, FP8 = 1, FP4 = 2 };
enum class RefLin : int { Auto = 0, NoQuant = 1, F32 = 2 };

struct MoeRefIn {
  int T, d, E, k, I;
  float route_scale, limit;
  bool norm_topk;
  const float* x;           // [T, d] (BF16 values)
  const uint16_t* gate;     // BF16 bits [E, d]
  const float* bias;        // [E]
  const uint8_t *w1, *w1s, *w3, *w3s, *w2, *w2s;  // FP4 experts, contiguous per expert
  const uint8_t *s1, *s1s, *s3, *s3s, *s2, *s2s;  // FP8 shared expert
};

struct IndexRefIn {
  int S, d, q_lora, nI, dI, K, ratio;
  int64_t p0;
  const float* x;        // [S, d]
  const float* qr;       // [S, q_lora]
  const uint8_t *wq_b, *wq_b_s;  // FP8 [nI·dI, q_lora]
  const uint16_t* wproj;         // BF16 [nI, d]
  const uint8_t* keys;           // packed index keys [n]
  int n;
  int rope_dim;
  double theta, factor, beta_fast, beta_slow, original;
};

struct RefApi {
  void (*rmsnorm)(const float* x, const float* w, int rows, int n, float eps, float* y);
  void (*linear)(RefW kind, const void* w, const uint8_t* s, int N, int K, const float* x, int M, float* y, RefLin mode);
  void (*route)(const float* logits, const float* bias, int E, int k, bool norm, float scale, int* sel, float* w);
  void (*moe)(const MoeRefIn& in, float* out);
  void (*sparse_attention)(const float* q, int H, int D, const std::vector<const float*>& entries, const float* sink,
                           float scale, float* out);
  std::vector<int32_t> (*topk_row)(const float* score, int n, int k);
  std::vector<float> (*rope_freqs)(int rd, double theta, bool yarn, double factor, double beta_fast, double beta_slow,
                                   double original);
  // scores [S, n] (−inf where not eligible) and lists [S, K] (−1 padded)
  void (*index_select)(const IndexRefIn& in, std::vector<float>& scores, std::vector<int32_t>& lists);
  void (*hc_mixes)(const float* Hrow, int hc, int d, const float* fn, const float* base, const float* scale,
                   float norm_eps, int iters, float hc_eps, float* pre, float* post, float* comb);
  void (*hc_pre)(const float* Hrow, const float* pre, int hc, int d, float* y);
  void (*hc_post)(const float* x, const float* Hrow, const float* post, const float* comb, int hc, int d, float* out);
};

}  // namespace dsv41::gputest

// Defined in tests/gpu/ref_cpu.cpp.
extern "C" const dsv41::gputest::RefApi* dsv41_gpu_cpu_reference() __attribute__((weak));
