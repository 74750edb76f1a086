// SPEC §4 the encoder and decoder stacks and the forward of a batch of rows, written once over a backend's ops:
// embed -> encoder stack -> decoder stack -> head -> DSpark seeds. The exact path runs every row through every layer;
// SPEC §5 decoder bounded replay runs the decoder's later layers over the last W rows only; window replay is a pass
// with the window floored and no new compressed entries (StackPass).
#pragma once
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/layer_unit.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::blocks {

// A contiguous run of backbone layers [first, last).
struct Stack {
  int first = 0, last = 0;
};
// The encoder: the layers before the first ratio-1 layer. The decoder: the rest of the backbone.
inline Stack encoder_stack(const ModelShape& s) { return {0, first_decoder_layer(s)}; }
inline Stack decoder_stack(const ModelShape& s) { return {first_decoder_layer(s), s.num_hidden_layers}; }

// The stacks over the batch's rows. bounded: the layers after the decoder's first see only the last W rows.
template <class Ops>
Status run_stacks(const Ops& ops, typename Ops::Batch& b, StackPass pass, bool bounded) {
  const ModelShape& s = ops.shape();
  const Stack enc = encoder_stack(s), dec = decoder_stack(s);
  const int W = s.sliding_window;
  const int tail_from = bounded && b.rows() > W && dec.first + 1 < dec.last ? dec.first + 1 : dec.last;
  for (const Stack& st : {enc, dec})
    for (int l = st.first; l < st.last; ++l) {
      if (l == tail_from) {
        DSV41_TRY(ops.keep_tail(b, b.rows() - W));
        pass.window_floor = b.first_position();
      }
      DSV41_TRY(layer_unit(ops, l, b, pass));
    }
  return Status::Ok();
}

// The forward of a batch the backend prepared (Ops::begin...): its logits, taps and DSpark rings.
template <class Ops>
Status forward_rows(const Ops& ops, typename Ops::Batch& b, const StackPass& pass, bool bounded) {
  DSV41_TRY(ops.embed(b));
  DSV41_TRY(run_stacks(ops, b, pass, bounded));
  DSV41_TRY(ops.head(b));
  DSV41_TRY(ops.observe_taps(b));
  if (ops.shape().n_dspark() > 0) DSV41_TRY(ops.seed_dspark(b));
  return Status::Ok();
}

}  // namespace dsv41::blocks
