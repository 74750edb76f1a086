// `--device cpu` for the CLI, as cmd_cuda.cu is for cuda: the golden check on the CPU model, and the engine over
// Model<> for the text commands (generate, chat, serve, perplexity). The CPU model is instantiated in this unit
// only; the commands see the TextEngine interface (text_loader.hpp).
#include <string>
#include <vector>

#include <fmt/core.h>

#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#include "text_loader.hpp"

namespace dsv41::cli {

int golden_on_cpu(const std::string& dir, const std::string& golden_path, const std::string& dump_path) {
  auto m = Model<>::load(dir);
  if (!m.ok()) {
    fmt::print(stderr, "error: {}\n", m.status().to_string());
    return 1;
  }
  std::vector<st::TensorToWrite> dump;
  auto rep = golden::run(**m, golden_path, dump_path.empty() ? nullptr : &dump);
  if (!rep.ok()) {
    fmt::print(stderr, "error: {}\n", rep.status().to_string());
    return 1;
  }
  fmt::print("{}", rep->summary());
  if (!dump_path.empty()) {
    Status s = st::write(dump_path, dump);
    if (!s.ok()) {
      fmt::print(stderr, "error: {}\n", s.to_string());
      return 1;
    }
    fmt::print("wrote {} tensors to {}\n", dump.size(), dump_path);
  }
  return rep->pass ? 0 : 1;
}

Result<std::unique_ptr<TextEngine>> load_text_model(const LoadArgs& a) {
  if (a.device == "cuda") {
#if DSV41_CLI_CUDA
    return load_cuda_engine(a);
#else
    return error(Code::unsupported, "this dsv41 was built without CUDA");
#endif
  }
  LoadOptions lo;
  if (a.progress) lo.progress = print_progress;
  auto m = Model<>::load(a.model_dir, lo);
  if (!m.ok()) return m.status();
  auto tok = load_tokenizer(a);
  if (!tok.ok()) return tok.status();
  auto e = std::make_unique<TextEngineOf<Model<>>>(std::move(m).value());
  DSV41_TRY(e->init(std::move(tok).value()));
  return Result<std::unique_ptr<TextEngine>>(std::move(e));
}

}  // namespace dsv41::cli
