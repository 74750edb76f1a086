// dsv41 golden MODEL_DIR [--dump OUT.safetensors]: the layer-by-layer check against golden.safetensors.
#include <string>

#include <fmt/core.h>

#include "commands.hpp"

namespace dsv41::cli {
int golden_on_cpu(const std::string& dir, const std::string& golden_path, const std::string& dump);  // cmd_cpu.cpp
#if DSV41_CLI_CUDA
int golden_on_cuda(const std::string& dir, const std::string& golden_path, const std::string& dump);  // cmd_cuda.cu
#endif
namespace {

struct GoldenOpts {
  std::string dir, golden, dump, device = "cpu";
};

int run_golden(void* p) {
  const auto& o = *static_cast<GoldenOpts*>(p);
  if (o.device == "cuda") {
#if DSV41_CLI_CUDA
    return golden_on_cuda(o.dir, o.golden.empty() ? o.dir + "/golden.safetensors" : o.golden, o.dump);
#else
    fmt::print(stderr, "error: this dsv41 was built without CUDA\n");
    return 1;
#endif
  }
  return golden_on_cpu(o.dir, o.golden.empty() ? o.dir + "/golden.safetensors" : o.golden, o.dump);
}

}  // namespace

Command add_golden(CLI::App& app) {
  auto o = std::make_shared<GoldenOpts>();
  auto* sub = app.add_subcommand("golden", "Check the model layer by layer against its golden.safetensors");
  sub->add_option("model_dir", o->dir, "model directory holding golden.safetensors")->required();
  sub->add_option("--golden", o->golden, "golden file (default MODEL_DIR/golden.safetensors)");
  sub->add_option("--dump", o->dump, "write every recorded tensor to this safetensors file");
  sub->add_option("--device", o->device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  return {sub, run_golden, o};
}

}  // namespace dsv41::cli
