// The model's entry points over a backend's ops: a forward of one sequence's ids (prefill chunk or decode),
// SPEC §5 window replay, and a decode step of several sequences. Input checks, the order (blocks/stack.hpp) and
// the state's advance are the same on every backend; the backend supplies the batch and its error guard.
#pragma once
#include <span>

#include <dsv41/blocks/forward_types.hpp>
#include <dsv41/blocks/stack.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::blocks {

// Runs ids at st.pos.. and advances st. out: where the backend writes logits (every row when o.all_logits, else
// the last). On error the state is as before, or marked damaged where the backend cannot put it back.
template <class Ops, class Out>
Status forward(const Ops& ops, typename Ops::State& st, std::span<const int32_t> ids, const ForwardOptions& o, Out&& out) {
  const ModelShape& s = ops.shape();
  DSV41_TRY(ops.check_state(st));
  DSV41_TRY(check_tokens(s, ids, st.pos + int64_t(ids.size()), st.max_positions));
  if (o.bounded_replay) DSV41_TRY(check_bounded_replay(s, ops.schedule()));
  DSV41_TRY(check_image_spans(s, ids, st.pos, o.images));
  typename Ops::State* one[] = {&st};
  return ops.guarded(std::span<typename Ops::State* const>(one), ids, [&]() -> Status {
    auto b = ops.new_batch();
    DSV41_TRY(ops.begin(b, st, ids, st.history, st.pos, o.hooks, o.all_logits, out));
    if (!o.images.empty()) {
      if constexpr (requires { ops.set_images(b, o.images); }) DSV41_TRY(ops.set_images(b, o.images));
      else return error(Code::unsupported, "forward: this backend takes no images yet");
    }
    DSV41_TRY(forward_rows(ops, b, StackPass{}, o.bounded_replay));
    return ops.advance(b);
  });
}

// SPEC §5 Encoder SWA Bounded Replay: rebuilds every window ring (and the DSpark rings) of a sequence whose rings
// were dropped, from its last tokens `recent` (at least min(pos, W + N − 1)) and the stored global KV; positions do
// not advance. out: the last row's logits.
template <class Ops, class Out>
Status replay_window(const Ops& ops, typename Ops::State& st, std::span<const int32_t> recent, const ForwardHooks* hooks,
                     Out&& out) {
  auto split = split_replay(ops.shape(), st.pos, recent);
  if (!split.ok()) return split.status();
  const auto [S, rows, before] = *split;
  DSV41_TRY(ops.check_state(st));
  DSV41_TRY(check_tokens(ops.shape(), rows, st.pos, st.max_positions));
  auto b = ops.new_batch();
  DSV41_TRY(ops.begin(b, st, rows, before, st.pos - S, hooks, false, out));
  StackPass pass;
  pass.window_floor = st.pos - S;
  pass.compress = false;
  return forward_rows(ops, b, pass, false);
}

// Prefill chunks of several sequences in one forward (a backend that batches sequences): lengths[i] ids (in order
// in ids) run at seqs[i]'s next positions. out: logits [B, V] of each sequence's last row, or [rows, V] of every
// row with all_logits.
template <class Ops, class Out>
Status forward_chunks(const Ops& ops, std::span<typename Ops::State* const> seqs, std::span<const int> lengths,
                      std::span<const int32_t> ids, bool all_logits, Out&& out) {
  if (seqs.empty() || seqs.size() != lengths.size())
    return error(Code::invalid_argument, "prefill: one length per sequence, at least one");
  size_t off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i]) return error(Code::invalid_argument, "prefill: null sequence");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seqs[i]) return error(Code::invalid_argument, "prefill: a sequence appears twice");
    if (lengths[i] < 1 || off + size_t(lengths[i]) > ids.size())
      return error(Code::invalid_argument, "prefill: lengths do not cover the ids");
    DSV41_TRY(ops.check_state(*seqs[i]));
    DSV41_TRY(check_tokens(ops.shape(), ids.subspan(off, size_t(lengths[i])), seqs[i]->pos + lengths[i],
                           seqs[i]->max_positions));
    off += size_t(lengths[i]);
  }
  if (off != ids.size()) return error(Code::invalid_argument, "prefill: lengths do not cover the ids");
  return ops.guarded(seqs, ids, [&]() -> Status {
    auto b = ops.new_batch();
    DSV41_TRY(ops.begin_rows(b, seqs, lengths, ids, all_logits, out));
    DSV41_TRY(forward_rows(ops, b, StackPass{}, false));
    return ops.advance(b);
  });
}

// One decode step of several sequences, each at its own position: ids[b] runs on *seqs[b] (a backend that batches
// runs them as one forward of B rows). out: logits [B, V].
template <class Ops, class Out>
Status decode(const Ops& ops, std::span<typename Ops::State* const> seqs, std::span<const int32_t> ids, Out&& out) {
  if (seqs.empty() || seqs.size() != ids.size())
    return error(Code::invalid_argument, "decode: one token per sequence, at least one");
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i]) return error(Code::invalid_argument, "decode: null sequence");
    for (size_t j = 0; j < i; ++j)
      if (seqs[j] == seqs[i]) return error(Code::invalid_argument, "decode: a sequence appears twice");
    DSV41_TRY(ops.check_state(*seqs[i]));
    DSV41_TRY(check_tokens(ops.shape(), ids.subspan(i, 1), seqs[i]->pos + 1, seqs[i]->max_positions));
  }
  return ops.guarded(seqs, ids, [&]() -> Status {
    auto b = ops.new_batch();
    DSV41_TRY(ops.begin_decode(b, seqs, ids, out));
    DSV41_TRY(forward_rows(ops, b, StackPass{}, false));
    return ops.advance(b);
  });
}

}  // namespace dsv41::blocks
