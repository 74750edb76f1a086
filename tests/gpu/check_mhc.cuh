// Check of the fused mHC step against cpu::hc_post, cpu::hc_mixes, cpu::hc_pre and cpu::rmsnorm.
#pragma once
#include <dsv41/backend/cuda/kernels/glue.cuh>

#include "gpu_check.cuh"

namespace dsv41::gputest {

// Bounds: H_out and the collapsed row are elementwise with the reference's operation order: exact.
// mixes: the (2+hc)·hc dot products over hc·d terms and Σz² are reordered (relative ≤ hc·d·2^-24 worst
// case: 1.2e-3 at the released 4·5120, 2.4e-3 at 8·5120; ~sqrt(hc·d)·2^-24 ≈ 1e-5 typical for these random
// inputs); sigmoid/softmax/Sinkhorn are well conditioned here: bound 1e-4·(1 + |ref|) on each coefficient.
// y: as RMSNorm, ≤ 1 BF16 ulp. Runs mhc_step_any as the forward does (the workspace set when d % 256 == 0).
inline CheckResult check_mhc(int T, int d, bool with_x, uint64_t seed, int hc = 4) {
  const int NM = (2 + hc) * hc;
  Rng rng(seed);
  const std::vector<float> H = rand_bf16(rng, size_t(T) * hc * d, 1.f), x = rand_bf16(rng, size_t(T) * d, 1.f);
  std::vector<float> fnA(size_t(NM) * hc * d), fnF(size_t(NM) * hc * d), baseA(NM), baseF(NM), scale = {0.6f, 0.4f, 0.8f};
  for (auto& v : fnA) v = 0.02f * rng.normal();
  for (auto& v : fnF) v = 0.02f * rng.normal();
  for (auto& v : baseA) v = 0.5f * rng.normal();
  for (auto& v : baseF) v = 0.5f * rng.normal();
  std::vector<float> nw(static_cast<size_t>(d));
  for (auto& v : nw) v = bf16f(1.f + 0.2f * rng.normal());
  const float eps = 1e-20f, hce = 1e-6f;
  const int iters = 20;
  // previous mixes (CPU), packed [pre, post, comb]
  std::vector<float> mixA(size_t(T) * NM);
  for (int t = 0; t < T; ++t) {
    float* m = mixA.data() + size_t(t) * NM;
    ref().hc_mixes(H.data() + size_t(t) * hc * d, hc, d, fnA.data(), baseA.data(), scale.data(), eps, iters, hce, m,
                   m + hc, m + 2 * hc);
  }
  auto dH = to_dev(to_bits(H));
  auto dx = to_dev(to_bits(x));
  auto dmixA = to_dev(mixA);
  auto dfn = to_dev(fnF);
  auto dbase = to_dev(baseF);
  auto dscale = to_dev(scale);
  auto dnw = to_dev(nw);
  DBuf<uint16_t> dHo(size_t(T) * hc * d), dy(size_t(T) * d);
  DBuf<float> dmix(size_t(T) * NM);
  DBuf<uint8_t> ws(d % 256 == 0 ? gpu::mhc_workspace_bytes(T, d, hc) : 1);
  dHo.poison(); dy.poison(); dmix.poison(); ws.poison();
  gpu::MhcParams p;
  p.T = T; p.d = d;
  p.H_in = reinterpret_cast<const gpu::bf16_t*>(dH.p);
  p.x = with_x ? reinterpret_cast<const gpu::bf16_t*>(dx.p) : nullptr;
  p.mix_prev = dmixA.p;
  p.pre_use = dmixA.p;  // pre of the previous mixes (stride NM)
  p.pre_stride = NM;
  p.fn = dfn.p; p.base = dbase.p; p.scale = dscale.p; p.norm_w = dnw.p;
  p.norm_eps = eps; p.hc_eps = hce; p.iters = iters;
  p.H_out = reinterpret_cast<gpu::bf16_t*>(dHo.p);
  p.mix_out = dmix.p;
  p.y = reinterpret_cast<gpu::bf16_t*>(dy.p);
  if (d % 256 == 0) gpu::mhc_set_workspace(p, hc, ws.p);
  GT_OK(gpu::mhc_step_any(p, hc, nullptr));
  const char* path = hc == 4 && d % 256 == 0 ? "two-kernel" : hc <= 8 ? "one CTA per token, HC template" : "one CTA per token, run-time hc";
  GT_SYNC();
  const std::vector<float> Ho = from_bits(dHo.download()), y = from_bits(dy.download()), mix = dmix.download();

  Cmp c;
  c.r.op = with_x ? "mhc_post" : "mhc_pre";
  c.r.shape = shape_str({{"T", T}, {"hc", hc}, {"d", d}});
  c.r.bound = "H exact; mix 1e-4(1+|ref|); y <=1 ulp";
  std::vector<float> H1(size_t(hc) * d), v(static_cast<size_t>(d)), yr(static_cast<size_t>(d)), m(NM);
  int64_t h_bad = 0;
  double mix_err = 0;
  for (int t = 0; t < T; ++t) {
    const float* Ht = H.data() + size_t(t) * hc * d;
    const float* ma = mixA.data() + size_t(t) * NM;
    if (with_x) {
      ref().hc_post(x.data() + size_t(t) * d, Ht, ma + hc, ma + 2 * hc, hc, d, H1.data());
      for (size_t i = 0; i < H1.size(); ++i) h_bad += Ho[size_t(t) * hc * d + i] != H1[i];
    } else {
      std::copy_n(Ht, size_t(hc) * d, H1.data());
    }
    ref().hc_mixes(H1.data(), hc, d, fnF.data(), baseF.data(), scale.data(), eps, iters, hce, m.data(), m.data() + hc,
                   m.data() + 2 * hc);
    for (int i = 0; i < NM; ++i) {
      const double e = std::fabs(double(mix[size_t(t) * NM + i]) - m[i]);
      mix_err = std::max(mix_err, e / (1.0 + std::fabs(m[i])));
      if (std::isnan(mix[size_t(t) * NM + i])) mix_err = INFINITY;
    }
    ref().hc_pre(H1.data(), ma, hc, d, v.data());
    ref().rmsnorm(v.data(), nw.data(), 1, d, eps, yr.data());
    for (int i = 0; i < d; ++i) c.add(y[size_t(t) * d + i], yr[i], bf16_ulp(yr[i]));
  }
  char note[160];
  std::snprintf(note, sizeof note, "%s; H_out mismatches %lld, max mix err/(1+|ref|) %.2g", path, (long long)h_bad,
                mix_err);
  c.r.note = note;
  return c.done(h_bad == 0 && mix_err <= 1e-4);
}

}  // namespace dsv41::gputest
