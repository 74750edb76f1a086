// BF16 linear through cuBLASLt: y[M, N] = bf16(x[M, K] · W[N, K]ᵀ (+ bias[N])), FP32 accumulation, the bias
// added in FP32 before the one rounding (CUBLASLT_EPILOGUE_BIAS). One handle, one workspace and a per-shape
// plan cache (descriptors + the heuristic's first algorithm), owned by the object: no globals. Not for use
// from two streams at once (the workspace is shared). Pointers must be 16-byte aligned, leading dimensions
// multiples of 8 elements (the callers pad where the natural K is not).
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/core/status.hpp>

namespace dsv41::gpu {

inline Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  const Code c = s == CUBLAS_STATUS_ALLOC_FAILED ? Code::out_of_memory
                 : s == CUBLAS_STATUS_NOT_SUPPORTED ? Code::unsupported
                 : s == CUBLAS_STATUS_INVALID_VALUE ? Code::invalid_argument
                                                    : Code::internal;
  return Status(c, std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

#define DSV41_CUBLAS_TRY(expr, what)                                          \
  do {                                                                        \
    const cublasStatus_t dsv41_cublas_s_ = (expr);                            \
    if (dsv41_cublas_s_ != CUBLAS_STATUS_SUCCESS) return ::dsv41::gpu::cublas_status(dsv41_cublas_s_, what); \
  } while (0)

class BlasLt {
 public:
  BlasLt() = default;
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;
  ~BlasLt() { release(); }

  // Creates the handle and a device workspace of ws_bytes (32 MiB is plenty for Hopper's kernels).
  Status init(size_t ws_bytes = size_t(32) << 20) {
    release();
    DSV41_CUBLAS_TRY(cublasLtCreate(&h_), "cublasLtCreate");
    if (ws_bytes) DSV41_CUDA_TRY(cudaMalloc(&ws_, ws_bytes), "cuBLASLt workspace");
    ws_bytes_ = ws_bytes;
    return Status::Ok();
  }
  bool ready() const { return h_ != nullptr; }

  // y [M, N] (row stride ldy) = x [M, K] (row stride ldx) · W [N, K]ᵀ (+ bias [N]), all BF16.
  Status linear(const bf16_t* x, int64_t ldx, int M, const bf16_t* w, int N, int K, const bf16_t* bias, bf16_t* y,
                int64_t ldy, cudaStream_t stream) {
    if (!h_) return bad_arg("BlasLt: not initialised");
    if (M < 0 || N <= 0 || K <= 0 || ldx < K || ldy < N) return bad_arg("BlasLt::linear: bad shape");
    if (M == 0) return Status::Ok();
    Plan* p = nullptr;
    DSV41_TRY(plan(M, N, K, ldx, ldy, bias != nullptr, p));
    if (bias) {
      const void* b = bias;
      DSV41_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)),
                       "cuBLASLt bias pointer");
    }
    const float alpha = 1.f, beta = 0.f;
    // Column-major view: yᵀ [N, M] = (W as K×N)ᵀ · (x as K×M).
    DSV41_CUBLAS_TRY(cublasLtMatmul(h_, p->op, &alpha, w, p->a, x, p->b, &beta, y, p->c, y, p->c, &p->algo, ws_,
                                    ws_bytes_, stream),
                     "cublasLtMatmul");
    return Status::Ok();
  }

 private:
  struct Plan {
    int M, N, K;
    int64_t ldx, ldy;
    bool bias;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  Status plan(int M, int N, int K, int64_t ldx, int64_t ldy, bool bias, Plan*& out) {
    for (Plan& p : plans_)
      if (p.M == M && p.N == N && p.K == K && p.ldx == ldx && p.ldy == ldy && p.bias == bias) {
        out = &p;
        return Status::Ok();
      }
    Plan p{M, N, K, ldx, ldy, bias};
    const Status s = make(p);
    if (!s.ok()) {
      destroy(p);
      return s;
    }
    if (plans_.size() >= kMaxPlans) {  // prefill chunks come in many row counts: keep the cache bounded
      destroy(plans_.front());
      plans_.erase(plans_.begin());
    }
    plans_.push_back(p);
    out = &plans_.back();
    return Status::Ok();
  }

  Status make(Plan& p) {
    DSV41_CUBLAS_TRY(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cuBLASLt desc");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    DSV41_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "cuBLASLt desc");
    DSV41_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "cuBLASLt desc");
    if (p.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bt = CUDA_R_16BF;
      DSV41_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                       "cuBLASLt epilogue");
      DSV41_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
                       "cuBLASLt bias type");
    }
    DSV41_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(p.K), uint64_t(p.N), int64_t(p.K)),
                     "cuBLASLt layout");
    DSV41_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(p.K), uint64_t(p.M), p.ldx), "cuBLASLt layout");
    DSV41_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, uint64_t(p.N), uint64_t(p.M), p.ldy), "cuBLASLt layout");
    cublasLtMatmulPreference_t pref = nullptr;
    DSV41_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref), "cuBLASLt preference");
    const uint64_t wsb = ws_bytes_;
    cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(h_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    DSV41_TRY(cublas_status(st, "cuBLASLt heuristic"));
    if (found < 1)
      return Status(Code::unsupported, "cuBLASLt: no algorithm for M=" + std::to_string(p.M) + " N=" +
                                           std::to_string(p.N) + " K=" + std::to_string(p.K));
    p.algo = res.algo;
    return Status::Ok();
  }

  static void destroy(Plan& p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p.a = p.b = p.c = nullptr;
    p.op = nullptr;
  }
  void release() {
    for (Plan& p : plans_) destroy(p);
    plans_.clear();
    if (ws_) cudaFree(ws_);
    if (h_) cublasLtDestroy(h_);
    ws_ = nullptr;
    h_ = nullptr;
    ws_bytes_ = 0;
  }

  cublasLtHandle_t h_ = nullptr;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  static constexpr size_t kMaxPlans = 64;
  std::vector<Plan> plans_;  // pointers into it are used only within one call
};

}  // namespace dsv41::gpu
