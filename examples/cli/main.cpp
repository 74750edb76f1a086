// dsv41: command-line front end of the library.
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dsv41: DeepSeek-V4.1-Flash inference"};
  app.require_subcommand(1);
  using namespace dsv41::cli;
  std::vector<Command> cmds = {add_inspect(app), add_golden(app), add_template(app), add_parse(app), add_tokenize(app),
                               add_generate(app), add_chat(app), add_serve(app), add_perplexity(app)};
  CLI11_PARSE(app, argc, argv);
  for (auto& c : cmds)
    if (c.sub->parsed()) return c.run(c.opts.get());
  return 2;
}
