// The grouped wo_a projection at prefill on tensor cores: the FP8 weights dequantized to BF16 (as the reference
// applies them), then one cuBLASLt BF16 GEMM per group with FP32 accumulation and one rounding to BF16:
// u[t, g·R + r] = bf16(Σ_i o[t, g·gw + i]·Wdeq[g·R + r, i]). The same math as glue::wo_a_kernel; the sum order
// differs (tensor-core blocks, possibly split-K), so results agree within the FP32 sum bound, not bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <dsv41/backend/cuda/blaslt.hpp>
#include <dsv41/backend/cuda/kernels/glue_linear.cuh>

namespace dsv41::gpu {

// Shapes the cuBLASLt path takes: 16-byte aligned group slices and leading dimensions of 8 elements.
inline bool wo_a_blas_fits(int S, int G, int R, int gw) { return S >= 1 && G >= 1 && R % 8 == 0 && gw % 16 == 0; }

// wdeq: device scratch of G·R·gw BF16 (written here). blas must be initialised and used on this stream only.
inline Status wo_a_blas(BlasLt& blas, const bf16_t* o, int S, int G, int R, int gw, const uint8_t* w, const uint8_t* ws,
                        bf16_t* wdeq, bf16_t* u, cudaStream_t stream) {
  if (!wo_a_blas_fits(S, G, R, gw) || !o || !w || !ws || !wdeq || !u) return bad_arg("wo_a_blas: R % 8, gw % 16");
  const int64_t n = int64_t(G) * R * gw;
  glue::wo_a_dequant_kernel<<<glue::blocks_for(ceil_div64(n, 8)), glue::kThreads, 0, stream>>>(w, ws, int64_t(G) * R, gw,
                                                                                                wdeq);
  DSV41_TRY(launch_status("wo_a dequant"));
  for (int g = 0; g < G; ++g)
    DSV41_TRY(blas.linear(o + int64_t(g) * gw, int64_t(G) * gw, S, wdeq + int64_t(g) * R * gw, R, gw, nullptr,
                          u + int64_t(g) * R, int64_t(G) * R, stream));
  return Status::Ok();
}

}  // namespace dsv41::gpu
