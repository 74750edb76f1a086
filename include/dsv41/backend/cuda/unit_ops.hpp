// The layer unit's steps on the GPU: Engram (SPEC §4.7), the DSpark tap, the mHC seams (§4.1, kernels/mhc.cuh:
// each seam one pass over the residual streams) and the MoE (§4.6, kernels/moe.cuh).
#pragma once
#include <cmath>
#include <memory>

#include <dsv41/backend/cuda/batch.hpp>
#include <dsv41/backend/cuda/hook_copies.hpp>
#include <dsv41/backend/cuda/kernels/mhc.cuh>
#include <dsv41/backend/cuda/kernels/moe.cuh>

namespace dsv41::gpu {

// The intermediate rows of one mHC block.
struct BlockWork {
  explicit BlockWork(Scratch s) : sc(std::move(s)) {}
  Scratch sc;
  int rows = 0;
  float *mix_attn = nullptr, *mix_ffn = nullptr;         // [rows, (2 + hc)·hc]
  bf16_t *x_attn = nullptr, *attn_out = nullptr;         // [rows, d]
  bf16_t* H1 = nullptr;                                  // [rows, hc, d] streams between attention and MoE
  bf16_t *x_ffn = nullptr, *ffn_out = nullptr;           // [rows, d]
  MhcParams seam;                                        // the last seam's parameters
};

class UnitOps : public HookCopies {
 public:
  // The MoE GEMMs' kernel (MoeShape::kernel). automatic: below 512 routed rows the streaming kernel for the routed
  // experts and the register kernel for the shared one (the same bits); from 512 the BF16 wgmma kernel for the routed
  // experts (its own sums, within the bound) and the staged one for the shared expert (moe.cuh, moe_bf16_routed).
  void set_moe_kernel(SkinnyKernel k) { moe_kernel_ = k; }
  SkinnyKernel moe_kernel() const { return moe_kernel_; }
  // MoeShape::fused_routing (default on): below 512 routed rows the routing's sort and tile lists in one kernel.
  void set_moe_fused_routing(bool on) { moe_fused_routing_ = on; }
  // MoeShape::w2_bf16 (opt-in): the routed w2 on the BF16 wgmma kernel at decode too.
  void set_moe_w2_bf16(bool on) { moe_w2_bf16_ = on; }
  // MoeShape::w13_split (opt-in, 0 off): the routed w1/w3 on BF16 wgmma at decode, over that many K ranges.
  void set_moe_w13_split(int z) { moe_w13_split_ = z; }
  // The shared expert on a second stream beside the routing and the routed experts (MoeOverlap; opt-in): the same
  // bits. Call it on the host, not while the model's stream is being captured.
  Status set_moe_overlap(bool on) {
    if (!on) {
      side_.reset();
      return Status::Ok();
    }
    if (side_) return Status::Ok();
    auto s = std::make_unique<SideStream>();
    DSV41_TRY(s->create());
    side_ = std::move(s);
    return Status::Ok();
  }

 protected:
  using HookCopies::HookCopies;
  SkinnyKernel moe_kernel_ = SkinnyKernel::automatic;
  bool moe_fused_routing_ = true;
  bool moe_w2_bf16_ = false;
  int moe_w13_split_ = 0;
  std::unique_ptr<SideStream> side_;

  // §4.7 Engram on all streams of H [S, hc, d]. comm: the table's rows are split over ranks; each rank gathers
  // the rows it holds (zeros elsewhere) and comm sums them (one holder per row: exact).
  Status engram(const DLayer& w, int slot, const int64_t* d_hash, const int32_t* d_ids, bf16_t* H, int S,
                parallel::Communicator* comm = nullptr) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, hd = s_.engram_head_dim, cols = int(plan_.cols());
    const int stride = int(plan_.n_layers()) * cols, K = cols * hd;
    Scratch sc(pool_, stream_);
    bf16_t *rows = nullptr, *kv = nullptr;
    DSV41_TRY(sc.get(rows, size_t(S) * K));
    DSV41_TRY(sc.get(kv, size_t(S) * (hc + 1) * d));
    glue::engram_gather_kernel<<<glue::blocks_for(int64_t(S) * K), glue::kThreads, 0, stream_>>>(
        d_hash, stride, slot * cols, cols, hd, w.engram_table, w.engram_scale, w.engram_rows, S, rows, w.engram_row_first);
    DSV41_TRY(launch_status("engram gather"));
    if (comm) DSV41_TRY(comm->all_reduce_sum(rows, size_t(S) * K, parallel::Elem::bf16, stream_));
    uint8_t *xc = nullptr, *xe = nullptr;
    DSV41_TRY(act_quant(rows, S, K, xc, xe, sc));
    DSV41_TRY(linear_fp8(xc, xe, S, w.engram_wkv, kv, int64_t(hc + 1) * d));
    const float inv_sqrt_d = float(std::pow(double(d), -0.5));
    glue::engram_gate_kernel<<<S * hc, 128, 0, stream_>>>(kv, w.engram_qk, d_ids, s_.image_token_id, hc, d, eps(),
                                                         inv_sqrt_d, H);
    return launch_status("engram gate");
  }

  Result<BlockWork> make_block_work(int S) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, NM = (2 + hc) * hc;
    BlockWork w(scratch());
    w.rows = S;
    DSV41_TRY(w.sc.get(w.mix_attn, size_t(S) * NM));
    DSV41_TRY(w.sc.get(w.mix_ffn, size_t(S) * NM));
    DSV41_TRY(w.sc.get(w.x_attn, size_t(S) * d));
    DSV41_TRY(w.sc.get(w.attn_out, size_t(S) * d));
    DSV41_TRY(w.sc.get(w.H1, size_t(S) * hc * d));
    DSV41_TRY(w.sc.get(w.x_ffn, size_t(S) * d));
    DSV41_TRY(w.sc.get(w.ffn_out, size_t(S) * d));
    return Result<BlockWork>(std::move(w));
  }

  // One mHC seam: HC > 0 is the stream count known at compile time (a preset's), 0 dispatches on s_.hc_mult.
  template <int HC>
  Status mhc_run(const MhcParams& p) const {
    mark("mhc");
    if constexpr (HC > 0) return mhc_step_fixed<HC>(p, stream_);
    else return mhc_step_any(p, s_.hc_mult, stream_);
  }

  // Seam 1: mixes of H; x_attn = norm(hc_pre(H, pre)).
  template <int HC = 0>
  Status mhc_first(int l, const Streams& s, BlockWork& w) const {
    const DLayer& L = layers_[size_t(l)];
    const int hc = s_.hc_mult, d = s_.hidden_size;
    MhcParams& pa = w.seam;
    pa = MhcParams{};
    pa.T = s.rows;
    pa.d = d;
    pa.H_in = s.H;
    pa.pre_use = s.pre;
    pa.pre_stride = hc;
    pa.fn = L.hc_attn_fn;
    pa.base = L.hc_attn_base;
    pa.scale = L.hc_attn_scale;
    pa.norm_w = L.attn_norm;
    pa.norm_eps = eps();
    pa.hc_eps = float(s_.hc_eps);
    pa.iters = s_.hc_sinkhorn_iters;
    pa.mix_out = w.mix_attn;
    pa.y = w.x_attn;
    if (hc == 4 && d % 256 == 0) {
      uint8_t* ws = nullptr;
      DSV41_TRY(w.sc.get(ws, mhc_workspace_bytes(s.rows, d, hc)));
      mhc_set_workspace(pa, hc, ws);
    }
    return mhc_run<HC>(pa);
  }

  // Seam 2: H1 = hc_post(attn_out, H); mixes of H1; x_ffn = norm(hc_pre(H1, pre of seam 1)).
  template <int HC = 0>
  Status mhc_second(int l, const Streams&, BlockWork& w) const {
    const DLayer& L = layers_[size_t(l)];
    const int hc = s_.hc_mult, NM = (2 + hc) * hc;
    MhcParams pf = w.seam;
    pf.x = w.attn_out;
    pf.mix_prev = w.mix_attn;
    pf.H_out = w.H1;
    pf.pre_use = w.mix_attn;
    pf.pre_stride = NM;
    pf.fn = L.hc_ffn_fn;
    pf.base = L.hc_ffn_base;
    pf.scale = L.hc_ffn_scale;
    pf.norm_w = L.ffn_norm;
    pf.mix_out = w.mix_ffn;
    pf.y = w.x_ffn;
    return mhc_run<HC>(pf);
  }

  // Seam 3: H = hc_post(ffn_out, H1); pre = the MoE mixes' pre.
  Status mhc_last(const Streams& s, BlockWork& w) const {
    const int hc = s_.hc_mult, d = s_.hidden_size, S = s.rows;
    mark("mhc");
    glue::hc_post_kernel<<<glue::blocks_for(int64_t(S) * d), glue::kThreads, 0, stream_>>>(w.ffn_out, w.H1, w.mix_ffn, S,
                                                                                          hc, d, s.H, s.pre);
    return launch_status("hc_post");
  }

  // §4.6 MoE of x [S, d] into out [S, d]. comm: expert parallel over the layer's held experts (kernels/moe.cuh).
  Status moe_rows(const LayerRole& role, const DLayer& w, const bf16_t* x, const int32_t* d_tokens, int S, bf16_t* out,
                  parallel::Communicator* comm = nullptr) const {
    MoeShape ms;
    ms.T = S;
    ms.d = s_.hidden_size;
    ms.E = role.n_experts;
    ms.k = role.top_k;
    ms.I = s_.moe_intermediate_size;
    ms.route_scale = float(s_.routed_scaling_factor);
    ms.limit = float(s_.swiglu_limit);
    ms.norm_topk = s_.norm_topk_prob;
    ms.e_begin = w.expert_first;
    ms.e_end = w.expert_first + w.experts_held;
    ms.kernel = moe_kernel_;
    ms.fused_routing = moe_fused_routing_;
    ms.w2_bf16 = moe_w2_bf16_;
    ms.w13_split = moe_w13_split_;
    MoeWeights mw;
    mw.gate = w.gate.bf16();
    mw.bias = w.gate_bias;
    mw.w1 = {w.ew1, w.es1, w.w13_stride, w.s13_stride};
    mw.w3 = {w.ew3, w.es3, w.w13_stride, w.s13_stride};
    mw.w2 = {w.ew2, w.es2, w.w2_stride, w.s2_stride};
    mw.s1 = {w.shared_w1.w, w.shared_w1.s, 0, 0};
    mw.s2 = {w.shared_w2.w, w.shared_w2.s, 0, 0};
    mw.s3 = {w.shared_w3.w, w.shared_w3.s, 0, 0};
    if (w.gate_bias_vl && d_tokens && s_.image_token_id >= 0) {
      mw.bias_vl = w.gate_bias_vl;
      mw.tokens = d_tokens;
      mw.image_token_id = s_.image_token_id;
    }
    Scratch sc(pool_, stream_);
    const size_t wsb = moe_workspace_bytes(ms);
    uint8_t* ws = nullptr;
    DSV41_TRY(sc.get(ws, wsb));
    return gpu::moe(ms, mw, x, out, ws, wsb, stream_, comm, side_ ? side_->overlap() : nullptr);
  }

};

}  // namespace dsv41::gpu
