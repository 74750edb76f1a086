// A safetensors file (header + data) through st::File::open and every tensor lookup; the reader validates the
// header (offsets, shapes, dtypes) before anything touches the data.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include <dsv41/io/safetensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = "/tmp/dsv41_fuzz_st_" + std::to_string(::getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = dsv41::st::File::open(path);
  if (file.ok())
    for (const auto& name : file->names()) {
      const auto* t = file->find(name);
      if (t && t->numel() > 0) {
        volatile std::byte first = t->data[0];
        (void)first;
      }
    }
  std::remove(path.c_str());
  return 0;
}
