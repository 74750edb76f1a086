// Where a forward's GPU time goes: with a timer set (gpu::ForwardT::set_timer), the forward records a CUDA
// event at the start of each section on its stream, and the time between consecutive marks is charged to
// the section that began at the first. A diagnostic for benchmarks (two event records per section, and the
// marks serialize nothing), not for serving.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

class OpTimer {
 public:
  OpTimer() = default;
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;
  ~OpTimer() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }

  // A section named `name` begins now on stream s.
  void mark(const char* name, cudaStream_t s) {
    if (used_ == pool_.size()) {
      cudaEvent_t e = nullptr;
      if (cudaEventCreate(&e) != cudaSuccess) return;
      pool_.push_back(e);
    }
    cudaEventRecord(pool_[used_], s);
    names_.emplace_back(name);
    ++used_;
  }

  // Waits for the marks so far (closing the last section with `end` on s) and adds their times (ms) into
  // totals by section name; then starts over.
  Status collect(cudaStream_t s, std::map<std::string, double>& totals) {
    mark("end", s);
    DSV41_CUDA_TRY(cudaStreamSynchronize(s), "op timer");
    for (size_t i = 0; i + 1 < used_; ++i) {
      float ms = 0;
      DSV41_CUDA_TRY(cudaEventElapsedTime(&ms, pool_[i], pool_[i + 1]), "op timer");
      totals[names_[i]] += ms;
    }
    used_ = 0;
    names_.clear();
    return Status::Ok();
  }

 private:
  std::vector<cudaEvent_t> pool_;
  std::vector<std::string> names_;
  size_t used_ = 0;
};

}  // namespace dsv41::gpu
