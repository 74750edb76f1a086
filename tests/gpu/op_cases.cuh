// The GPU-vs-CPU op suite as one table: every check of tests/gpu/check_*.cuh at the released shapes and at
// the odd shapes the loader also accepts (shape_support.hpp: hc 1, 2, 3, 8 and run-time hc; widths 96, 160,
// 224 and other multiples of 32; heads not multiples of 16; more than 8 experts per token or more than 1024
// experts). Each check keeps its own derived bound (see its comment). Used by tests/gpu/test_ops.cu (one
// Catch2 case per op) and bench/gpu_harness.cu.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "check_attention.cuh"
#include "check_gemm.cuh"
#include "check_indexer.cuh"
#include "check_mhc.cuh"
#include "check_moe.cuh"
#include "check_norm_quant.cuh"

namespace dsv41::gputest {

struct OpCase {
  const char* op;     // rmsnorm, act_quant, gemm, attention, indexer, topk, mhc, moe
  const char* shape;  // what the row is for (the check's own shape string says the numbers)
  std::function<CheckResult()> run;
};

inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> t = {
      // RMSNorm: vectorized (n % 8, ≤ 8192) and row-loop kernels
      {"rmsnorm", "tiny", [] { return check_rmsnorm(3, 64, 1); }},
      {"rmsnorm", "q_lora 1280", [] { return check_rmsnorm(5, 1280, 2); }},
      {"rmsnorm", "head 512", [] { return check_rmsnorm(4, 512, 3); }},
      {"rmsnorm", "hidden 5120", [] { return check_rmsnorm(64, 5120, 4); }},
      {"rmsnorm", "hidden 5120 prefill", [] { return check_rmsnorm(2048, 5120, 5); }},
      {"rmsnorm", "odd 96", [] { return check_rmsnorm(3, 96, 6); }},
      {"rmsnorm", "odd 160", [] { return check_rmsnorm(4, 160, 7); }},
      {"rmsnorm", "odd 200", [] { return check_rmsnorm(4, 200, 8); }},
      {"rmsnorm", "odd 100 (n % 8 != 0: row loop)", [] { return check_rmsnorm(3, 100, 9); }},
      {"rmsnorm", "wide 12288 (> 8192: row loop)", [] { return check_rmsnorm(3, 12288, 10); }},
      // activation quant
      {"act_quant", "tiny", [] { return check_act_quant(3, 128, 11); }},
      {"act_quant", "hidden 5120", [] { return check_act_quant(64, 5120, 12); }},
      {"act_quant", "hidden 5120 prefill", [] { return check_act_quant(2048, 5120, 13); }},
      {"act_quant", "inner 2304", [] { return check_act_quant(6, 2304, 14); }},
      {"act_quant", "odd 96", [] { return check_act_quant(5, 96, 15); }},
      {"act_quant", "odd 160", [] { return check_act_quant(3, 160, 16); }},
      // GEMMs: skinny, split-K, wide; FP4 experts; N % 64 != 0 (whole-warp tails), K blocks not % 4
      {"gemm", "tiny skinny", [] { return check_gemm(false, 5, 128, 96, 5, 21); }},
      {"gemm", "split-K", [] { return check_gemm(false, 3, 256, 1024, 3, 22); }},
      {"gemm", "wide, partial tile", [] { return check_gemm(false, 130, 256, 256, 130, 23); }},
      {"gemm", "fp4 tiny", [] { return check_gemm(true, 7, 128, 256, 7, 24); }},
      {"gemm", "wq_a decode", [] { return check_gemm(false, 4, 1280, 5120, 4, 25); }},
      {"gemm", "wq_b decode", [] { return check_gemm(false, 4, 32768, 1280, 4, 26); }},
      {"gemm", "wkv decode", [] { return check_gemm(false, 4, 512, 5120, 4, 27); }},
      {"gemm", "wo_b decode", [] { return check_gemm(false, 4, 5120, 8192, 4, 28); }},
      {"gemm", "wq_b M 64", [] { return check_gemm(false, 64, 32768, 1280, 16, 29); }},
      {"gemm", "wq_a prefill", [] { return check_gemm(false, 2048, 1280, 5120, 16, 30); }},
      {"gemm", "wo_b prefill", [] { return check_gemm(false, 2048, 5120, 8192, 16, 31); }},
      {"gemm", "fp4 w1 decode", [] { return check_gemm(true, 3, 2304, 5120, 3, 32); }},
      {"gemm", "fp4 w2", [] { return check_gemm(true, 20, 5120, 2304, 8, 33); }},
      {"gemm", "odd N 96, K 96", [] { return check_gemm(false, 5, 96, 96, 5, 34); }},
      {"gemm", "odd N 160, K 160", [] { return check_gemm(false, 3, 160, 160, 3, 35); }},
      {"gemm", "odd N 224 split-K", [] { return check_gemm(false, 2, 224, 2048, 2, 36); }},
      {"gemm", "odd N 160, M 130 (64-row tiles)", [] { return check_gemm(false, 130, 160, 256, 130, 37); }},
      {"gemm", "odd N 192, wide K", [] { return check_gemm(false, 100, 192, 384, 20, 38); }},
      {"gemm", "fp4 odd N 96, K 160", [] { return check_gemm(true, 9, 96, 160, 9, 39); }},
      // attention: tensor cores (H % 16, D % 128, D ≤ 1024), generic, scores recomputed
      {"attention", "tiny, empty row", [] { return check_attention({3, 16, 128, 8, 24, 16, 64}, 51); }},
      {"attention", "D 256", [] { return check_attention({5, 32, 256, 40, 100, 64, 300}, 52); }},
      {"attention", "32-head CTAs", [] { return check_attention({528, 32, 128, 16, 48, 64, 512}, 54); }},
      {"attention", "released 64 x 512", [] { return check_attention({4, 64, 512, 128, 512, 256, 4096}, 53); }},
      // decode: a row's entry chunks split over a cluster (split_for); ranks 3/4 of rows 0/1 have no chunk
      {"attention", "released decode, 1 row (cluster split 8)", [] { return check_attention({1, 64, 512, 128, 512, 256, 4096}, 58); }},
      {"attention", "cluster split, ranks without entries, empty row", [] { return check_attention({3, 16, 128, 40, 200, 64, 512}, 59); }},
      // the release's H 64, D 512 as template arguments (gpu::Ops<configs::V41Flash>): = run time, vs CPU
      {"attention", "released fixed<64, 512> decode",
       [] { return check_attention<64, 512>({4, 64, 512, 128, 512, 256, 4096}, 48); }},
      {"attention", "released fixed<64, 512> prefill (32-head CTAs)",
       [] { return check_attention<64, 512>({264, 64, 512, 128, 128, 256, 1024}, 49); }},
      {"attention", "released fixed<64, 512>, 8000 entries (falls back to generic)",
       [] { return check_attention<64, 512>({1, 64, 512, 16, 8000, 64, 8192}, 50); }},
      {"attention", "odd H 3, D 96", [] { return check_attention({3, 3, 96, 8, 24, 16, 64}, 55); }},
      {"attention", "odd H 5, D 160", [] { return check_attention({4, 5, 160, 16, 40, 32, 128}, 56); }},
      {"attention", "H 16, D 192 (D % 128 != 0)", [] { return check_attention({3, 16, 192, 16, 32, 32, 64}, 57); }},
      {"attention", "D 2048 (> 1024)", [] { return check_attention({2, 16, 2048, 8, 16, 16, 32}, 58); }},
      {"attention", "D 4096, 30000 entries (recomputed scores, 2 dim slices)",
       [] { return check_attention({2, 2, 4096, 16, 30000, 32, 4096}, 59); }},
      // indexer and top-k
      {"indexer", "tiny exact", [] { return check_indexer({3, 256, 128, 16, 128, 16, 2, 100, 20, true}, 61); }},
      {"indexer", "medium exact", [] { return check_indexer({5, 512, 256, 32, 128, 64, 1, 3000, 2995, true}, 62); }},
      {"indexer", "released exact", [] { return check_indexer({4, 5120, 1280, 32, 128, 512, 1, 65536, 65532, true}, 63); }},
      {"indexer", "released dense", [] { return check_indexer({4, 5120, 1280, 32, 128, 512, 1, 65536, 65532, false}, 64); }},
      // the release's nI 32, dI 128 as template arguments (gpu::Ops<configs::V41Flash>): = run time, vs CPU
      {"indexer", "released exact fixed<32, 128>",
       [] { return check_indexer<32, 128>({4, 5120, 1280, 32, 128, 512, 1, 65536, 65532, true}, 69); }},
      {"indexer", "released exact fixed<32, 128>, ratio 4",
       [] { return check_indexer<32, 128>({3, 5120, 1280, 32, 128, 512, 4, 16384, 65530, true}, 70); }},
      {"indexer", "odd nI 3, dI 32", [] { return check_indexer({3, 96, 96, 3, 32, 6, 2, 60, 30, true}, 67); }},
      {"indexer", "odd nI 5, dI 64", [] { return check_indexer({4, 160, 160, 5, 64, 8, 1, 200, 190, true}, 68); }},
      {"topk", "tiny", [] { return check_topk(3, 100, 16, 65); }},
      {"topk", "released", [] { return check_topk(8, 70000, 512, 66); }},
      // mHC: two-kernel path (hc 4, d % 256), HC templates 1..8, run-time hc
      {"mhc", "tiny post", [] { return check_mhc(3, 512, true, 71); }},
      {"mhc", "tiny pre", [] { return check_mhc(3, 512, false, 72); }},
      {"mhc", "released decode", [] { return check_mhc(4, 5120, true, 73); }},
      {"mhc", "released 1 token", [] { return check_mhc(1, 5120, true, 82); }},
      {"mhc", "released T 5 (narrow, partial group)", [] { return check_mhc(5, 5120, true, 83); }},
      {"mhc", "released T 32 (narrow)", [] { return check_mhc(32, 5120, true, 84); }},
      {"mhc", "released T 33 (wide)", [] { return check_mhc(33, 5120, true, 85); }},
      {"mhc", "d 4096 T 1 pre", [] { return check_mhc(1, 4096, false, 86); }},
      {"mhc", "released T 64", [] { return check_mhc(64, 5120, true, 74); }},
      {"mhc", "released pre", [] { return check_mhc(2, 5120, false, 75); }},
      {"mhc", "hc 4, d 96 (generic)", [] { return check_mhc(3, 96, true, 76, 4); }},
      {"mhc", "hc 1, d 224", [] { return check_mhc(3, 224, true, 77, 1); }},
      {"mhc", "hc 2, d 96", [] { return check_mhc(3, 96, true, 78, 2); }},
      {"mhc", "hc 2, d 512 pre", [] { return check_mhc(2, 512, false, 79, 2); }},
      {"mhc", "hc 3, d 160", [] { return check_mhc(4, 160, true, 80, 3); }},
      {"mhc", "hc 8, d 128", [] { return check_mhc(3, 128, true, 81, 8); }},
      {"mhc", "hc 8, d 5120", [] { return check_mhc(2, 5120, true, 82, 8); }},
      {"mhc", "hc 12, d 96 (run-time hc)", [] { return check_mhc(3, 96, true, 83, 12); }},
      {"mhc", "hc 16, d 160 pre (run-time hc)", [] { return check_mhc(2, 160, false, 84, 16); }},
      // MoE: register routing (E ≤ 1024, k ≤ 8) and route_any_kernel; d, I not multiples of 64
      {"moe", "tiny", [] { return check_moe({5, 256, 16, 4, 128}, 41); }},
      {"moe", "several tiles per expert", [] { return check_moe({400, 256, 16, 2, 128}, 42); }},
      {"moe", "released decode", [] { return check_moe({8, 5120, 384, 6, 2304}, 43); }},
      {"moe", "released decode, 1 token", [] { return check_moe({1, 5120, 384, 6, 2304}, 48); }},
      {"moe", "~10 rows per expert", [] { return check_moe({40, 256, 8, 2, 128}, 49); }},
      {"moe", "~50 rows per expert (several tiles per expert), d 1024", [] { return check_moe({200, 1024, 8, 2, 512}, 51); }},
      {"moe", "~75 rows per expert on the staged kernel (T·k >= 512), d 256", [] { return check_moe({300, 256, 8, 2, 128}, 53); }},
      {"moe", "d 2592 (81 K blocks), I 544", [] { return check_moe({3, 2592, 32, 4, 544}, 50); }},
      {"moe", "odd d 96, I 96, k 9 of 12", [] { return check_moe({5, 96, 12, 9, 96}, 44); }},
      {"moe", "odd d 160, I 160", [] { return check_moe({7, 160, 8, 2, 160}, 45); }},
      {"moe", "odd d 224, I 32, k 16 of 40", [] { return check_moe({6, 224, 40, 16, 32}, 46); }},
      {"moe", "E 1100 (> 1024), k 3", [] { return check_moe({9, 96, 1100, 3, 64}, 47); }},
  };
  return t;
}

}  // namespace dsv41::gputest
