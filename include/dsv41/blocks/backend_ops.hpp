// What the blocks ask of a backend. The blocks (stack.hpp, layer_unit.hpp, csa2_attention.hpp, dspark.hpp) hold
// the model's order once; a backend (backend/cpu/ops.hpp, backend/cuda/ops.hpp) supplies these types and ops, each
// a `Status` (errors are values) on its own memory:
//
//   types    State (a sequence), Batch (the rows of one forward: sequences, ids, positions, Engram ids, the
//            residual streams, what index sources hand down the stack), Streams {H, pre, rows},
//            BlockWork {x_attn, attn_out, x_ffn, ffn_out, ...}, AttentionWork, DraftWork {streams, ...}
//   model    shape(), schedule()
//   stack    embed(b), keep_tail(b, off), head(b), observe_taps(b), seed_dspark(b)
//   unit     observe_unit(l, b, UnitPoint), engram(l, b), dspark_tap(l, b)
//   mHC      block_work(rows), mhc_pre(l, s, w), mhc_seam(l, s, w), mhc_post(l, s, w), moe(l, tokens, x, out, rows)
//   CSA2     attention_work(l, b), queries, window_entries, compress, index_select, sparse_attention,
//            output_projection
//   DSpark   check_state(st), draft_block(st, y), observe_stage(hooks, k, s), draft_attention(st, l, x, p, out),
//            draft_head(d, out)
#pragma once
#include <cstdint>

namespace dsv41 {

// What a pass over the layers may leave out (SPEC §5 window replay floors the window and keeps stored entries).
struct StackPass {
  int64_t window_floor = 0;  // window entries below this position are not attended
  bool compress = true;      // Full layers add compressed entries (false when replaying stored ones)
};

// Where a layer unit exposes its residual streams to ForwardHooks (unit_input may overwrite them).
enum class UnitPoint { input, output };

}  // namespace dsv41
