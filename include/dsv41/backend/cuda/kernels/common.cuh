// Shared pieces of the CUDA kernels: cudaError_t -> Status, bf16 and scale helpers, warp reductions and
// the mma.sync / ldmatrix wrappers (sm_90a build; the FP8 mma needs sm_89+). No nlohmann, no fmt.
// Kernels in these headers are templates (`template <int = 0>` where nothing else is templated) so that
// several translation units can include them without duplicate host stubs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include <dsv41/core/status.hpp>
#include <dsv41/numeric/formats.hpp>
#include <dsv41/backend/cuda/kernels/widen.hpp>

namespace dsv41::gpu {

using bf16_t = __nv_bfloat16;

// cudaError_t -> Status (ok for cudaSuccess).
inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  const Code c = e == cudaErrorMemoryAllocation ? Code::out_of_memory
                 : (e == cudaErrorInvalidValue || e == cudaErrorInvalidConfiguration) ? Code::invalid_argument
                                                                                         : Code::internal;
  return Status(c, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
// The launch error of the last kernel launch (no device synchronization).
inline Status launch_status(const char* what) { return cuda_status(cudaGetLastError(), what); }

#define DSV41_CUDA_TRY(expr, what)                                           \
  do {                                                                       \
    const cudaError_t dsv41_cuda_e_ = (expr);                                \
    if (dsv41_cuda_e_ != cudaSuccess) return ::dsv41::gpu::cuda_status(dsv41_cuda_e_, what); \
  } while (0)

inline Status bad_arg(const std::string& m) { return Status(Code::invalid_argument, m); }

constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
constexpr int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

#if defined(__CUDACC__)
// UE8M0 exponent byte -> 2^(e-127). Codes 1..254 are exact normals; 0 gives 2^-127 (subnormal).
__device__ __forceinline__ float ue8m0_f(uint32_t e) {
  return __uint_as_float(max(e << 23, 0x00400000u));  // e ≤ 255: e << 23 ≥ 2^23 > 0x00400000 unless e = 0
}
__device__ __forceinline__ float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float bf2f(bf16_t x) { return __bfloat162float(x); }

// float -> uint32 whose unsigned order is the float order (-inf smallest of the non-NaNs).
__device__ __forceinline__ uint32_t ordered_key(float f) {
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// c in a per-thread register: threadIdx.x < 1024, so the xor changes nothing, but to the compiler the value is not
// warp-uniform, and it keeps it in a register instead of copying it from a uniform register before each use.
__device__ __forceinline__ uint32_t opaque_u32(uint32_t c) { return c ^ (threadIdx.x >> 10); }
// p as one 64-bit register: the compiler otherwise rebuilds a pointer such as base + row·stride from its parts
// before every load of a hot loop instead of adding a constant offset in the load.
template <class T>
__device__ __forceinline__ T* opaque_ptr(T* p) {
  uint64_t r;
  asm("mov.b64 %0, %1;" : "=l"(r) : "l"(reinterpret_cast<uint64_t>(p)));
  return reinterpret_cast<T*>(r);
}
// e2m1x4_to_e4m3x4's table words for a hot loop (widen.hpp).
__device__ __forceinline__ E2m1Lut make_e2m1_lut() {
  E2m1Lut l;
  l.mag_lo = opaque_u32(l.mag_lo);
  l.pos = opaque_u32(l.pos);
  return l;
}

// mma.sync m16n8k32 E4M3 x E4M3 -> FP32, C = 0.
__device__ __forceinline__ void mma_e4m3_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.f));
}
// Two E4M3 codes (the low or high half of w) -> f16x2 (exact).
__device__ __forceinline__ void e4m3x4_to_f16x2x2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi) : "r"(w));
}
// mma_e4m3_zero as sm_90 runs it (its SASS: the operands widened to f16, then two m16n8k16 f16 mma, the first over
// the low halves of every fragment register with C = 0, the second over the high halves accumulating), on operands
// already widened: al/ah the A registers' low/high f16 pairs, bl/bh B's. Without the final add of C = 0 the
// compiler appends to mma_e4m3_zero: that only turns a -0 sum into +0, which promote()'s fmaf into an accumulator
// that starts at +0 cannot tell apart. The same bits as mma_e4m3_zero through promote (bench/gemm_stream.cu checks).
__device__ __forceinline__ void mma_e4m3_zero_f16(float (&d)[4], const uint32_t (&al)[4], const uint32_t (&ah)[4],
                                                  const uint32_t (&bl)[2], const uint32_t (&bh)[2]) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(al[0]), "r"(al[1]), "r"(al[2]), "r"(al[3]), "r"(bl[0]), "r"(bl[1]), "f"(0.f));
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(ah[0]), "r"(ah[1]), "r"(ah[2]), "r"(ah[3]), "r"(bh[0]), "r"(bh[1]));
}
// mma.sync m16n8k16 BF16 x BF16 -> FP32, accumulating into d.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// cp.async of 16 bytes (src_bytes < 16 zero-fills the rest) and of 4 bytes.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes = 16) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(a), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
#endif

}  // namespace dsv41::gpu
