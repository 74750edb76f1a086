// dsv41 golden MODEL_DIR [--dump OUT.safetensors]: the layer-by-layer check against golden.safetensors.
#include <string>

#include <fmt/core.h>

#include <dsv41/model/golden.hpp>
#include <dsv41/model/model.hpp>

#include "commands.hpp"

namespace dsv41::cli {
#if DSV41_CLI_CUDA
int golden_on_cuda(const std::string& dir, const std::string& golden_path, const std::string& dump);
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
  auto m = Model<>::load(o.dir);
  if (!m.ok()) {
    fmt::print(stderr, "error: {}\n", m.status().to_string());
    return 1;
  }
  const std::string gpath = o.golden.empty() ? o.dir + "/golden.safetensors" : o.golden;
  std::vector<st::TensorToWrite> dump;
  auto rep = golden::run(**m, gpath, o.dump.empty() ? nullptr : &dump);
  if (!rep.ok()) {
    fmt::print(stderr, "error: {}\n", rep.status().to_string());
    return 1;
  }
  fmt::print("{}", rep->summary());
  if (!o.dump.empty()) {
    Status s = st::write(o.dump, dump);
    if (!s.ok()) {
      fmt::print(stderr, "error: {}\n", s.to_string());
      return 1;
    }
    fmt::print("wrote {} tensors to {}\n", dump.size(), o.dump);
  }
  return rep->pass ? 0 : 1;
}

}  // namespace

Command add_golden(CLI::App& app) {
  auto* o = new GoldenOpts;
  auto* sub = app.add_subcommand("golden", "Check the model layer by layer against its golden.safetensors");
  sub->add_option("model_dir", o->dir, "model directory holding golden.safetensors")->required();
  sub->add_option("--golden", o->golden, "golden file (default MODEL_DIR/golden.safetensors)");
  sub->add_option("--dump", o->dump, "write every recorded tensor to this safetensors file");
  sub->add_option("--device", o->device, "cpu (reference) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  return {sub, run_golden, o};
}

}  // namespace dsv41::cli
