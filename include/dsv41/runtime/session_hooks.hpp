// A session store seen through function pointers + ctx (session/session_cache.hpp behind them), so that the text
// model and the engine need nothing of it.
#pragma once
#include <cstdint>
#include <span>

#include <dsv41/core/status.hpp>

namespace dsv41 {

template <class State>
struct SessionHooks {
  void* ctx = nullptr;
  int block = 0;  // tokens per block; 0: no session store
  // Puts the longest stored prefix of ids back into the fresh state st (leaving at least one token to run);
  // returns how many tokens it holds then.
  Result<int64_t> (*resume)(void* ctx, State& st, std::span<const int32_t> ids) = nullptr;
  // st stands at a block boundary; tokens: every token it processed.
  Status (*boundary)(void* ctx, const State& st, std::span<const int32_t> tokens) = nullptr;
  // Optional: the request is over; st (which processed exactly tokens) is handed over for a later request to continue.
  void (*finish)(void* ctx, State&& st, std::span<const int32_t> tokens) = nullptr;
};

}  // namespace dsv41
