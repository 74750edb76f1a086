// Loads a model directory and its tokenizer for the text commands (generate, chat, serve, perplexity).
#pragma once
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <dsv41/model/model.hpp>
#include <dsv41/text/text_model.hpp>

namespace dsv41::cli {

using TextLM = text::TextModel<Model<>>;

struct Loaded {
  std::unique_ptr<Model<>> model;
  std::unique_ptr<TextLM> text;
};

struct LoadArgs {
  std::string model_dir, tokenizer;
  bool progress = false;
};

inline bool print_progress(void*, float f, const char* stage) {
  const int w = 30, n = int(f * w + 0.5f);
  std::fprintf(stderr, "\rloading [%.*s%*s] %3d%% %-12s", n, "##############################", w - n, "", int(f * 100), stage);
  if (f >= 1.f) std::fprintf(stderr, "\n");
  return true;
}

inline Result<Loaded> load_text_model(const LoadArgs& a) {
  LoadOptions lo;
  if (a.progress) lo.progress = print_progress;
  auto m = Model<>::load(a.model_dir, lo);
  if (!m.ok()) return m.status();
  const std::string tp = a.tokenizer.empty() ? a.model_dir + "/tokenizer.json" : a.tokenizer;
  if (!std::filesystem::exists(tp)) return error(Code::io_error, tp + ": no tokenizer (give --tokenizer)");
  auto tok = text::Tokenizer::from_json_file(tp);
  if (!tok.ok()) return tok.status();
  Loaded l;
  l.model = std::move(m).value();
  auto tm = TextLM::make(*l.model, std::move(tok).value());
  if (!tm.ok()) return tm.status();
  l.text = std::make_unique<TextLM>(std::move(tm).value());
  return l;
}

}  // namespace dsv41::cli
