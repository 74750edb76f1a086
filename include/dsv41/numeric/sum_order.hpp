// Σ x² of a row in FP32, in the order of the reference's CPU run (torch's cascade sum over a contiguous row,
// SumKernel.cpp, 8-lane vectors): lane-wise partials in 4 interleaved vector accumulators, each folded through 4
// levels of 2^max(4, ⌈log2 m⌉/4) vectors (m = vectors per accumulator); leftover vectors into the first
// accumulator, the accumulators in order, the scalar tail, then the lanes in order. Shared by cpu::sum_squares
// and the CUDA kernels that sum small rows in one thread (separate multiplies and adds: no FMA contraction).
// get(i) gives element i; each is asked for once.
#pragma once
#include <dsv41/core/host_device.hpp>

namespace dsv41::num {

DSV41_HD inline float sq_add(float acc, float t) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(acc, __fmul_rn(t, t));
#else
  return acc + t * t;
#endif
}
DSV41_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

template <class Get>
DSV41_HD inline float cascade_sum_squares(int n, Get get) {
  constexpr int kLanes = 8, kIlp = 4, kLevels = 4;
  const int vecs = n / kLanes, m = vecs / kIlp;
  int lg = 0;
  while ((1 << lg) < m) ++lg;
  const int power = (lg / kLevels) > 4 ? lg / kLevels : 4, step = 1 << power, mask = step - 1;
  float acc[kLevels][kIlp][kLanes];
  for (int a = 0; a < kLevels; ++a)
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) acc[a][k][l] = 0.f;
  auto add_vec = [&](float* a, int v) {
    for (int l = 0; l < kLanes; ++l) a[l] = sq_add(a[l], get(v * kLanes + l));
  };
  int i = 0;
  while (i + step <= m) {
    for (int j = 0; j < step; ++j, ++i)
      for (int k = 0; k < kIlp; ++k) add_vec(acc[0][k], i * kIlp + k);
    for (int lev = 1; lev < kLevels; ++lev) {
      for (int k = 0; k < kIlp; ++k)
        for (int l = 0; l < kLanes; ++l) {
          acc[lev][k][l] = add_rn(acc[lev][k][l], acc[lev - 1][k][l]);
          acc[lev - 1][k][l] = 0.f;
        }
      if ((i & (mask << (lev * power))) != 0) break;
    }
  }
  for (; i < m; ++i)
    for (int k = 0; k < kIlp; ++k) add_vec(acc[0][k], i * kIlp + k);
  for (int lev = 1; lev < kLevels; ++lev)
    for (int k = 0; k < kIlp; ++k)
      for (int l = 0; l < kLanes; ++l) acc[0][k][l] = add_rn(acc[0][k][l], acc[lev][k][l]);
  for (int v = m * kIlp; v < vecs; ++v) add_vec(acc[0][0], v);
  for (int k = 1; k < kIlp; ++k)
    for (int l = 0; l < kLanes; ++l) acc[0][0][l] = add_rn(acc[0][0][l], acc[0][k][l]);
  float s = 0.f;
  for (int t = vecs * kLanes; t < n; ++t) s = sq_add(s, get(t));
  for (int l = 0; l < kLanes; ++l) s = add_rn(s, acc[0][0][l]);
  return s;
}

}  // namespace dsv41::num
