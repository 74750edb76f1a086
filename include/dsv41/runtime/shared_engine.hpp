// The engine behind one lock, for hosts that submit, cancel and read from several threads while one thread
// steps. Every call takes the lock; step() holds it for the whole step and lets waiting callers in before the
// next one (a mutex is not fair: a thread stepping in a loop would otherwise take it again at once), so a call
// from another thread waits at most about one step. The lock is recursive: callbacks (they run inside step()
// on the stepping thread) may call back into the SharedEngine.
#pragma once
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <dsv41/runtime/engine.hpp>

namespace dsv41 {

template <class M>
class SharedEngine {
 public:
  using State = typename M::State;

  explicit SharedEngine(Engine<M>&& e) : e_(std::move(e)) {}
  SharedEngine(const SharedEngine&) = delete;
  SharedEngine& operator=(const SharedEngine&) = delete;

  Result<RequestId> submit(Request r) {
    Turn g(*this);
    return e_.submit(std::move(r));
  }
  Status cancel(RequestId id) {
    Turn g(*this);
    return e_.cancel(id);
  }
  Result<RequestInfo> poll(RequestId id) const {
    Turn g(*this);
    return e_.poll(id);
  }
  Result<std::vector<int32_t>> take_tokens(RequestId id) {
    Turn g(*this);
    return e_.take_tokens(id);
  }
  Status release(RequestId id) {
    Turn g(*this);
    return e_.release(id);
  }
  EngineCounts counts() const {
    Turn g(*this);
    return e_.counts();
  }
  bool idle() const {
    Turn g(*this);
    return e_.idle();
  }
  void set_session(SessionHooks<State> h) {
    Turn g(*this);
    e_.set_session(h);
  }
  StepStats step() {
    for (int i = 0; waiting_.load(std::memory_order_acquire) > 0 && i < 100000; ++i) std::this_thread::yield();
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.step();
  }
  // f(Engine<M>&) under the lock, for several calls that must see one state.
  template <class F>
  decltype(auto) with(F&& f) {
    Turn g(*this);
    return std::forward<F>(f)(e_);
  }

 private:
  // The lock for a call other than step(), announced so that step() waits for it.
  struct Turn {
    explicit Turn(const SharedEngine& s) : s_(s) {
      s_.waiting_.fetch_add(1, std::memory_order_acq_rel);
      s_.mu_.lock();
      s_.waiting_.fetch_sub(1, std::memory_order_acq_rel);
    }
    ~Turn() { s_.mu_.unlock(); }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;
    const SharedEngine& s_;
  };

  mutable std::recursive_mutex mu_;
  mutable std::atomic<int> waiting_{0};
  Engine<M> e_;
};

}  // namespace dsv41
