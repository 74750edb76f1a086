// model.safetensors.index.json → st::Checkpoint::open on a directory that holds the two valid shards of
// tests/data/safetensors/valid/sharded: the index must be a JSON object whose weight_map names plain shard files,
// every listed tensor in its shard and every shard tensor listed, or it is refused; an accepted checkpoint's
// tensors are then read end to end. Refused or accepted, never a crash, a leak or an access outside a shard.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include <dsv41/io/safetensors_checkpoint.hpp>

#ifndef DSV41_FIXTURES
#error "DSV41_FIXTURES: the golden model directories (tests/data/golden)"
#endif

namespace {
struct Dir {
  std::filesystem::path path;
  Dir() {
    namespace fs = std::filesystem;
    path = fs::temp_directory_path() / ("dsv41_fuzz_ckpt_" + std::to_string(::getpid()));
    std::error_code ec;
    fs::create_directories(path, ec);
    const fs::path src = fs::path(DSV41_FIXTURES) / ".." / "safetensors" / "valid" / "sharded";
    for (const char* n : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
      fs::copy_file(src / n, path / n, fs::copy_options::overwrite_existing, ec);
  }
  ~Dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Dir dir;
  const std::string index = (dir.path / "model.safetensors.index.json").string();
  FILE* f = std::fopen(index.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto c = dsv41::st::Checkpoint::open(dir.path.string());
  if (c.ok())
    for (const auto& name : c->names()) {
      auto t = c->get(name);
      if (!t.ok()) continue;
      unsigned x = 0;
      for (std::byte b : t->bytes()) x ^= unsigned(b);
      volatile unsigned sink = x;
      (void)sink;
    }
  return 0;
}
