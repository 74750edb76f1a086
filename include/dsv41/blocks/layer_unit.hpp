// SPEC §4.1 the layer unit: Engram (§4.7) -> DSpark tap (§4.9) -> mHC(attention) -> mHC(MoE), written once over a
// backend's ops (blocks/backend_ops.hpp lists them). DSpark stages reuse the mHC block with their own attention.
#pragma once
#include <dsv41/blocks/backend_ops.hpp>
#include <dsv41/blocks/csa2_attention.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::blocks {

// mHC around attention and MoE on residual streams s (H [rows, hc, d], pre [rows, hc]), updated in place.
// attn(x, out): the normalized attention input [rows, d] to the attention sub-layer's output [rows, d].
// tokens: the rows' token ids (MoE routes image tokens with bias_vl), or null.
template <class Ops, class AttnFn>
Status mhc_block(const Ops& ops, int l, const typename Ops::Streams& s, const int32_t* tokens, AttnFn&& attn) {
  auto w = ops.block_work(s.rows);
  if (!w.ok()) return w.status();
  DSV41_TRY(ops.mhc_pre(l, s, *w));   // mixes of H; x_attn = norm(hc_pre(H))
  DSV41_TRY(attn(w->x_attn, w->attn_out));
  DSV41_TRY(ops.mhc_seam(l, s, *w));  // H1 = hc_post(attn_out, H); mixes of H1; x_ffn = norm(hc_pre(H1))
  DSV41_TRY(ops.moe(l, tokens, w->x_ffn, w->ffn_out, s.rows));
  return ops.mhc_post(l, s, *w);      // H = hc_post(ffn_out, H1); pre = the MoE mixes' pre
}

// One backbone layer unit over the batch's rows.
template <class Ops>
Status layer_unit(const Ops& ops, int l, typename Ops::Batch& b, const StackPass& pass) {
  const LayerRole& role = ops.schedule()[size_t(l)];
  DSV41_TRY(ops.observe_unit(l, b, UnitPoint::input));
  if (role.engram_slot >= 0) DSV41_TRY(ops.engram(l, b));
  if (role.tap_slot >= 0) DSV41_TRY(ops.dspark_tap(l, b));
  DSV41_TRY(mhc_block(ops, l, b.streams(), b.tokens(), [&](auto x, auto out) {
    return csa2::dispatch(role.mode, [&](auto mode) { return csa2_attention(ops, mode, l, b, x, out, pass); });
  }));
  return ops.observe_unit(l, b, UnitPoint::output);
}

}  // namespace dsv41::blocks
