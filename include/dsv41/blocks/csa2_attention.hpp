// SPEC §4.2–4.5 CSA2 attention of one backbone layer, written once over a backend's ops: queries, this chunk's
// window entries, the compressor (Full), the indexer with hierarchical candidates (Full, Reindex), sparse attention
// over window + selected compressed entries, the grouped output projection. How a decode batch shares launches
// is the backend's choice inside each op.
#pragma once
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/csa2.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::blocks {

template <class Ops, class Mode, class In, class Out>
Status csa2_attention(const Ops& ops, Mode, int l, typename Ops::Batch& b, In x, Out out, const StackPass& pass) {
  auto w = ops.attention_work(l, b);
  if (!w.ok()) return w.status();
  DSV41_TRY(ops.queries(l, b, x, *w));                    // q [rows, H, D] after RoPE; qr for the indexer
  DSV41_TRY(ops.window_entries(l, b, x, *w, pass));       // FP8 window entries of the rows
  if constexpr (Mode::compresses)
    if (pass.compress) DSV41_TRY(ops.compress(l, b, x, *w));  // new main KV entries and index keys
  if constexpr (Mode::indexes) DSV41_TRY(ops.index_select(l, b, x, *w));  // scores, candidates, top-k lists
  DSV41_TRY(ops.sparse_attention(l, b, *w, Mode::reads_compressed, pass));
  return ops.output_projection(l, b, *w, out);
}

}  // namespace dsv41::blocks
