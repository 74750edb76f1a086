// The engine behind one lock, for hosts that submit, cancel and read from several threads while one thread
// steps. Every call takes the lock; step() holds it for the whole step, so a call from another thread waits
// at most one step. The lock is recursive: callbacks (they run inside step() on the stepping thread) may call
// back into the SharedEngine.
#pragma once
#include <mutex>
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
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.submit(std::move(r));
  }
  Status cancel(RequestId id) {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.cancel(id);
  }
  Result<RequestInfo> poll(RequestId id) const {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.poll(id);
  }
  Result<std::vector<int32_t>> take_tokens(RequestId id) {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.take_tokens(id);
  }
  Status release(RequestId id) {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.release(id);
  }
  EngineCounts counts() const {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.counts();
  }
  bool idle() const {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.idle();
  }
  void set_session(SessionHooks<State> h) {
    std::lock_guard<std::recursive_mutex> g(mu_);
    e_.set_session(h);
  }
  StepStats step() {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return e_.step();
  }
  // f(Engine<M>&) under the lock, for several calls that must see one state.
  template <class F>
  decltype(auto) with(F&& f) {
    std::lock_guard<std::recursive_mutex> g(mu_);
    return std::forward<F>(f)(e_);
  }

 private:
  mutable std::recursive_mutex mu_;
  Engine<M> e_;
};

}  // namespace dsv41
