// Text subcommands: template (prompt of one conversation), parse (completion → OpenAI message),
// tokenize (UTF-8 on stdin → ids).
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <dsv41/text/chat_format.hpp>
#include <dsv41/text/tokenizer.hpp>

#include "commands.hpp"

namespace dsv41::cli {
namespace {

std::string read_all(std::istream& in) { return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}; }

struct TemplateOpts {
  std::string case_json;
};

int run_template(void* p) {
  const auto& o = *static_cast<TemplateOpts*>(p);
  std::ifstream f(o.case_json, std::ios::binary);
  if (!f) {
    fmt::print(stderr, "error: cannot open {}\n", o.case_json);
    return 1;
  }
  auto j = nlohmann::ordered_json::parse(read_all(f), nullptr, false);
  if (j.is_discarded()) {
    fmt::print(stderr, "error: {} is not valid JSON\n", o.case_json);
    return 1;
  }
  // Accept a bare request or a test case holding {"request": ...}.
  if (j.is_object() && j.contains("request") && !j.contains("messages")) j = j["request"];
  auto prompt = text::render_prompt(j);
  if (!prompt.ok()) {
    fmt::print(stderr, "error: {}\n", prompt.status().to_string());
    return 1;
  }
  std::cout << *prompt;
  return 0;
}

struct ParseOpts {
  std::string mode = "thinking";
};

int run_parse(void* p) {
  const auto& o = *static_cast<ParseOpts*>(p);
  const std::string text = read_all(std::cin);
  auto msg = text::parse_completion(text, o.mode == "chat" ? text::Mode::chat : text::Mode::thinking);
  if (!msg.ok()) {
    fmt::print(stderr, "error: {}\n", msg.status().to_string());
    return 1;
  }
  std::cout << text::to_openai_json(*msg).dump(2) << "\n";
  return 0;
}

struct TokenizeOpts {
  std::string tokenizer;
  bool no_special = false;
};

int run_tokenize(void* p) {
  const auto& o = *static_cast<TokenizeOpts*>(p);
  auto tok = text::Tokenizer::from_json_file(o.tokenizer);
  if (!tok.ok()) {
    fmt::print(stderr, "error: {}\n", tok.status().to_string());
    return 1;
  }
  const std::string text = read_all(std::cin);
  const auto ids = tok->encode(text, !o.no_special);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  std::cout << out << "\n";
  return 0;
}

}  // namespace

Command add_template(CLI::App& app) {
  auto o = std::make_shared<TemplateOpts>();
  auto* sub = app.add_subcommand("template", "Print the exact prompt text of one conversation (OpenAI-style JSON)");
  sub->add_option("case_json", o->case_json, "JSON file: messages, tools, thinking_mode, reasoning_effort")->required();
  return {sub, run_template, o};
}

Command add_parse(CLI::App& app) {
  auto o = std::make_shared<ParseOpts>();
  auto* sub = app.add_subcommand("parse", "Parse a completion on stdin into an OpenAI assistant message");
  sub->add_option("--mode", o->mode, "thinking or chat")->check(CLI::IsMember({"thinking", "chat"}));
  return {sub, run_parse, o};
}

Command add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOpts>();
  auto* sub = app.add_subcommand("tokenize", "Tokenize UTF-8 text on stdin; print the ids separated by spaces");
  sub->add_option("tokenizer_json", o->tokenizer, "a Hugging Face tokenizer.json")->required();
  sub->add_flag("--no-special", o->no_special, "treat special-token text as plain text");
  return {sub, run_tokenize, o};
}

}  // namespace dsv41::cli
