// The model shapes the CUDA forward runs: exactly those the loader accepts for the CPU reference
// (validate_shape). The rules that look like kernel limits are the checkpoint format's: FP8 weights and
// window entries carry a UE8M0 scale per 32×32 block / 32 values, FP4 experts and index keys one per 32
// inputs, so hidden_size, head_dim, q_lora_rank, o_lora_rank, moe_intermediate_size, index_head_dim and
// engram_head_dim are multiples of 32 on both backends, and o_groups divides num_attention_heads (so each
// group's width H·D/o_groups is a multiple of 32 too). Every kernel the forward uses keeps a fast path for
// the shapes it is tuned for and a generic path for the rest:
//   mHC            hc = 4 and d % 256: two-kernel workspace path; hc 1..8: HC as a template; hc > 8: run time
//   RMSNorm        n % 8, n ≤ 8192: vectorized; any n: row loop
//   FP8/FP4 GEMMs  N % 16 (tensor cores, whole warps drop out past N); wide kernel N, K % 128; else one warp
//                  per output (linear_fp8's fallback)
//   attention      H % 16, D % 128, D ≤ 1024: tensor cores; else scores in shared memory, or recomputed
//                  (any D, any number of entries)
//   MoE routing    E ≤ 1024, k ≤ 8: in registers; else route_any_kernel; tiles and combine for any E, k
//   indexer        nI ∈ {16, 32}, dI = 128: tensor cores; else one warp per (row, key)
// A preset's mHC hc, attention H, D and indexer nI, dI are template arguments of the fast kernels where they
// take them (gpu::Ops<C>, kernel_sizes.hpp); configs::Dynamic dispatches on the runtime shape.
// Not shape limits: one forward's row count (a prefill chunk) stays below 65536 where rows are a grid
// dimension (attention, indexer scores, MoE combine).
#pragma once
#include <string>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/core/status.hpp>

namespace dsv41::gpu {

// Ok for every shape validate_shape accepts; its message (Code::unsupported, prefixed) otherwise.
inline Status check_supported(const ModelShape& s) {
  const Status v = validate_shape(s);
  if (v.ok()) return Status::Ok();
  return Status(Code::unsupported, "CUDA forward: " + v.message());
}

}  // namespace dsv41::gpu
