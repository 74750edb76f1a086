// dsv41: command-line front end of the library.
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dsv41: DeepSeek-V4.1-Flash inference"};
  app.require_subcommand(1);
  std::vector<dsv41::cli::Command> cmds = {dsv41::cli::add_inspect(app), dsv41::cli::add_golden(app)};
  CLI11_PARSE(app, argc, argv);
  for (auto& c : cmds)
    if (c.sub->parsed()) return c.run(c.opts);
  return 2;
}
