// One load path for every backend: config.json (checked against a compiled configuration), the sharded
// checkpoint mapped and bound to the model's parameters, and the Engram token map and hash plan.
#pragma once
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dsv41/blocks/weights.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/engram/hash.hpp>
#include <dsv41/engram/token_map.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/parallel/communicator.hpp>
#include <dsv41/parallel/partition.hpp>
#include <dsv41/text/engram_vocabulary.hpp>
#include <dsv41/text/tokenizer.hpp>

namespace dsv41 {

// Progress while loading; return false to cancel (load then fails with Code::cancelled).
struct LoadOptions {
  bool (*progress)(void* ctx, float fraction, const char* stage) = nullptr;
  void* ctx = nullptr;
  // Several ranks (issue 16): this model is rank comm->rank() of comm->size(); it binds (and uploads) only what
  // parallel::make_plan gives the rank and combines through comm, which must outlive the model. Null: one rank.
  parallel::Communicator* comm = nullptr;
  // With comm: split the attention heads over the ranks too, on output-projection group boundaries (tensor
  // parallel; the CPU backend only; o_groups must divide over the ranks).
  bool split_attention = false;
};

namespace detail {

inline Status compare_shapes(const ModelShape& got, const ModelShape& want) {
  std::string e;
  auto cmp = [&](const char* name, auto a, auto b) {
    if (a != b) e += std::string("  ") + name + " differs from the compiled configuration\n";
  };
  cmp("vocab_size", got.vocab_size, want.vocab_size);
  cmp("hidden_size", got.hidden_size, want.hidden_size);
  cmp("moe_intermediate_size", got.moe_intermediate_size, want.moe_intermediate_size);
  cmp("num_hidden_layers", got.num_hidden_layers, want.num_hidden_layers);
  cmp("num_attention_heads", got.num_attention_heads, want.num_attention_heads);
  cmp("head_dim", got.head_dim, want.head_dim);
  cmp("qk_rope_head_dim", got.qk_rope_head_dim, want.qk_rope_head_dim);
  cmp("q_lora_rank", got.q_lora_rank, want.q_lora_rank);
  cmp("o_lora_rank", got.o_lora_rank, want.o_lora_rank);
  cmp("o_groups", got.o_groups, want.o_groups);
  cmp("n_routed_experts", got.n_routed_experts, want.n_routed_experts);
  cmp("num_experts_per_tok", got.num_experts_per_tok, want.num_experts_per_tok);
  cmp("sliding_window", got.sliding_window, want.sliding_window);
  cmp("compress_ratios", got.compress_ratios, want.compress_ratios);
  cmp("kv_source_layer_ids", got.kv_source_layer_ids, want.kv_source_layer_ids);
  cmp("index_source_layer_ids", got.index_source_layer_ids, want.index_source_layer_ids);
  cmp("index_n_heads", got.index_n_heads, want.index_n_heads);
  cmp("index_head_dim", got.index_head_dim, want.index_head_dim);
  cmp("index_topk", got.index_topk, want.index_topk);
  cmp("candidate_source_layer_id", got.candidate_source_layer_id, want.candidate_source_layer_id);
  cmp("hc_mult", got.hc_mult, want.hc_mult);
  cmp("engram_layer_ids", got.engram_layer_ids, want.engram_layer_ids);
  cmp("engram_num_embeddings", got.engram_num_embeddings, want.engram_num_embeddings);
  cmp("engram_head_dim", got.engram_head_dim, want.engram_head_dim);
  cmp("num_nextn_predict_layers", got.num_nextn_predict_layers, want.num_nextn_predict_layers);
  cmp("dspark_target_layer_ids", got.dspark_target_layer_ids, want.dspark_target_layer_ids);
  if (e.empty()) return Status::Ok();
  return error(Code::mismatch, "config.json does not match the compiled configuration:\n" + e);
}

// A prompt for prefill: not empty, ids in the vocabulary, fits the positions left.
inline Status check_prompt(const ModelShape& s, int64_t pos, int64_t max_positions, std::span<const int32_t> ids) {
  if (ids.empty()) return error(Code::invalid_argument, "prefill: empty prompt");
  if (pos + int64_t(ids.size()) > max_positions)
    return error(Code::out_of_range, "prefill: prompt of " + std::to_string(ids.size()) + " tokens does not fit the " +
                                         std::to_string(max_positions - pos) + " positions left");
  for (int32_t id : ids)
    if (id < 0 || id >= s.vocab_size)
      return error(Code::invalid_argument, "prefill: token id " + std::to_string(id) + " outside the vocabulary");
  return Status::Ok();
}

// The Engram token map: engram_token_map.safetensors when present, else built from tokenizer.json
// (SPEC §4.8) and checked against engram_compressed_vocab_size. Embedding rows past the tokenizer's
// tokens (which the reference's map has no row for) take the Engram pad token's compressed id.
inline Result<std::vector<int32_t>> load_token_map(const std::string& dir, const ModelShape& s) {
  const std::string path = dir + "/engram_token_map.safetensors";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    const std::string tok_path = dir + "/tokenizer.json";
    if (!std::filesystem::exists(tok_path, ec))
      return error(Code::io_error, dir + ": the Engram layers need engram_token_map.safetensors or tokenizer.json, "
                                         "and neither is there");
    auto tok = text::Tokenizer::from_json_file(tok_path);
    if (!tok.ok()) return tok.status();
    auto tm = engram::build_token_map(text::engram_vocabulary(*tok), s.vocab_size);
    if (!tm.ok()) return tm.status();
    if (Status c = engram::check_compressed_size(*tm, s.engram_compressed_vocab_size, tok_path); !c.ok())
      return Status(c.code(), c.message() + " (" + dir + " has no engram_token_map.safetensors)");
    DSV41_TRY(engram::fill_missing(*tm, s.engram_pad_token_id));
    return std::move(tm->map);
  }
  auto f = st::File::open(path);
  if (!f.ok()) return f.status();
  const st::TensorView* t = f->find("token_map");
  if (!t) return error(Code::format_error, path + ": no tensor 'token_map'");
  if (t->dtype != st::DType::I32 || t->shape.size() != 1 || t->shape[0] != s.vocab_size)
    return error(Code::mismatch, path + ": token_map must be I32 [" + std::to_string(s.vocab_size) + "]");
  return t->to_vector<int32_t>();
}

// The Engram token map and hash plan of a model directory.
using EngramSetup = engram::Setup;

inline Result<EngramSetup> load_engram(const std::string& dir, const ModelShape& s) {
  EngramSetup e;
  if (s.engram_layer_ids.empty()) return e;
  auto tm = load_token_map(dir, s);
  if (!tm.ok()) return tm.status();
  e.token_map = std::move(tm).value();
  engram::HashParams hp;
  hp.layer_ids.assign(s.engram_layer_ids.begin(), s.engram_layer_ids.end());
  hp.max_ngram_size = s.engram_max_ngram_size;
  hp.n_heads = s.engram_n_heads;
  hp.vocab_start = s.engram_vocab_size;
  hp.compressed_vocab_size = s.engram_compressed_vocab_size;
  if (s.engram_pad_token_id < 0 || s.engram_pad_token_id >= int(e.token_map.size()))
    return error(Code::format_error, "engram_pad_token_id outside the vocabulary");
  hp.pad_compressed_id = e.token_map[size_t(s.engram_pad_token_id)];
  hp.num_embeddings = s.engram_num_embeddings;
  auto p = engram::make_plan(hp);
  if (!p.ok()) return p.status();
  e.plan = std::move(p).value();
  DSV41_TRY(engram::check_token_map(e.plan, e.token_map));
  return e;
}

}  // namespace detail

namespace detail {

// A model directory read and bound on the host: the backend builds its ops from it.
struct LoadedDirectory {
  ModelShape shape;
  parallel::Plan plan;  // world 1 unless LoadOptions::comm
  std::unique_ptr<st::Checkpoint> checkpoint;  // memory-mapped; the weights below view into it
  Weights weights;
  EngramSetup engram;
};

// split: what the backend splits over ranks (parallel::PlanSizes' flags), when opt.comm is set.
template <class Config>
Result<std::unique_ptr<LoadedDirectory>> load_directory(const std::string& dir, const LoadOptions& opt,
                                                        parallel::PlanSizes split = {}) {
  auto report = [&](float f, const char* what) { return !opt.progress || opt.progress(opt.ctx, f, what); };
  auto d = std::make_unique<LoadedDirectory>();
  auto shape = load_config(dir + "/config.json");
  if (!shape.ok()) return shape.status();
  d->shape = std::move(shape).value();
  if constexpr (!std::is_same_v<Config, configs::Dynamic>)
    DSV41_TRY(compare_shapes(d->shape, configs::to_shape<Config>()));
  if (opt.comm) {
    auto plan = parallel::make_plan(d->shape, opt.comm->size(), opt.comm->rank(), split);
    if (!plan.ok()) return plan.status();
    d->plan = *plan;
  }
  if (!report(0.1f, "checkpoint")) return error(Code::cancelled, "load cancelled");
  auto ck = st::Checkpoint::open(dir);
  if (!ck.ok()) return ck.status();
  d->checkpoint = std::make_unique<st::Checkpoint>(std::move(ck).value());
  if (!report(0.3f, "weights")) return error(Code::cancelled, "load cancelled");
  auto w = bind_weights(*d->checkpoint, d->shape, opt.comm ? &d->plan : nullptr);
  if (!w.ok()) return w.status();
  d->weights = std::move(w).value();
  if (!report(0.4f, "engram")) return error(Code::cancelled, "load cancelled");
  auto eg = load_engram(dir, d->shape);
  if (!eg.ok()) return eg.status();
  d->engram = std::move(eg).value();
  if (!report(0.5f, "backend")) return error(Code::cancelled, "load cancelled");
  return Result<std::unique_ptr<LoadedDirectory>>(std::move(d));
}

}  // namespace detail
}  // namespace dsv41
