// Device memory owned by the CUDA model: DeviceArena (cudaMalloc'd blocks freed together) and Scratch
// (stream-ordered blocks from a memory pool, released at scope end without synchronizing).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/backend/cuda/kernels/common.cuh>

namespace dsv41::gpu {

// Host→device copies through two pinned staging buffers, double-buffered on a stream: the pageable or
// memory-mapped source is copied into one buffer while the other goes over PCIe. Where pinned memory cannot
// be had it falls back to plain cudaMemcpy. Used at load time; finish() waits for the last copy.
class Uploader {
 public:
  explicit Uploader(cudaStream_t s, size_t chunk = size_t(32) << 20) : s_(s), chunk_(chunk) {
    for (int i = 0; i < 2; ++i) {
      if (cudaHostAlloc(&buf_[i], chunk_, cudaHostAllocDefault) != cudaSuccess ||
          cudaEventCreateWithFlags(&ev_[i], cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();  // not sticky: fall back to pageable copies
        release();
        return;
      }
    }
  }
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;
  ~Uploader() {
    if (buf_[0] || buf_[1]) cudaStreamSynchronize(s_);
    release();
  }
  Status copy(void* dst, const void* src, size_t n) {
    if (!buf_[1]) return n ? cuda_status(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "weight upload") : Status::Ok();
    for (size_t o = 0; o < n; o += chunk_) {
      const size_t c = std::min(chunk_, n - o);
      DSV41_CUDA_TRY(cudaEventSynchronize(ev_[cur_]), "weight upload");  // this buffer's last copy is done
      std::memcpy(buf_[cur_], static_cast<const uint8_t*>(src) + o, c);
      DSV41_CUDA_TRY(cudaMemcpyAsync(static_cast<uint8_t*>(dst) + o, buf_[cur_], c, cudaMemcpyHostToDevice, s_),
                     "weight upload");
      DSV41_CUDA_TRY(cudaEventRecord(ev_[cur_], s_), "weight upload");
      cur_ ^= 1;
    }
    return Status::Ok();
  }
  Status finish() { return cuda_status(cudaStreamSynchronize(s_), "weight upload"); }

 private:
  void release() {
    for (int i = 0; i < 2; ++i) {
      if (buf_[i]) cudaFreeHost(buf_[i]);
      if (ev_[i]) cudaEventDestroy(ev_[i]);
      buf_[i] = nullptr;
      ev_[i] = nullptr;
    }
  }
  cudaStream_t s_;
  size_t chunk_;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t ev_[2] = {nullptr, nullptr};
  int cur_ = 0;
};

// cudaMalloc'd blocks owned together (weights, a sequence's caches), freed on destruction.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  DeviceArena(DeviceArena&& o) noexcept : ptrs_(std::move(o.ptrs_)), bytes_(o.bytes_) { o.ptrs_.clear(); o.bytes_ = 0; }
  DeviceArena& operator=(DeviceArena&& o) noexcept {
    std::swap(ptrs_, o.ptrs_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceArena() {
    for (void* p : ptrs_) cudaFree(p);
  }
  template <class T>
  Status alloc(T*& p, size_t count) {
    void* v = nullptr;
    const size_t b = std::max<size_t>(count * sizeof(T), 1);
    DSV41_CUDA_TRY(cudaMalloc(&v, b), "device allocation");
    ptrs_.push_back(v);
    bytes_ += b;
    p = static_cast<T*>(v);
    return Status::Ok();
  }
  template <class T>
  Status upload(const T*& p, const void* src, size_t count, Uploader& up) {
    T* d = nullptr;
    DSV41_TRY(alloc(d, count));
    DSV41_TRY(up.copy(d, src, count * sizeof(T)));
    p = d;
    return Status::Ok();
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<void*> ptrs_;
  size_t bytes_ = 0;
};

// Stream-ordered scratch from a memory pool: every block is released (cudaFreeAsync, no synchronization)
// when the Scratch goes out of scope; later work on the stream reuses it.
class Scratch {
 public:
  Scratch(cudaMemPool_t pool, cudaStream_t s) : pool_(pool), s_(s) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&& o) noexcept : pool_(o.pool_), s_(o.s_), ptrs_(std::move(o.ptrs_)) { o.ptrs_.clear(); }
  Scratch& operator=(Scratch&&) = delete;
  ~Scratch() {
    for (void* p : ptrs_) cudaFreeAsync(p, s_);
  }
  template <class T>
  Status get(T*& p, size_t count) {
    void* v = nullptr;
    DSV41_CUDA_TRY(cudaMallocFromPoolAsync(&v, std::max<size_t>(count * sizeof(T), 16), pool_, s_), "scratch allocation");
    ptrs_.push_back(v);
    p = static_cast<T*>(v);
    return Status::Ok();
  }

 private:
  cudaMemPool_t pool_;
  cudaStream_t s_;
  std::vector<void*> ptrs_;
};

// One stream-ordered block (cudaMallocAsync from the device's default pool), freed with cudaFreeAsync on the
// same stream when the owner goes away: no synchronization either way.
class StreamBlock {
 public:
  StreamBlock() = default;
  StreamBlock(const StreamBlock&) = delete;
  StreamBlock& operator=(const StreamBlock&) = delete;
  StreamBlock(StreamBlock&& o) noexcept : p_(o.p_), s_(o.s_) { o.p_ = nullptr; }
  StreamBlock& operator=(StreamBlock&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(s_, o.s_);
    return *this;
  }
  ~StreamBlock() {
    if (p_) cudaFreeAsync(p_, s_);
  }
  Status alloc(size_t bytes, cudaStream_t s) {
    if (p_) cudaFreeAsync(p_, s_);
    p_ = nullptr;
    s_ = s;
    DSV41_CUDA_TRY(cudaMallocAsync(&p_, std::max<size_t>(bytes, 16), s), "device allocation");
    return Status::Ok();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(p_); }

 private:
  void* p_ = nullptr;
  cudaStream_t s_ = nullptr;
};

}  // namespace dsv41::gpu
