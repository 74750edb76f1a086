// custom_config MODEL_DIR "PROMPT" [OTHER_DIR]: a compile-time configuration of one's own (tiny_py.hpp),
// Model<TinyPy> on the CPU answering PROMPT in the chat format, then the same on the GPU when built with
// CUDA and one is present. OTHER_DIR, a model of another shape, shows the loader refusing it.
#include <cstdio>
#include <string>

#include <dsv41/model/model.hpp>

#include "answer.hpp"
#include "tiny_py.hpp"

#if CUSTOM_CONFIG_CUDA
int run_on_gpu(const std::string& dir, const std::string& prompt);  // gpu.cu
#endif

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: custom_config MODEL_DIR \"PROMPT\" [OTHER_DIR]\n");
    return 2;
  }
  const std::string dir = argv[1], prompt = argv[2];
  std::printf("TinyPy: %d layers, d=%d, window %d; compile-time window rings %lld bytes per sequence\n",
              TinyPy::num_hidden_layers, TinyPy::hidden_size, TinyPy::sliding_window,
              (long long)dsv41::configs::window_bytes_per_sequence<TinyPy>());

  auto model = dsv41::Model<TinyPy>::load(dir);  // Backend defaults to dsv41::Cpu
  if (!model.ok()) {
    std::fprintf(stderr, "load %s: %s\n", dir.c_str(), model.status().to_string().c_str());
    return 1;
  }
  if (int rc = answer(**model, dir, prompt, "cpu")) return rc;

#if CUSTOM_CONFIG_CUDA
  if (int rc = run_on_gpu(dir, prompt)) return rc;
#else
  std::printf("[gpu] skipped: built without CUDA\n");
#endif

  // A directory of another shape: Model<TinyPy>::load refuses it and names each differing field.
  if (argc > 3) {
    auto other = dsv41::Model<TinyPy>::load(argv[3]);
    if (other.ok()) {
      std::fprintf(stderr, "%s: loaded into Model<TinyPy>, expected a mismatch\n", argv[3]);
      return 1;
    }
    std::printf("Model<TinyPy>::load(%s) refused, as it should be:\n%s\n", argv[3], other.status().to_string().c_str());
  }
  return 0;
}
