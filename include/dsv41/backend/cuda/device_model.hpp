// The model on one GPU, the part every op shares: shape, schedule, Engram tables, the weights in device memory,
// the stream and its scratch pool, and the GEMM, norm and RoPE launchers (tensor-core kernels where the shape
// fits, simple kernels otherwise). Weight upload: backend/cuda/upload.hpp.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/blaslt.hpp>
#include <dsv41/backend/cuda/device_memory.hpp>
#include <dsv41/backend/cuda/device_weights.hpp>
#include <dsv41/backend/cuda/kernels/common.cuh>
#include <dsv41/backend/cuda/kernels/gemm.cuh>
#include <dsv41/backend/cuda/kernels/gemm_f32.cuh>
#include <dsv41/backend/cuda/kernels/glue.cuh>
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/backend/cuda/kernels/rmsnorm.cuh>
#include <dsv41/backend/cuda/kernels/rope.cuh>
#include <dsv41/backend/cuda/op_timer.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/blocks/kv_cache.hpp>
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/engram/hash.hpp>
#include <dsv41/numeric/formats.hpp>

namespace dsv41::gpu {

class DeviceModel {
 public:
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;
  ~DeviceModel() {
    if (pool_) cudaMemPoolDestroy(pool_);
  }

  const ModelShape& shape() const { return s_; }
  const std::vector<LayerRole>& schedule() const { return sched_; }
  cudaStream_t stream() const { return stream_; }
  size_t weight_bytes() const { return wmem_.bytes(); }
  // A fresh sequence able to hold max_positions tokens (allocates; synchronizes once).
  Result<DeviceSequence> new_sequence(int64_t max_positions) const {
    if (max_positions < 1) return error(Code::invalid_argument, "new_sequence: max_positions < 1");
    DeviceSequence q;
    q.max_positions = max_positions;
    q.owner_ = this;
    q.layers.resize(sched_.size());
    const int W = s_.sliding_window, D = s_.head_dim, dI = s_.index_head_dim;
    const int we = kv::WindowEntry::bytes(D), me = kv::MainKvEntry::bytes(D), ie = kv::IndexKey::bytes(dI);
    for (const auto& r : sched_) {
      DeviceLayerState& ls = q.layers[r.id];
      DSV41_TRY(q.mem_.alloc(ls.ring, size_t(W) * we));
      DSV41_CUDA_TRY(cudaMemset(ls.ring, 0, size_t(W) * we), "ring init");
      q.window_bytes_ += size_t(W) * we;
      if (r.mode == AttnMode::Full) {
        ls.cap = max_positions / r.ratio;
        DSV41_TRY(q.mem_.alloc(ls.comp, size_t(ls.cap) * me));
        DSV41_TRY(q.mem_.alloc(ls.ikeys, size_t(ls.cap) * ie));
        q.global_bytes_ += size_t(ls.cap) * (me + ie);
        if (r.ratio > 1) {
          DSV41_TRY(q.mem_.alloc(ls.pend_kv, size_t(r.ratio) * D));
          DSV41_TRY(q.mem_.alloc(ls.pend_score, size_t(r.ratio) * D));
        }
      }
    }
    return Result<DeviceSequence>(std::move(q));
  }

  // Whether st was made by this model.
  bool owns(const DeviceSequence& st) const { return st.owner() == static_cast<const void*>(this); }

  // Per-section GPU timing of later forwards (a diagnostic, op_timer.hpp); nullptr turns it off.
  void set_timer(OpTimer* t) { timer_ = t; }

 protected:
  struct GlobalWeights {
    DLinear embed, head;
    const float* norm = nullptr;
  };

  DeviceModel(const ModelShape& s, engram::Setup eg, cudaStream_t stream)
      : s_(s), sched_(make_schedule(s)), token_map_(std::move(eg.token_map)), plan_(std::move(eg.plan)), stream_(stream) {}

  // The stream-ordered pool scratch comes from (freed blocks stay in it between steps).
  Status create_pool() {
    int dev = 0;
    DSV41_CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    DSV41_CUDA_TRY(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    uint64_t keep = ~uint64_t(0);
    DSV41_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep), "pool attribute");
    return Status::Ok();
  }

  Scratch scratch() const { return Scratch(pool_, stream_); }

  // The cuBLASLt handle (wo_a at prefill, wo_a_blas.hpp), made on first use; never while the stream is being
  // captured (its workspace allocation would break the capture). False where it cannot be made: the callers
  // then take the tiled kernel, the same math.
  bool blas_ready() const {
    if (blas_.ready()) return true;
    if (blas_failed_) return false;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return false;
    blas_failed_ = !blas_.init().ok();
    return !blas_failed_;
  }

  // From this many rows on, the FP32-accumulating linears use the tiled kernel (gemm_f32.cuh); below, one warp
  // per output streams each weight row once. wo_a takes the rows kernel up to 64 rows (glue::wo_a_rows), cuBLASLt
  // above (wo_a_blas), and this threshold only for shapes neither takes.
  // Below kTiledMinCtas tiles (narrow outputs: the ratio-2 compressor's 512 FP32 columns) the tiled kernel
  // leaves most of the GPU idle, and the warp kernel is used too.
  static constexpr int kTiledRows = 4, kTiledRowsWoA = 17, kTiledMinCtas = 128;
  float eps() const { return float(s_.rms_norm_eps); }
  void mark(const char* name) const {
    if (timer_) timer_->mark(name, stream_);
  }
  int n_taps() const { return int(s_.dspark_target_layer_ids.size()); }
  size_t hash_cols() const { return plan_.layers.empty() ? 0 : size_t(plan_.n_layers() * plan_.cols()); }

  Status act_quant(const bf16_t* x, int M, int K, uint8_t*& c, uint8_t*& e, Scratch& sc) const {
    DSV41_TRY(sc.get(c, size_t(M) * K));
    DSV41_TRY(sc.get(e, size_t(M) * (K / 32)));
    return act_quant_fp8(x, K, M, K, c, e, nullptr, stream_);
  }
  Status linear_fp8(const uint8_t* xc, const uint8_t* xe, int M, const DLinear& W, bf16_t* y, int64_t ldy) const {
    if (W.kind != WKind::FP8) return error(Code::internal, "linear_fp8: not an FP8 weight");
    const int N = W.out, K = W.in;
    if (N % 16 == 0) {
      Scratch sc(pool_, stream_);
      const size_t wsb = gemm_workspace_bytes(M, N, K);
      float* ws = nullptr;
      if (wsb) DSV41_TRY(sc.get(ws, wsb / 4));
      return gemm_fp8(xc, xe, M, W.w, W.s, N, K, y, ldy, ws, wsb, stream_);
    }
    glue::linear_fp8_simple_kernel<<<glue::blocks_for(int64_t(M) * N * 32), glue::kThreads, 0, stream_>>>(xc, xe, W.w, W.s, M,
                                                                                                   N, K, y, ldy);
    return launch_status("linear fp8 (simple)");
  }
  // x BF16 [M, K] dense; W BF16; FP32 (yf) or BF16 (yb) out. FP32 outputs (head, compressor at ratio > 1:
  // SPEC's FP32 linears) use the CUDA-core FMA kernel: the BF16 tensor-core GEMM accumulates with
  // truncation (relative errors up to ~3e-4 measured), far from FP32.
  Status linear_bf16(const bf16_t* x, int M, const DLinear& W, float* yf, bf16_t* yb, int64_t ldy) const {
    if (W.kind != WKind::BF16) return error(Code::internal, "linear_bf16: not a BF16 weight");
    const int N = W.out, K = W.in;
    if (!yf && N % 16 == 0 && K % 32 == 0) {
      Scratch sc(pool_, stream_);
      const size_t wsb = gemm_workspace_bytes(M, N, K);
      float* ws = nullptr;
      if (wsb) DSV41_TRY(sc.get(ws, wsb / 4));
      return gemm_bf16(x, M, W.bf16(), N, K, yf, yb, ldy, ws, wsb, stream_);
    }
    if (M >= kTiledRows && gemm_f32_ctas(M, N, 1) >= kTiledMinCtas) {  // the head of a batch, drafts, prefill
      GemmF32Params gp;
      gp.A = x;
      gp.lda = K;
      gp.W = W.w;
      gp.M = M;
      gp.N = N;
      gp.K = K;
      gp.yf = yf;
      gp.yb = yb;
      gp.ldy = ldy;
      return gemm_f32(gp, stream_);
    }
    glue::linear_bf16_simple_kernel<<<glue::blocks_for(int64_t(M) * N * 32), glue::kThreads, 0, stream_>>>(
        x, K, W.bf16(), M, N, K, yf, yb, ldy);
    return launch_status("linear bf16 (simple)");
  }
  Status norm(const bf16_t* x, const float* w, int rows, int n, bf16_t* y) const {
    return rmsnorm(x, n, w, rows, n, eps(), y, n, stream_);
  }
  Status rope_rows(bf16_t* x, int rows, int heads, int dh, const DLayer& w, int64_t p0, bool inverse = false) const {
    return rope(x, rows, heads, dh, s_.qk_rope_head_dim, w.rope_freqs, p0, inverse, stream_);
  }

  // Host bytes to the device: as kernel parameters up to 48 KiB (asynchronous, capturable in a CUDA graph),
  // else by a copy (pageable: may wait for the stream; large prefill inputs only).
  Status put_bytes(const void* src, size_t n, void* dst) const {
    constexpr size_t kChunk = glue::ParamBytes::kBytes;
    if (n > 16 * kChunk) {
      DSV41_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "input upload");
      return Status::Ok();
    }
    for (size_t o = 0; o < n; o += kChunk) {
      glue::ParamBytes v;
      v.n = int(std::min(kChunk, n - o));
      std::memcpy(v.b, static_cast<const uint8_t*>(src) + o, size_t(v.n));
      glue::param_bytes_kernel<<<1, 256, 0, stream_>>>(v, static_cast<uint8_t*>(dst) + o);
      DSV41_TRY(launch_status("inputs"));
    }
    return Status::Ok();
  }

  ModelShape s_;
  std::vector<LayerRole> sched_;
  std::vector<int32_t> token_map_;
  engram::HashPlan plan_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  DeviceArena wmem_;
  OpTimer* timer_ = nullptr;
  mutable BlasLt blas_;  // used on stream_ only
  mutable bool blas_failed_ = false;
  GlobalWeights w_;
  std::vector<DLayer> layers_;
};

}  // namespace dsv41::gpu
