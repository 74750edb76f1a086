// A small text file read whole (config.json, tokenizer.json, generation_config.json): only a regular file (not a
// FIFO, device or directory; symlinks followed, loops an error), at most max_bytes, never an exception.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include <dsv41/core/status.hpp>

namespace dsv41 {

inline Result<std::string> read_small_file(const std::string& path, uintmax_t max_bytes) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec) return error(Code::io_error, path + ": cannot open (" + ec.message() + ")");
  if (!std::filesystem::is_regular_file(st)) return error(Code::io_error, path + ": not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return error(Code::io_error, path + ": cannot read its size (" + ec.message() + ")");
  if (size > max_bytes)
    return error(Code::format_error, path + ": " + std::to_string(size) + " bytes, more than the " +
                                         std::to_string(max_bytes) + " this file may have");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return error(Code::io_error, path + ": cannot open");
  std::string out(size_t(size), '\0');
  const size_t got = size ? std::fread(out.data(), 1, out.size(), f) : 0;
  const bool more = std::fgetc(f) != EOF;  // grew while read
  std::fclose(f);
  if (got != out.size() || more) return error(Code::io_error, path + ": changed or unreadable while read");
  return Result<std::string>(std::move(out));
}

}  // namespace dsv41
