// Loads a model directory with a compile-time configuration and runs a short prompt.
#include <cstdio>
#include <vector>

#include <dsv41/dsv41.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer_host MODEL_DIR\n");
    return 2;
  }
  auto model = dsv41::Model<dsv41::configs::TinyCed>::load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  dsv41::SequenceState seq = (*model)->new_sequence(32);
  std::vector<int32_t> prompt = {0, 17, 42, 99};
  std::vector<float> logits;
  dsv41::Status s = (*model)->prefill(seq, prompt, &logits);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 1;
  }
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  std::printf("next token after %zu prompt tokens: %zu (KV cache %zu bytes)\n", prompt.size(), best,
              seq.global_cache_bytes());
  return 0;
}
