// Shared by the GPU model tests: where the tiny-ced fixture and the bundled model are (the build's paths, else the
// repository's when run from its root), and a deterministic prompt.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dsv41::gputest {

inline std::string data_dir(const std::string& built, const std::string& local) {
  return std::filesystem::exists(built) ? built : local;
}
inline const std::string kTiny = data_dir(std::string(DSV41_TEST_DATA) + "/golden/tiny-ced", "tests/data/golden/tiny-ced");
inline const std::string kPy =
    data_dir(std::string(DSV41_TEST_DATA) + "/../../models/dsv41-tiny-py", "models/dsv41-tiny-py");

// n token ids in [0, V) from an LCG seeded by seed.
inline std::vector<int32_t> prompt(int n, int V, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t x = seed;
  for (auto& t : ids) {
    x = x * 1664525u + 1013904223u;
    t = int32_t((x >> 8) % uint32_t(V));
  }
  return ids;
}

}  // namespace dsv41::gputest
