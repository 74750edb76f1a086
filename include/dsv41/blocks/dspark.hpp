// SPEC §4.9 the DSpark drafter, written once over a backend's ops: after the main model predicted y for position
// st.pos, the block [y, noise, ...] runs through the draft stages (mHC blocks whose attention reads the stage's
// ring, seeded from the main model's taps, and the block itself), then the shared head, the Markov bias and the
// confidence head.
#pragma once
#include <dsv41/blocks/hooks.hpp>
#include <dsv41/blocks/layer_unit.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::blocks {

template <class Ops, class Out>
Status dspark_draft(const Ops& ops, const typename Ops::State& st, int32_t y, Out&& out,
                    const ForwardHooks* hooks = nullptr) {
  const ModelShape& s = ops.shape();
  if (s.n_dspark() == 0) return error(Code::unsupported, "draft: this model has no DSpark stages");
  DSV41_TRY(ops.check_state(st));
  if (st.pos == 0) return error(Code::invalid_argument, "draft: run the prompt first");
  if (y < 0 || y >= s.vocab_size) return error(Code::invalid_argument, "draft: token outside the vocabulary");
  auto d = ops.draft_block(st, y);
  if (!d.ok()) return d.status();
  const int64_t p = st.pos - 1;  // the last position the main model processed
  for (int stage = 0; stage < s.n_dspark(); ++stage) {
    const int l = s.num_hidden_layers + stage;
    DSV41_TRY(ops.observe_stage(hooks, stage, d->streams));
    DSV41_TRY(mhc_block(ops, l, d->streams, nullptr,
                        [&](auto x, auto o) { return ops.draft_attention(st, l, x, p, o); }));
  }
  DSV41_TRY(ops.observe_stage(hooks, s.n_dspark(), d->streams));
  return ops.draft_head(*d, out);
}

}  // namespace dsv41::blocks
