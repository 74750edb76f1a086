// Device memory owned by the CUDA model: DeviceArena (cudaMalloc'd blocks freed together) and Scratch
// (stream-ordered blocks from a memory pool, released at scope end without synchronizing).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/cuda/common.cuh>

namespace dsv41::gpu {

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
  Status upload(const T*& p, const void* src, size_t count) {
    T* d = nullptr;
    DSV41_TRY(alloc(d, count));
    if (count) DSV41_CUDA_TRY(cudaMemcpy(d, src, count * sizeof(T), cudaMemcpyHostToDevice), "weight upload");
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
