// Checks of RMSNorm and the FP8 / FP4 activation quantizers against the CPU reference.
#pragma once
#include <dsv41/backend/cuda/kernels/quant.cuh>
#include <dsv41/backend/cuda/kernels/rmsnorm.cuh>
#include <dsv41/numeric/quant.hpp>

#include "gpu_check.cuh"

namespace dsv41::gputest {

// Bound: the GPU sums x² in another order; |Δss|/ss ≤ n·2^-24 (≤ 3e-4 at n = 5120, typically ~1e-6), so
// the unrounded y moves by less than one BF16 ulp (2^-8 relative): at most 1 ulp, only at rounding ties.
inline CheckResult check_rmsnorm(int rows, int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x = rand_bf16(rng, size_t(rows) * n, 3.f), w(static_cast<size_t>(n));
  for (auto& v : w) v = bf16f(1.f + 0.2f * rng.normal());
  for (int i = 0; i < n && rows > 1; ++i) x[size_t(n) + i] = bf16f(1e-3f * rng.normal());  // a small row
  auto dx = to_dev(to_bits(x));
  auto dw = to_dev(w);
  DBuf<uint16_t> dy(size_t(rows) * n);
  dy.poison();
  GT_OK(gpu::rmsnorm(reinterpret_cast<gpu::bf16_t*>(dx.p), n, dw.p, rows, n, 1e-20f,
                     reinterpret_cast<gpu::bf16_t*>(dy.p), n, nullptr));
  GT_SYNC();
  const std::vector<float> y = from_bits(dy.download());
  std::vector<float> yr(size_t(rows) * n);
  ref().rmsnorm(x.data(), w.data(), rows, n, 1e-20f, yr.data());
  Cmp c;
  c.r.op = "rmsnorm";
  c.r.shape = shape_str({{"rows", rows}, {"n", n}});
  c.r.bound = "<=1 bf16 ulp";
  for (size_t i = 0; i < y.size(); ++i) c.add(y[i], yr[i], bf16_ulp(yr[i]));
  return c.done();
}

// Exact: the same formulas (numeric/formats.hpp) run on both sides.
inline CheckResult check_act_quant(int rows, int K, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x = rand_bf16(rng, size_t(rows) * K, 2.f);
  // special blocks: zeros, below the 1e-4 floor, large, a single spike
  if (K >= 128) {
    for (int i = 0; i < 32; ++i) x[i] = 0.f;
    for (int i = 32; i < 64; ++i) x[i] = bf16f(1e-6f * rng.normal());
    for (int i = 64; i < 96; ++i) x[i] = bf16f(3e4f * rng.normal());
    x[100] = 1e3f;
  }
  auto dx = to_dev(to_bits(x));
  DBuf<uint8_t> dc(size_t(rows) * K), de(size_t(rows) * K / 32);
  DBuf<uint16_t> dq(size_t(rows) * K);
  dc.poison(0xA5); de.poison(0xA5); dq.poison();
  GT_OK(gpu::act_quant_fp8(reinterpret_cast<gpu::bf16_t*>(dx.p), K, rows, K, dc.p, de.p,
                           reinterpret_cast<gpu::bf16_t*>(dq.p), nullptr));
  // FP4 (power-of-two scales per 32) on the same input
  DBuf<uint8_t> d4(size_t(rows) * K / 2), d4e(size_t(rows) * K / 32);
  d4.poison(0xA5); d4e.poison(0xA5);
  GT_OK(gpu::quant_fp4_b32(reinterpret_cast<gpu::bf16_t*>(dx.p), K, rows, K, d4.p, d4e.p, nullptr));
  GT_SYNC();
  const auto codes = dc.download(), exps = de.download(), p4 = d4.download(), e4 = d4e.download();
  const auto xq = from_bits(dq.download());
  std::vector<float> r8 = x, r4 = x;
  std::vector<uint8_t> rc(size_t(rows) * K), re(size_t(rows) * K / 32), rn(size_t(rows) * K), re4(size_t(rows) * K / 32);
  for (int r = 0; r < rows; ++r) {
    num::fp8_quant_block32(r8.data() + size_t(r) * K, K, rc.data() + size_t(r) * K, re.data() + size_t(r) * K / 32);
    num::fp4_quant_block32(r4.data() + size_t(r) * K, K, rn.data() + size_t(r) * K, re4.data() + size_t(r) * K / 32);
  }
  Cmp c;
  c.r.op = "act_quant";
  c.r.shape = shape_str({{"rows", rows}, {"K", K}});
  c.r.bound = "exact (codes, exps, q*s; fp4 nibbles, exps)";
  int64_t bad_codes = 0;
  for (size_t i = 0; i < codes.size(); ++i) bad_codes += codes[i] != rc[i];
  for (size_t i = 0; i < exps.size(); ++i) bad_codes += exps[i] != re[i];
  for (size_t i = 0; i < p4.size(); ++i) bad_codes += p4[i] != num::pack_e2m1(rn[2 * i], rn[2 * i + 1]);
  for (size_t i = 0; i < e4.size(); ++i) bad_codes += e4[i] != re4[i];
  for (size_t i = 0; i < xq.size(); ++i) c.add(xq[i], r8[i], -1);
  c.r.note = "code/exp mismatches " + std::to_string(bad_codes);
  return c.done(bad_codes == 0);
}

}  // namespace dsv41::gputest
