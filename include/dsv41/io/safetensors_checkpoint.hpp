// A safetensors checkpoint: model.safetensors.index.json and its shards, a single
// model.safetensors, or one file. Host only, like the reader.
#pragma once
#include <dsv41/core/status.hpp>
#include <dsv41/io/safetensors_reader.hpp>
#include <dsv41/io/safetensors_types.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace dsv41::st {

// A model checkpoint: a directory with model.safetensors.index.json and its shards, a directory
// with a single model.safetensors, or one .safetensors file. Every shard is opened and validated
// by open(); tensor bytes stay unread until used.
//
// Index rules: the JSON has a non-empty "weight_map" object of tensor -> shard file name (other
// top-level keys such as "metadata" are ignored); shard names are plain file names in the same
// directory (no '/', '\\' or ".."); every shard must open; every tensor listed must be in its
// shard. Design choice: a shard must hold exactly the tensors the index assigns to it, so a tensor
// present in a shard but absent from the index is an error (a stale or mismatched index), and a
// tensor present in two shards is an error.
class Checkpoint {
 public:
  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  static Result<Checkpoint> open(const std::string& path) {
    try {
      return open_impl(path);
    } catch (...) {
      return detail::status_from_current_exception("checkpoint '" + path + "'");
    }
  }

  Result<TensorView> get(std::string_view name) const {
    auto it = where_.find(name);
    if (it == where_.end())
      return error(Code::format_error,
                   "tensor " + detail::quote(name) + " not found in checkpoint '" + path_ + "'");
    const TensorView* tv = shards_[it->second].find(name);
    if (tv == nullptr)  // unreachable after open()'s checks
      return error(Code::internal, "tensor " + detail::quote(name) + " missing from shard '" +
                                       shards_[it->second].path() + "'");
    return *tv;
  }
  // get() plus a check of dtype and shape; Code::mismatch names the tensor, file and both sides.
  Result<TensorView> get(std::string_view name, DType dtype,
                         const std::vector<int64_t>& shape) const {
    auto r = get(name);
    if (!r.ok()) return r;
    if (r->dtype != dtype || r->shape != shape)
      return error(Code::mismatch, r->where() + ": expected " + dtype_name(dtype) + " " +
                                       detail::shape_string(shape) + ", found " +
                                       dtype_name(r->dtype) + " " +
                                       detail::shape_string(r->shape));
    return r;
  }
  bool contains(std::string_view name) const { return where_.find(name) != where_.end(); }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> r;
    r.reserve(where_.size());
    for (const auto& kv : where_) r.push_back(kv.first);
    return r;
  }
  size_t num_shards() const { return shards_.size(); }
  const File& shard(size_t i) const { return shards_.at(i); }
  const std::string& path() const { return path_; }

 private:
  Checkpoint() = default;

  static Result<Checkpoint> open_impl(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st))
      return error(Code::io_error, "cannot open checkpoint '" + path + "': " +
                                       (ec ? ec.message() : std::string("no such file")));
    if (!fs::is_directory(st)) return open_single(path, path);
    const std::string index = (fs::path(path) / kIndexFileName).string();
    if (fs::exists(index, ec)) return open_sharded(path, index);
    const std::string single = (fs::path(path) / kSingleFileName).string();
    if (fs::exists(single, ec)) return open_single(path, single);
    return error(Code::io_error, "checkpoint directory '" + path + "' has neither " +
                                     kIndexFileName + " nor " + kSingleFileName);
  }

  static Result<Checkpoint> open_single(const std::string& path, const std::string& file) {
    auto f = File::open(file);
    if (!f.ok()) return f.status();
    Checkpoint c;
    c.path_ = path;
    for (const auto& n : f->names()) c.where_.emplace(n, 0);
    c.shards_.push_back(std::move(f).value());
    return Result<Checkpoint>(std::move(c));
  }

  static bool plain_file_name(const std::string& s) {
    return !s.empty() && s.find('/') == std::string::npos &&
           s.find('\\') == std::string::npos && s.find('\0') == std::string::npos &&
           s.find("..") == std::string::npos && s != ".";
  }

  static Result<Checkpoint> open_sharded(const std::string& dir, const std::string& index) {
    using json = nlohmann::json;
    namespace fs = std::filesystem;
    auto fail = [&](Code c, std::string msg) {
      return error(c, "checkpoint '" + dir + "': " + msg);
    };
    auto m = io::MappedFile::open(index);
    if (!m.ok()) return fail(Code::io_error, m.status().message());
    if (m->size() > kMaxIndexBytes)
      return fail(Code::format_error, std::string(kIndexFileName) + " is larger than " +
                                          std::to_string(kMaxIndexBytes) + " bytes");
    const char* text = reinterpret_cast<const char*>(m->data());
    std::string jerr;
    auto parsed = detail::parse_json_unique(text, text + m->size(), jerr);
    if (!parsed) return fail(Code::format_error, std::string(kIndexFileName) + ": " + jerr);
    const json& j = *parsed;
    if (!j.is_object())
      return fail(Code::format_error, std::string(kIndexFileName) + " is not a JSON object");
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      return fail(Code::format_error,
                  std::string(kIndexFileName) + " has no 'weight_map' object");
    const json& wm = j["weight_map"];
    if (wm.empty())
      return fail(Code::format_error, std::string(kIndexFileName) + ": 'weight_map' is empty");

    std::map<std::string, size_t, std::less<>> shard_ids;  // shard file name -> index (sorted)
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it.value().is_string())
        return fail(Code::format_error, std::string(kIndexFileName) + ": weight_map entry for " +
                                            detail::quote(it.key()) + " is not a string");
      const auto& s = it.value().get_ref<const std::string&>();
      if (!plain_file_name(s))
        return fail(Code::format_error,
                    std::string(kIndexFileName) + ": shard name " + detail::quote(s) +
                        " for tensor " + detail::quote(it.key()) +
                        " is not a plain file name (no '/', '\\' or '..')");
      shard_ids.emplace(s, 0);
    }
    Checkpoint c;
    c.path_ = dir;
    std::vector<std::string> shard_names;
    for (auto& [name, id] : shard_ids) {
      id = shard_names.size();
      shard_names.push_back(name);
      auto f = File::open((fs::path(dir) / name).string());
      if (!f.ok())
        return fail(f.status().code(), "shard " + detail::quote(name) + ": " +
                                           f.status().message());
      c.shards_.push_back(std::move(f).value());
    }
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const size_t id = shard_ids.find(it.value().get_ref<const std::string&>())->second;
      if (c.shards_[id].find(it.key()) == nullptr)
        return fail(Code::format_error,
                    "tensor " + detail::quote(it.key()) + " is listed in " + kIndexFileName +
                        " for shard " + detail::quote(shard_names[id]) +
                        " but that shard does not contain it");
      c.where_.emplace(it.key(), id);
    }
    for (size_t id = 0; id < c.shards_.size(); ++id) {
      for (const auto& n : c.shards_[id].names()) {
        auto w = c.where_.find(n);
        if (w == c.where_.end())
          return fail(Code::format_error,
                      "tensor " + detail::quote(n) + " in shard " + detail::quote(shard_names[id]) +
                          " is not listed in " + kIndexFileName +
                          " (every tensor of a shard must be in the index)");
        if (w->second != id)
          return fail(Code::format_error, "tensor " + detail::quote(n) + " appears in both shard " +
                                              detail::quote(shard_names[w->second]) +
                                              " and shard " + detail::quote(shard_names[id]) +
                                              " (duplicate tensor across shards)");
      }
    }
    return Result<Checkpoint>(std::move(c));
  }

  std::string path_;
  std::vector<File> shards_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor -> shard
};

}  // namespace dsv41::st
