// dsv41 generate (one completion of raw text) and dsv41 chat (interactive, streaming).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <dsv41/runtime/generation_config.hpp>

#include "commands.hpp"
#include "text_loader.hpp"

namespace dsv41::cli {
namespace {

struct SamplingArgs {
  int max_tokens = 128;
  uint64_t seed = 0;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  int top_k = 0;
  int64_t context = 0;
  bool speculative = false;
  CLI::Option *o_max = nullptr, *o_temp = nullptr, *o_top_k = nullptr, *o_top_p = nullptr, *o_min_p = nullptr;
  // The long names, and llama.cpp's short ones (-n, -s, -c).
  void add(CLI::App* sub) {
    o_max = sub->add_option("-n,--max-tokens", max_tokens, "tokens to generate at most")->check(CLI::NonNegativeNumber);
    sub->add_option("-s,--seed", seed, "64-bit sampling seed (same seed, same tokens)");
    o_temp = sub->add_option("--temperature", temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
    o_top_k = sub->add_option("--top-k", top_k, "keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
    o_top_p = sub->add_option("--top-p", top_p, "nucleus mass")->check(CLI::Range(0.0, 1.0));
    o_min_p = sub->add_option("--min-p", min_p, "drop tokens below min_p times the top probability")->check(CLI::Range(0.0, 1.0));
    sub->add_option("-c,--ctx-size", context, "prompt + completion at most this many tokens (0: the model's)")
        ->check(CLI::NonNegativeNumber);
    sub->add_flag("--speculative", speculative, "DSpark speculative decoding (lossless)");
  }
  // The model directory's generation_config.json fills what the command line left unset.
  Status apply_defaults(const std::string& model_dir) {
    auto g = load_generation_defaults(model_dir);
    if (!g.ok()) return g.status();
    if (g->temperature && !o_temp->count()) temperature = *g->temperature;
    if (g->top_k && !o_top_k->count()) top_k = *g->top_k;
    if (g->top_p && !o_top_p->count()) top_p = *g->top_p;
    if (g->min_p && !o_min_p->count()) min_p = *g->min_p;
    if (g->max_new_tokens && !o_max->count()) max_tokens = *g->max_new_tokens;
    return Status::Ok();
  }
  text::TextOptions options() const {
    text::TextOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = temperature;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.min_p = min_p;
    o.sampling.seed = seed;
    o.speculative = speculative;
    o.context = context;
    return o;
  }
};

struct GenerateOpts {
  LoadArgs load;
  std::string prompt;
  SamplingArgs sampling;
  bool no_bos = false;
};

bool print_piece(void*, int32_t, std::string_view piece) {
  if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), stdout);  // fwrite(NULL, 1, 0) is UB
  std::fflush(stdout);
  return true;
}

int run_generate(void* p) {
  auto& o = *static_cast<GenerateOpts*>(p);
  if (Status d = o.sampling.apply_defaults(o.load.model_dir); !d.ok()) {
    fmt::print(stderr, "error: {}\n", d.to_string());
    return 1;
  }
  auto l = load_text_model(o.load);
  if (!l.ok()) {
    fmt::print(stderr, "error: {}\n", l.status().to_string());
    return 1;
  }
  const auto& tm = **l;
  std::string prompt = o.prompt;
  if (!o.no_bos && prompt.rfind(tm.chat_tokens().bos, 0) != 0) prompt = tm.chat_tokens().bos + prompt;
  auto opt = o.sampling.options();
  opt.on_text = print_piece;
  if (!o.prompt.empty()) std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = tm.complete(prompt, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n");
  if (!r.ok()) {
    fmt::print(stderr, "error: {}\n", r.status().to_string());
    return 1;
  }
  fmt::print(stderr, "[{} prompt tokens, {} generated, finish: {}", r->prompt_tokens, r->completion_tokens,
             text::text_finish_name(r->finish));
  if (r->spec_steps > 0) fmt::print(stderr, ", {:.2f} drafts accepted per verify step", double(r->accepted) / r->spec_steps);
  fmt::print(stderr, ", {:.2f} s, {:.1f} tokens/s with prefill]\n", secs, double(r->completion_tokens) / std::max(secs, 1e-9));
  return 0;
}

struct ChatOpts {
  LoadArgs load;
  SamplingArgs sampling;
  std::string mode = "chat", system, effort = "high";
  SessionArgs sessions;  // each turn resumes from the turns before (and from earlier runs)
};

int run_chat(void* p) {
  auto& o = *static_cast<ChatOpts*>(p);
  o.load.progress = true;
  if (Status d = o.sampling.apply_defaults(o.load.model_dir); !d.ok()) {
    fmt::print(stderr, "error: {}\n", d.to_string());
    return 1;
  }
  auto l = load_text_model(o.load);
  if (!l.ok()) {
    fmt::print(stderr, "error: {}\n", l.status().to_string());
    return 1;
  }
  auto sessions = start_sessions(**l, o.load, o.sessions, "dsv41 chat");
  if (!sessions.ok()) {
    fmt::print(stderr, "error: {}\n", sessions.status().to_string());
    return 1;
  }
  if (!sessions->empty()) fmt::print(stderr, "dsv41 chat: sessions stored in {}\n", *sessions);
  const auto& tm = **l;
  nlohmann::ordered_json req = {{"messages", nlohmann::ordered_json::array()}, {"thinking_mode", o.mode}};
  if (o.mode == "thinking") req["reasoning_effort"] = o.effort;
  if (!o.system.empty()) req["messages"].push_back({{"role", "system"}, {"content", o.system}});
  fmt::print(stderr, "dsv41 chat ({} mode). Empty line or Ctrl-D ends.\n", o.mode);
  std::string line;
  while (true) {
    fmt::print(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    req["messages"].push_back({{"role", "user"}, {"content", line}});
    auto prompt = tm.render(req);
    if (!prompt.ok()) {
      fmt::print(stderr, "error: {}\n", prompt.status().to_string());
      req["messages"].erase(req["messages"].size() - 1);
      continue;
    }
    auto opt = o.sampling.options();
    opt.on_text = print_piece;
    auto r = tm.complete(*prompt, opt);
    std::printf("\n");
    if (r.ok() && !sessions->empty())
      fmt::print(stderr, "[{} prompt tokens, {} cached]\n", r->prompt_tokens, r->cached_tokens);
    if (!r.ok()) {
      fmt::print(stderr, "error: {}\n", r.status().to_string());
      req["messages"].erase(req["messages"].size() - 1);
      continue;
    }
    auto msg = text::parse_completion(r->text + (r->finish == text::TextFinish::stop ? tm.chat_tokens().eos : ""),
                                      o.mode == "chat" ? text::Mode::chat : text::Mode::thinking, tm.chat_tokens());
    nlohmann::ordered_json a = {{"role", "assistant"}, {"content", msg.ok() ? msg->content : r->text}};
    req["messages"].push_back(a);
  }
  return 0;
}

}  // namespace

Command add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOpts>();
  auto* sub = app.add_subcommand("generate", "Continue a text prompt");
  sub->add_option("-m,--model", o->load.model_dir, "model directory")->required();
  sub->add_option("--tokenizer", o->load.tokenizer, "tokenizer.json (default MODEL/tokenizer.json)");
  sub->add_option("--device", o->load.device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("-p,--prompt", o->prompt, "prompt text")->required();
  sub->add_flag("--no-bos", o->no_bos, "do not prepend the BOS token");
  o->sampling.add(sub);
  return {sub, run_generate, o};
}

Command add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOpts>();
  auto* sub = app.add_subcommand("chat", "Interactive chat in the V4.1 prompt format, streaming");
  sub->add_option("-m,--model", o->load.model_dir, "model directory")->required();
  sub->add_option("--tokenizer", o->load.tokenizer, "tokenizer.json (default MODEL/tokenizer.json)");
  sub->add_option("--device", o->load.device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--mode", o->mode, "chat or thinking")->check(CLI::IsMember({"chat", "thinking"}));
  sub->add_option("--reasoning-effort", o->effort, "low, high, max or 1-100");
  sub->add_option("--system", o->system, "system prompt");
  add_session_options(sub, o->sessions);
  o->sampling.add(sub);
  return {sub, run_chat, o};
}

}  // namespace dsv41::cli
