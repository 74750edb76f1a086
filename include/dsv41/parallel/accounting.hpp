// Checkpoint bytes a rank holds under a parallel::Plan (what it binds and uploads): its routed experts, its rows of
// the head and of the Engram tables, and every replicated tensor. For sizing a run: the release over 4 or 8 GPUs.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>

#include <dsv41/config/model_shape.hpp>
#include <dsv41/config/tensors.hpp>
#include <dsv41/parallel/partition.hpp>

namespace dsv41::parallel {

inline int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16") return 2;
  return 1;  // F8_E4M3, F8_E8M0, I8 (packed E2M1 pairs)
}

inline int64_t tensor_bytes(const TensorSpec& t) {
  int64_t n = dtype_bytes(t.dtype);
  for (int64_t d : t.shape) n *= d;
  return n;
}

// The routed expert a tensor belongs to ("....ffn.experts.<e>...."), or −1.
inline int expert_of(const std::string& name) {
  static constexpr const char* kTag = ".ffn.experts.";
  const size_t at = name.find(kTag);
  if (at == std::string::npos) return -1;
  return std::atoi(name.c_str() + at + std::string(kTag).size());
}

// Bytes of t that rank p.rank holds.
inline int64_t rank_bytes(const TensorSpec& t, const ModelShape& s, const Plan& p) {
  const int64_t b = tensor_bytes(t);
  if (const int e = expert_of(t.name); e >= 0) {
    const Range held = t.layer >= s.num_hidden_layers ? p.dspark_experts : p.experts;
    return held.contains(e) ? b : 0;
  }
  if (t.name == "head.weight") return b / s.vocab_size * p.vocab.size();
  if (t.group == TensorGroup::Engram && !t.shape.empty() && t.shape[0] > 0)  // a table [rows, ...] or its scales
    return b / t.shape[0] * p.engram_rows(t.shape[0]).size();
  return b;
}

// Bytes of the checkpoint that rank p.rank holds.
inline int64_t rank_bytes(const ModelShape& s, const Plan& p) {
  int64_t n = 0;
  for (const TensorSpec& t : expected_tensors(s)) n += rank_bytes(t, s, p);
  return n;
}

}  // namespace dsv41::parallel
