// Subcommands of the dsv41 CLI. Each registers itself on the app and returns the exit code it wants.
#pragma once
#include <memory>

#include <CLI/CLI.hpp>

#include "session_args.hpp"

namespace dsv41::cli {

struct Command {
  CLI::App* sub = nullptr;
  int (*run)(void* opts) = nullptr;
  std::shared_ptr<void> opts;  // the options CLI11 parses into; freed when main's command list goes
};

// --cache-dir, --no-cache, --session-block (chat and serve).
inline void add_session_options(CLI::App* sub, SessionArgs& s) {
  auto* dir = sub->add_option("--cache-dir", s.cache_dir,
                              "keep sessions here: global KV on disk, windows in memory (CPU only; default "
                              "$XDG_CACHE_HOME/dsv41/sessions, else ~/.cache/dsv41/sessions)");
  sub->add_flag("--no-cache", s.no_cache, "keep no sessions")->excludes(dir);
  sub->add_option("--session-block", s.block, "tokens per stored block (a multiple of the compression ratios)")
      ->check(CLI::Range(1, 1 << 20));
}

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
