// A small safetensors writer. Host only: uses nlohmann-json.
#pragma once
#include <dsv41/core/status.hpp>
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

// One tensor to write. Data comes from `view` when set (borrowed: the caller keeps it alive),
// otherwise from `bytes` (owned). Elements are little-endian, row-major.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  std::optional<std::span<const std::byte>> view;

  std::span<const std::byte> data() const {
    return view ? *view : std::span<const std::byte>(bytes);
  }
};

namespace detail {
inline Status write_impl(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  using ojson = nlohmann::ordered_json;
  auto bad = [&](std::string msg) {
    return error(Code::invalid_argument, "write '" + path + "': " + msg);
  };
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string tn = "tensor " + quote(t.name) + ": ";
    if (t.name == "__metadata__") return bad(tn + "the name is reserved");
    if (!seen.insert(t.name).second) return bad(tn + "duplicate name");
    uint64_t numel = 1;
    bool overflow = false;
    for (int64_t d : t.shape) {
      if (d < 0) return bad(tn + "negative dimension in shape " + shape_string(t.shape));
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t.dtype)), &nbytes))
      return bad(tn + "shape " + shape_string(t.shape) + " overflows");
    if (t.data().size() != nbytes)
      return bad(tn + "shape " + shape_string(t.shape) + " x " + dtype_name(t.dtype) + " needs " +
                 std::to_string(nbytes) + " bytes, got " + std::to_string(t.data().size()));
    ojson e = ojson::object();
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + nbytes};
    header[t.name] = std::move(e);
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ojson::exception& e) {  // e.g. a name that is not valid UTF-8
    return bad(std::string("cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-aligned
  if (text.size() > kMaxHeaderBytes) return bad("header larger than the 100 MB limit");

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    return error(Code::io_error, "write '" + path + "': cannot create '" + tmp + "': " +
                                     std::generic_category().message(errno));
  int err = 0;  // errno of the first failure
  auto put = [&](const void* p, size_t n) {
    if (err == 0 && n != 0 && std::fwrite(p, 1, n, f) != n) err = errno ? errno : EIO;
  };
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  put(len, 8);
  put(text.data(), text.size());
  for (const TensorToWrite& t : tensors) put(t.data().data(), t.data().size());
  if (std::fclose(f) != 0 && err == 0) err = errno ? errno : EIO;
  if (err != 0) {
    std::remove(tmp.c_str());
    return error(Code::io_error, "write '" + path + "': writing '" + tmp + "' failed: " +
                                     std::generic_category().message(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return error(Code::io_error, "write '" + path + "': cannot rename '" + tmp +
                                     "': " + std::generic_category().message(e));
  }
  return Status::Ok();
}
}  // namespace detail

// Writes a safetensors file: tensors' data in the given order, no gaps, header padded with spaces
// so the data section starts at a multiple of 8 (put wider dtypes first to keep every tensor
// aligned). Writes `path`.tmp, then renames it over `path`.
inline Status write(const std::string& path, const std::vector<TensorToWrite>& tensors,
                    const std::map<std::string, std::string>& metadata = {}) {
  try {
    return detail::write_impl(path, tensors, metadata);
  } catch (...) {
    return detail::status_from_current_exception("write '" + path + "'");
  }
}

}  // namespace dsv41::st
