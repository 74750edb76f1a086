// An in-process Communicator for N ranks that are threads of one process, over host memory: the CPU tests' (and
// any host's) way to run a model split over ranks without devices. A ThreadGroup holds the shared slots; each
// thread takes its rank's ThreadComm. Sums run in rank order (0, 1, ..., N−1) on every rank, so every rank gets
// the same bits. Every collective is two barriers: all buffers published, all read.
#pragma once
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <dsv41/numeric/formats.hpp>
#include <dsv41/parallel/communicator.hpp>

namespace dsv41::parallel {

class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n < 1 ? 1 : n), slots_(size_t(n_)) {}
  int size() const { return n_; }

  // Blocks until all n ranks arrived.
  void barrier() {
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return gen_ != gen; });
  }

  struct Slot {
    const void* send = nullptr;
    size_t count = 0;
    Elem t = Elem::f32;
  };
  Slot& slot(int r) { return slots_[size_t(r)]; }

  // Counts and types agree on every rank (read between the barriers).
  Status check(size_t count, Elem t) const {
    for (const Slot& s : slots_)
      if (s.count != count || s.t != t)
        return error(Code::invalid_argument, "ThreadComm: ranks called a collective with different counts or types");
    return Status::Ok();
  }

 private:
  int n_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t gen_ = 0;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(ThreadGroup& g, int rank) : g_(&g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size(); }

  Status all_reduce_sum(void* buf, size_t count, Elem t, void*) override {
    publish(buf, count, t);
    Status ok = g_->check(count, t);
    std::vector<float> acc;
    if (ok.ok()) {
      acc.assign(count, 0.f);
      for (int r = 0; r < size(); ++r) {  // rank order
        const void* src = g_->slot(r).send;
        for (size_t i = 0; i < count; ++i) acc[i] = r == 0 ? load(src, i, t) : acc[i] + load(src, i, t);
      }
    }
    g_->barrier();  // every rank read every buffer
    if (!ok.ok()) return ok;
    for (size_t i = 0; i < count; ++i) store(buf, i, t, acc[i]);
    return Status::Ok();
  }

  Status all_gather(const void* send, void* recv, size_t count, Elem t, void*) override {
    publish(send, count, t);
    Status ok = g_->check(count, t);
    if (ok.ok()) {
      const size_t b = count * elem_bytes(t);
      for (int r = 0; r < size(); ++r)
        std::memcpy(static_cast<uint8_t*>(recv) + size_t(r) * b, g_->slot(r).send, b);
    }
    g_->barrier();
    return ok;
  }

 private:
  void publish(const void* p, size_t count, Elem t) {
    g_->slot(rank_) = {p, count, t};
    g_->barrier();  // every rank published
  }
  static float load(const void* p, size_t i, Elem t) {
    if (t == Elem::f32) return static_cast<const float*>(p)[i];
    return num::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  static void store(void* p, size_t i, Elem t, float v) {
    if (t == Elem::f32) static_cast<float*>(p)[i] = v;
    else static_cast<uint16_t*>(p)[i] = num::bf16_bits(v);
  }

  ThreadGroup* g_;
  int rank_;
};

// The communicators of one group, rank r at [r].
inline std::vector<std::unique_ptr<ThreadComm>> make_thread_comms(ThreadGroup& g) {
  std::vector<std::unique_ptr<ThreadComm>> v;
  for (int r = 0; r < g.size(); ++r) v.push_back(std::make_unique<ThreadComm>(g, r));
  return v;
}

}  // namespace dsv41::parallel
