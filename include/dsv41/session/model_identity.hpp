// The identity of a model directory that stored blocks are keyed by (block_key.hpp): a digest of config.json's
// bytes and a digest of the weights (every .safetensors file but golden.safetensors: the Engram token map counts). Hashing ~500 GB at every start is not an option, so the weights' digest covers
// every shard's name, size and safetensors header (names, dtypes, shapes, offsets) and 16 samples of 4 KiB at evenly
// spaced offsets of each shard: another layout, dtype or shard size always changes it; re-quantized weights of the
// same layout change it unless every sampled byte is the same.
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <dsv41/core/status.hpp>
#include <dsv41/session/block_key.hpp>

namespace dsv41::session {

namespace detail {
inline Result<std::vector<uint8_t>> read_range(const std::string& path, uint64_t off, uint64_t n) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error(Code::io_error, path + ": cannot open");
  f.seekg(std::streamoff(off));
  std::vector<uint8_t> b(static_cast<size_t>(n));
  f.read(reinterpret_cast<char*>(b.data()), std::streamsize(n));
  if (f.gcount() != std::streamsize(n)) return error(Code::io_error, path + ": short read");
  return Result<std::vector<uint8_t>>(std::move(b));
}
}  // namespace detail

inline Result<ModelIdentity> model_identity(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ModelIdentity id;
  const std::string cfg = dir + "/config.json";
  const uint64_t cfg_size = fs::file_size(cfg, ec);
  if (ec) return error(Code::io_error, cfg + ": " + ec.message());
  auto c = detail::read_range(cfg, 0, cfg_size);
  if (!c.ok()) return c.status();
  id.config_digest = checksum(*c);
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors" && e.path().filename() != "golden.safetensors")
      shards.push_back(e.path().filename().string());
  if (ec) return error(Code::io_error, dir + ": " + ec.message());
  if (shards.empty()) return error(Code::io_error, dir + ": no .safetensors files");
  std::sort(shards.begin(), shards.end());
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  for (const auto& name : shards) {
    const std::string path = dir + "/" + name;
    const uint64_t size = fs::file_size(path, ec);
    if (ec || size < 8) return error(Code::io_error, path + ": unreadable or too short");
    XXH3_64bits_update(&st, name.data(), name.size());
    XXH3_64bits_update(&st, &size, sizeof size);
    auto len = detail::read_range(path, 0, 8);
    if (!len.ok()) return len.status();
    uint64_t hl = 0;
    for (int i = 7; i >= 0; --i) hl = (hl << 8) | (*len)[size_t(i)];
    if (hl > size - 8) return error(Code::format_error, path + ": header length past the end of the file");
    auto header = detail::read_range(path, 8, hl);
    if (!header.ok()) return header.status();
    XXH3_64bits_update(&st, header->data(), header->size());
    const uint64_t body = 8 + hl, span = size - body, piece = std::min<uint64_t>(4096, span);
    for (int k = 0; k < 16 && piece > 0; ++k) {
      const uint64_t off = body + (span - piece) * uint64_t(k) / 15;
      auto b = detail::read_range(path, off, piece);
      if (!b.ok()) return b.status();
      XXH3_64bits_update(&st, b->data(), b->size());
    }
  }
  id.weights_digest = XXH3_64bits_digest(&st);
  return id;
}

}  // namespace dsv41::session
