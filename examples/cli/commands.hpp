// Subcommands of the dsv41 CLI. Each registers itself on the app and returns the exit code it wants.
#pragma once
#include <CLI/CLI.hpp>

namespace dsv41::cli {

struct Command {
  CLI::App* sub = nullptr;
  int (*run)(void* opts) = nullptr;
  void* opts = nullptr;
};

Command add_inspect(CLI::App& app);
Command add_golden(CLI::App& app);
Command add_template(CLI::App& app);
Command add_parse(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_generate(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_perplexity(CLI::App& app);

}  // namespace dsv41::cli
