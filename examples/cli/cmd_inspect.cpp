// dsv41 inspect MODEL_DIR: shape, layer schedule, parameters, cache bytes; validates the checkpoint.
#include <filesystem>
#include <string>

#include <fmt/core.h>

#include <dsv41/config/accounting.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/io/safetensors.hpp>
#include <dsv41/blocks/weights.hpp>

#include "commands.hpp"

namespace dsv41::cli {
namespace {

struct InspectOpts {
  std::string dir;
};

std::string human(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.2f} K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

int run_inspect(void* p) {
  const auto& o = *static_cast<InspectOpts*>(p);
  auto shape = load_config(o.dir + "/config.json");
  if (!shape.ok()) {
    fmt::print(stderr, "error: {}\n", shape.status().to_string());
    return 1;
  }
  const ModelShape& s = *shape;
  fmt::print("model: {}\n", o.dir);
  fmt::print("shape: vocab {}  hidden {}  layers {} (+{} DSpark stages)  heads {} x {} (rope {})\n", s.vocab_size,
             s.hidden_size, s.num_hidden_layers, s.n_dspark(), s.num_attention_heads, s.head_dim, s.qk_rope_head_dim);
  fmt::print("       q_lora {}  o_lora {} x {} groups  window {}  hc {}  experts {} top-{} (inner {})\n", s.q_lora_rank,
             s.o_lora_rank, s.o_groups, s.sliding_window, s.hc_mult, s.n_routed_experts, s.num_experts_per_tok,
             s.moe_intermediate_size);
  fmt::print("       indexer {} heads x {} top-{}  candidates {} blocks x {}  Engram layers {}  n-gram {}  heads {}\n",
             s.index_n_heads, s.index_head_dim, s.index_topk, s.candidate_topk_blocks, s.candidate_block_size,
             s.engram_layer_ids.size(), s.engram_max_ngram_size, s.engram_n_heads);
  fmt::print("\nlayer schedule:\n  {:>5} {:>5} {:>8} {:>7} {:>6} {:>7} {:>6} {:>6}\n", "layer", "ratio", "mode", "kv_src",
             "index", "stack", "engram", "tap");
  for (const auto& r : make_schedule(s)) {
    std::string tag = r.dspark ? fmt::format("mtp.{}", r.id - s.num_hidden_layers) : std::to_string(r.id);
    std::string mode = mode_name(r.mode);
    if (r.candidate_source) mode += "*";
    fmt::print("  {:>5} {:>5} {:>8} {:>7} {:>6} {:>7} {:>6} {:>6}\n", tag, r.ratio, mode,
               r.kv_source >= 0 ? std::to_string(r.kv_source) : "-", r.index_source >= 0 ? std::to_string(r.index_source) : "-",
               r.dspark ? "dspark" : (r.encoder ? "encoder" : "decoder"), r.engram_slot >= 0 ? "yes" : "",
               r.tap_slot >= 0 ? "yes" : "");
  }
  fmt::print("  (* = candidate source)\n");
  const auto pc = count_params(s);
  fmt::print("\nparameters:\n");
  fmt::print("  total                         {:>12}  ({:.0f})\n", human(pc.total), pc.total);
  fmt::print("    Engram tables               {:>12}\n", human(pc.engram_tables));
  fmt::print("    DSpark stages               {:>12}\n", human(pc.dspark));
  fmt::print("    without Engram tables and DSpark {:>7}\n", human(pc.total - pc.engram_tables - pc.dspark));
  fmt::print("  activated per decode token    {:>12}  (all {} layers + head)\n", human(pc.active_decode), s.num_hidden_layers);
  fmt::print("    encoder (layers 0-{})       {:>12}\n", first_decoder_layer(s) - 1, human(pc.active_encoder));
  fmt::print("    decoder (layers {}-{})      {:>12}\n", first_decoder_layer(s), s.num_hidden_layers - 1,
             human(pc.active_decoder));
  fmt::print("  activated per prefill token   {:>12}  (layers 0-{}, bounded replay)\n", human(pc.active_prefill),
             first_decoder_layer(s));
  const auto c = cache_bytes(s);
  fmt::print("\ncache:\n");
  fmt::print("  entry bytes: main KV {}  index key {}  window {}\n", c.main_entry, c.index_entry, c.window_entry);
  fmt::print("  global KV per token           {:.1f} B  ({:.2f} entries/token)\n", c.global_per_token, c.entries_per_token);
  fmt::print("  global KV per 1M tokens       {:.1f} MiB\n", c.global_per_token * 1048576.0 / (1 << 20));
  fmt::print("  window rings per sequence     {} B\n", c.window_per_sequence);

  namespace fs = std::filesystem;
  const bool single = fs::exists(o.dir + "/model.safetensors");
  const bool sharded = fs::exists(o.dir + "/model.safetensors.index.json");
  if (!single && !sharded) {
    fmt::print("\ncheckpoint: no tensors in {} (config only): not loadable\n", o.dir);
    return 1;
  }
  auto ck = st::Checkpoint::open(o.dir);
  if (!ck.ok()) {
    fmt::print("\ncheckpoint: {}\n", ck.status().to_string());
    return 1;
  }
  int n = 0;
  Status chk = check_checkpoint(*ck, s, &n);
  if (!chk.ok()) {
    fmt::print("\ncheckpoint: {}\n", chk.to_string());
    return 1;
  }
  fmt::print("\ncheckpoint: {} shard(s), {} tensors checked (names, dtypes, shapes): ok\n", ck->num_shards(), n);
  return 0;
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOpts>();
  auto* sub = app.add_subcommand("inspect", "Print a model directory's shape, schedule, parameters and cache sizes; validate it");
  sub->add_option("model_dir", o->dir, "model directory (config.json + safetensors)")->required();
  return {sub, run_inspect, o};
}

}  // namespace dsv41::cli
