// Check of the MoE layer (routing, CUB sort/scan, grouped FP4 expert GEMMs with SwiGLU, shared FP8
// expert, combine) against cpu::moe, and of the routing against cpu::route.
#pragma once
#include <dsv41/backend/cuda/kernels/moe.cuh>

#include "gpu_check.cuh"

namespace dsv41::gputest {

struct MoeCfg {
  int T, d, E, k, I;
};

// Bound per output element: 2 ulp_bf16(|ref|) + 2^-7·rms(ref row). Sources: the GEMM bounds of
// check_gemm (three chained GEMMs); routing weights from log1pf/expf (≤ 2 ulp each vs glibc) and the
// SwiGLU's expf; a one-ulp change of an h value before its FP8 re-quantization can move that code by
// one E4M3 step (2^-3 relative) or shift its block scale, which moves y by ~2^-3·|h_i·w2_i| ≪ 2^-7·rms(y).
// A wrong expert, weight, row or scale gives errors of order rms(y).
inline CheckResult check_moe(const MoeCfg& cfg, uint64_t seed) {
  const int T = cfg.T, d = cfg.d, E = cfg.E, k = cfg.k, I = cfg.I, P = T * k;
  Rng rng(seed);
  const std::vector<float> x = rand_bf16(rng, size_t(T) * d, 1.f);
  const std::vector<float> gate = rand_bf16(rng, size_t(E) * d, 0.02f);
  std::vector<float> bias(static_cast<size_t>(E));
  for (auto& b : bias) b = 0.05f * rng.normal();
  const size_t b13 = size_t(E) * I * d / 2, s13 = size_t(E) * I * d / 32;
  const std::vector<uint8_t> w1 = rand_bytes(rng, b13), w3 = rand_bytes(rng, b13), w2 = rand_bytes(rng, b13);
  const std::vector<uint8_t> w1s = rand_ue8m0(rng, s13, 118, 120), w3s = rand_ue8m0(rng, s13, 118, 120),
                             w2s = rand_ue8m0(rng, s13, 118, 120);
  const std::vector<uint8_t> s1 = rand_e4m3(rng, size_t(I) * d), s3 = rand_e4m3(rng, size_t(I) * d),
                             s2 = rand_e4m3(rng, size_t(I) * d);
  const std::vector<uint8_t> s1s = rand_ue8m0(rng, size_t(I / 32) * (d / 32), 113, 114),
                             s3s = rand_ue8m0(rng, size_t(I / 32) * (d / 32), 113, 114),
                             s2s = rand_ue8m0(rng, size_t(d / 32) * (I / 32), 113, 114);
  const float route_scale = 1.5f, limit = 10.f;

  auto dx = to_dev(to_bits(x));
  auto dgate = to_dev(to_bits(gate));
  auto dbias = to_dev(bias);
  auto dw1 = to_dev(w1), dw3 = to_dev(w3), dw2 = to_dev(w2), dw1s = to_dev(w1s), dw3s = to_dev(w3s), dw2s = to_dev(w2s);
  auto ds1 = to_dev(s1), ds3 = to_dev(s3), ds2 = to_dev(s2), ds1s = to_dev(s1s), ds3s = to_dev(s3s), ds2s = to_dev(s2s);
  gpu::MoeShape sh{T, d, E, k, I, route_scale, limit, true};
  gpu::MoeWeights W;
  W.gate = reinterpret_cast<const gpu::bf16_t*>(dgate.p);
  W.bias = dbias.p;
  const int64_t gw13 = int64_t(I) * d / 2, gs13 = int64_t(I) * d / 32;
  W.w1 = {dw1.p, dw1s.p, gw13, gs13};
  W.w3 = {dw3.p, dw3s.p, gw13, gs13};
  W.w2 = {dw2.p, dw2s.p, gw13, gs13};
  W.s1 = {ds1.p, ds1s.p, 0, 0};
  W.s3 = {ds3.p, ds3s.p, 0, 0};
  W.s2 = {ds2.p, ds2s.p, 0, 0};
  const size_t wsb = gpu::moe_workspace_bytes(sh);
  DBuf<uint8_t> work(wsb);
  work.poison(0xA5);
  DBuf<uint16_t> dout(size_t(T) * d);
  dout.poison();
  GT_OK(gpu::moe(sh, W, reinterpret_cast<const gpu::bf16_t*>(dx.p), reinterpret_cast<gpu::bf16_t*>(dout.p), work.p, wsb,
                 nullptr));
  GT_SYNC();
  const std::vector<uint16_t> out_bits = dout.download();
  const std::vector<float> out = from_bits(out_bits);
  // Expert tiles of 16, 32 and 64 rows (MoeShape::tile_rows) on the register kernel and on the staged kernel
  // (gemm_staged.cuh; its dense form for the shared expert too) give the same bits as variant 0 (register, 16 rows),
  // and so does the automatic choice where it takes those kernels (tile_diff: bit v set where variant v differs, bit
  // 12 the automatic output). From T·k = 512 on, automatic takes the BF16 wgmma kernel for the routed experts; its
  // output is the one checked against the bound below. The opt-in E4M3 wgmma form (variants 6-8) is not the same bits:
  // its distance to the reference is reported, not checked. The BF16 wgmma form (variants 9-11) sums in another
  // order: not the same bits, but it must stay within the bound. Variant 12 forces the streaming kernel (gemm_stream,
  // 16-row tiles; automatic takes it below 512 routed rows): the register kernel's bits (bit 13). Variant 13 is the
  // automatic path with the other routing step (MoeShape::fused_routing flipped): the automatic output's bits (bit 14).
  // Variant 14 is the automatic path with the routed w2 on the BF16 wgmma kernel (MoeShape::w2_bf16): within the bound.
  // Variant 15 is the automatic path with the shared expert on a second stream (MoeOverlap): the automatic output's
  // bits (bit 15).
  // Variant 16 takes the routed w1/w3 on BF16 wgmma over 4 K ranges and w2 on BF16 wgmma (MoeShape::w13_split,
  // w2_bf16): within the bound.
  int tile_diff = 0;
  std::vector<std::vector<uint16_t>> wg_out, wb_out;
  std::vector<uint16_t> reg_bits;
  gpu::SideStream side;
  GT_OK(side.create());
  for (int variant = 0; variant < 17; ++variant) {
    gpu::MoeShape st = sh;
    if (variant == 16) {
      st.w13_split = 4;
      st.w2_bf16 = true;
    } else if (variant == 14) {
      st.w2_bf16 = true;
    } else if (variant == 13) {  // the automatic path with the other step 2 (fused kernel or CUB): the automatic output's bits
      st.fused_routing = !sh.fused_routing;
    } else if (variant < 13) {  // (variant 15: the automatic shape, run with the second stream below)
      st.tile_rows = variant == 12 ? 16 : 16 << (variant % 3);
      st.kernel = variant < 3 ? gpu::SkinnyKernel::registers : variant < 6 ? gpu::SkinnyKernel::staged
                  : variant < 9 ? gpu::SkinnyKernel::wgmma : variant < 12 ? gpu::SkinnyKernel::wgmma_bf16
                  : gpu::SkinnyKernel::stream;
    }
    DBuf<uint8_t> work2(gpu::moe_workspace_bytes(st));
    DBuf<uint16_t> dout2(size_t(T) * d);
    dout2.poison();
    GT_OK(gpu::moe(st, W, reinterpret_cast<const gpu::bf16_t*>(dx.p), reinterpret_cast<gpu::bf16_t*>(dout2.p), work2.p,
                   work2.n, nullptr, nullptr, variant == 15 ? side.overlap() : nullptr));
    GT_SYNC();
    std::vector<uint16_t> o2 = dout2.download();
    if (variant == 15 || variant == 13) { if (o2 != out_bits) tile_diff |= 1 << (variant == 15 ? 15 : 14); }
    else if (variant == 12) { if (o2 != reg_bits) tile_diff |= 1 << 13; }
    else if (variant >= 9) wb_out.push_back(std::move(o2));
    else if (variant >= 6) wg_out.push_back(std::move(o2));
    else if (variant == 0) reg_bits = std::move(o2);
    else if (o2 != reg_bits) tile_diff |= 1 << variant;
  }
  if (!gpu::detail::moe_bf16_routed(sh) && out_bits != reg_bits) tile_diff |= 1 << 12;
  const gpu::MoeWork mw = gpu::moe_work(sh, work.p);
  std::vector<int> gsel(P);
  std::vector<float> gw(P), glog(size_t(T) * E);
  GT_CUDA(cudaMemcpy(gsel.data(), mw.sel, P * 4, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(gw.data(), mw.wts, P * 4, cudaMemcpyDeviceToHost));
  GT_CUDA(cudaMemcpy(glog.data(), mw.logits, size_t(T) * E * 4, cudaMemcpyDeviceToHost));

  // reference routing on the reference logits
  std::vector<float> rlog(size_t(T) * E);
  const std::vector<uint16_t> gate_bits = to_bits(gate);
  ref().linear(RefW::BF16, gate_bits.data(), nullptr, E, d, x.data(), T, rlog.data(), RefLin::F32);
  int64_t sel_diff = 0;
  double w_rel = 0, log_rel = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<int> rs(k);
    std::vector<float> rw(k);
    ref().route(rlog.data() + size_t(t) * E, bias.data(), E, k, true, route_scale, rs.data(), rw.data());
    for (int i = 0; i < k; ++i) {
      if (rs[i] != gsel[t * k + i]) ++sel_diff;
      else w_rel = std::max(w_rel, std::fabs(double(gw[t * k + i]) - rw[i]) / std::fabs(rw[i]));
    }
  }
  for (size_t i = 0; i < rlog.size(); ++i) log_rel = std::max(log_rel, std::fabs(double(glog[i]) - rlog[i]) / (std::fabs(rlog[i]) + 1e-3));

  std::vector<float> outr(size_t(T) * d);
  const std::vector<uint16_t> gb = to_bits(gate);
  MoeRefIn in{T, d, E, k, I, route_scale, limit, true, x.data(), gb.data(), bias.data(),
              w1.data(), w1s.data(), w3.data(), w3s.data(), w2.data(), w2s.data(),
              s1.data(), s1s.data(), s3.data(), s3s.data(), s2.data(), s2s.data()};
  ref().moe(in, outr.data());
  // The bound of element (t, i): 2 ulp of the reference + 2^-7 of its row's rms.
  std::vector<double> rms(static_cast<size_t>(T), 0.0);
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(outr[size_t(t) * d + i]) * outr[size_t(t) * d + i];
    rms[size_t(t)] = std::sqrt(ss / d);
  }
  auto bound = [&](int t, int i) { return 2 * bf16_ulp(outr[size_t(t) * d + i]) + std::ldexp(rms[size_t(t)], -7); };
  auto worst = [&](const std::vector<std::vector<uint16_t>>& outs) {  // worst |err| / bound against the reference
    double w = 0;
    for (const auto& o : outs) {
      const std::vector<float> of = from_bits(o);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < d; ++i)
          w = std::max(w, std::fabs(double(of[size_t(t) * d + i]) - outr[size_t(t) * d + i]) / bound(t, i));
    }
    return w;
  };
  const double wg_worst = worst(wg_out), wb_worst = worst(wb_out);
  Cmp c;
  c.r.op = "moe";
  c.r.shape = shape_str({{"T", T}, {"d", d}, {"E", E}, {"k", k}, {"I", I}});
  c.r.bound = "2ulp+2^-7*rms(row)";
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < d; ++i) c.add(out[size_t(t) * d + i], outr[size_t(t) * d + i], bound(t, i));
  char note[400];
  std::snprintf(note, sizeof note,
                "routing: %lld/%d picks differ, max w rel err %.2g, max logit rel err %.2g; auto: %s kernel, tiles of "
                "%d rows; register and staged at 16/32/64: %s (differing variants 0x%x); E4M3 wgmma (opt-in) worst err/bound %.3g; BF16 wgmma %.3g",
                (long long)sel_diff, P, w_rel, log_rel, gpu::detail::moe_kernel_name(sh),
                gpu::detail::moe_tile_rows(sh), tile_diff ? "NOT the same bits" : "the same bits", unsigned(tile_diff), wg_worst, wb_worst);
  c.r.note = note;
  return c.done(sel_diff == 0 && w_rel < 1e-5 && tile_diff == 0 && wb_worst <= 1.0);
}

}  // namespace dsv41::gputest
