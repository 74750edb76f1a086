// Safetensors reader (memory-mapped, lazy, fully validated) and a small writer. Host only: uses
// nlohmann-json and POSIX mmap, so keep it out of .cu translation units.
//
// File layout: u64 little-endian N, N bytes of JSON header, then the data section. Rules enforced
// on read (the safetensors spec and its Rust reference implementation, plus a few stricter ones):
//  - the file holds at least 8 bytes; 0 < N <= kMaxHeaderBytes (100 MB, as the reference) and
//    N <= file size - 8;
//  - the header starts with '{' (a MUST of the spec, which safetensors 0.8 does not enforce) and
//    is one valid JSON object (UTF-8, no NUL byte), optionally followed by whitespace (the spec
//    pads with spaces); duplicate keys anywhere are rejected (the spec forbids them; nlohmann and
//    safetensors 0.8 would silently keep one);
//  - "__metadata__", when present, is an object of string -> string (null is refused);
//  - every other entry is an object with exactly "dtype" (a DType name; other spec dtypes such as
//    U32 or F8_E5M2 are refused as unsupported), "shape" (array of non-negative integers, each
//    <= INT64_MAX, product and byte size overflow-checked) and "data_offsets" ([begin, end],
//    non-negative integers, begin <= end); unknown fields are refused;
//  - end - begin == numel * dtype_size, end <= data section size;
//  - the ranges, sorted, tile the data section exactly: no overlap, no hole, no trailing bytes
//    (the Rust reference rejects holes and uncovered bytes, which also prevents polyglot files).
// Tensor bytes are never touched by open(); only the header is read.
#pragma once
#include <dsv41/core/status.hpp>
#include <dsv41/io/mapped_file.hpp>

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

enum class DType { BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64, F8_E4M3, F8_E8M0 };

inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // same limit as the reference
inline constexpr uint64_t kMaxIndexBytes = 100'000'000;   // model.safetensors.index.json
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kSingleFileName = "model.safetensors";

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::BOOL: case DType::U8: case DType::I8: case DType::F8_E4M3: case DType::F8_E8M0:
      return 1;
    case DType::I16: case DType::F16: case DType::BF16:
      return 2;
    case DType::I32: case DType::F32:
      return 4;
    case DType::I64: case DType::F64:
      return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::BOOL: return "BOOL";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::I16: return "I16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E8M0: return "F8_E8M0";
  }
  return "?";
}

inline constexpr DType kAllDTypes[] = {DType::BOOL, DType::U8,   DType::I8,   DType::I16,
                                       DType::I32,  DType::I64,  DType::F16,  DType::BF16,
                                       DType::F32,  DType::F64,  DType::F8_E4M3, DType::F8_E8M0};

// Exact, case-sensitive spec names ("F32", "F8_E4M3", ...). Other spec dtypes (U16, U32, U64,
// F8_E5M2, ...) are not supported and give nullopt.
inline std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : kAllDTypes)
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

namespace detail {

// A name or value for an error message: quoted, cut to a readable length.
inline std::string quote(std::string_view s) {
  constexpr size_t kMax = 160;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...' (" + std::to_string(s.size()) + " bytes)";
}

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) r += ',';
    r += std::to_string(shape[i]);
  }
  r += ']';
  return r;
}

// Converts a stray exception (only allocation failure is expected) into a Status.
inline Status status_from_current_exception(const std::string& what) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return error(Code::out_of_memory, what + ": out of memory");
  } catch (const std::exception& e) {
    return error(Code::internal, what + ": unexpected exception: " + e.what());
  } catch (...) {
    return error(Code::internal, what + ": unexpected exception");
  }
}

// Parses JSON text strictly (trailing whitespace only) and rejects duplicate object keys, which
// nlohmann::json would otherwise resolve silently. On failure returns nullopt and sets `err`.
inline std::optional<nlohmann::json> parse_json_unique(const char* first, const char* last,
                                                       std::string& err) {
  using json = nlohmann::json;
  struct Level {
    std::set<std::string, std::less<>> seen;
    std::string name;  // key under which this object sits ("" for the root)
    std::string last;  // last key read at this level
  };
  if (first == nullptr || first == last) {
    err = "not valid JSON: empty";
    return std::nullopt;
  }
  // nlohmann's lexer takes a NUL byte for the end of input, which would let anything after it
  // pass; JSON text never holds a raw NUL, so refuse it up front.
  if (const void* z = std::memchr(first, 0, static_cast<size_t>(last - first))) {
    err = "not valid JSON: NUL byte at offset " +
          std::to_string(static_cast<const char*>(z) - first);
    return std::nullopt;
  }
  std::vector<Level> levels;
  std::string dup, dup_in;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
        levels.push_back(Level{{}, levels.empty() ? std::string() : levels.back().last, {}});
        break;
      case json::parse_event_t::key:
        if (!levels.empty() && parsed.is_string()) {
          const auto& k = parsed.get_ref<const std::string&>();
          if (!levels.back().seen.insert(k).second && dup.empty()) {
            dup = k;
            dup_in = levels.back().name;
          }
          levels.back().last = k;
        }
        break;
      case json::parse_event_t::object_end:
        if (!levels.empty()) levels.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    json j = json::parse(first, last, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    if (!dup.empty()) {
      err = "duplicate key " + quote(dup) +
            (dup_in.empty() ? std::string(" at the top level") : " inside " + quote(dup_in)) +
            " (JSON keys must be unique)";
      return std::nullopt;
    }
    return j;
  } catch (const json::exception& e) {
    err = std::string("not valid JSON: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace detail

// A tensor inside a mapped file: metadata plus a pointer to its bytes (not copied, not read).
// Valid while the File (or Checkpoint) it came from is alive.
struct TensorView {
  std::string_view name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the file holding it

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::span<const std::byte> bytes() const { return {data, nbytes}; }

  // True when the bytes can be read in place as T: sizeof(T) == dtype_size(dtype) and the data is
  // aligned for T (files whose header length is not a multiple of 8 can misalign it).
  template <class T>
  bool viewable_as() const {
    return sizeof(T) == dtype_size(dtype) &&
           reinterpret_cast<std::uintptr_t>(data) % alignof(T) == 0;
  }
  // The elements in place; an empty span when !viewable_as<T>(). For BF16/F16 use uint16_t, for
  // F8_* use uint8_t, for BOOL use uint8_t (a byte other than 0/1 is not a valid bool).
  template <class T>
  std::span<const T> as() const {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>,
                  "as<T>: T must be trivially copyable and not bool (use uint8_t)");
    if (!viewable_as<T>()) return {};
    return {reinterpret_cast<const T*>(data), nbytes / sizeof(T)};
  }
  // Like as<T>(), with a Code::mismatch error naming the tensor and file on failure.
  template <class T>
  Result<std::span<const T>> try_as() const {
    if (sizeof(T) != dtype_size(dtype))
      return error(Code::mismatch, where() + " is " + dtype_name(dtype) + " (" +
                                       std::to_string(dtype_size(dtype)) +
                                       "-byte elements), cannot view it as a " +
                                       std::to_string(sizeof(T)) + "-byte type");
    if (!viewable_as<T>())
      return error(Code::mismatch, where() + ": data is not aligned to " +
                                       std::to_string(alignof(T)) +
                                       " bytes in the file; use to_vector<T>()");
    return as<T>();
  }
  // A copy of the elements; works whatever the alignment. Code::mismatch when sizeof(T) differs.
  template <class T>
  Result<std::vector<T>> to_vector() const {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>,
                  "to_vector<T>: T must be trivially copyable and not bool (use uint8_t)");
    if (sizeof(T) != dtype_size(dtype))
      return error(Code::mismatch, where() + " is " + dtype_name(dtype) +
                                       ", element size differs from the requested type");
    std::vector<T> v(nbytes / sizeof(T));
    if (nbytes) std::memcpy(v.data(), data, nbytes);
    return v;
  }
  std::string where() const {
    return "tensor " + detail::quote(name) + (file ? " in '" + *file + "'" : std::string());
  }
};

// One .safetensors file, memory-mapped and validated. Movable, not copyable; a moved-from File
// may only be assigned to or destroyed.
class File {
 public:
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  static Result<File> open(const std::string& path) {
    try {
      return open_impl(path);
    } catch (...) {
      return detail::status_from_current_exception("'" + path + "'");
    }
  }

  const std::string& path() const { return impl_->path; }
  size_t size() const { return impl_->map.size(); }
  size_t header_size() const { return impl_->header_len; }  // N, the JSON length
  size_t data_offset() const { return 8 + impl_->header_len; }  // where the data section starts
  size_t num_tensors() const { return impl_->tensors.size(); }
  const TensorView* find(std::string_view name) const {
    auto it = impl_->tensors.find(name);
    return it == impl_->tensors.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> r;
    r.reserve(impl_->tensors.size());
    for (const auto& kv : impl_->tensors) r.push_back(kv.first);
    return r;
  }
  const std::map<std::string, std::string>& metadata() const { return impl_->metadata; }
  std::span<const std::byte> raw_bytes() const { return impl_->map.bytes(); }  // the whole file

 private:
  // Heap-held so TensorView::name / ::file pointers stay valid when the File is moved.
  struct Impl {
    std::string path;
    io::MappedFile map;
    size_t header_len = 0;
    std::map<std::string, TensorView, std::less<>> tensors;
    std::map<std::string, std::string> metadata;
  };
  explicit File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

  static Result<File> open_impl(const std::string& path) {
    using json = nlohmann::json;
    auto mapped = io::MappedFile::open(path);
    if (!mapped.ok()) return mapped.status();
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->map = std::move(mapped).value();
    const std::byte* base = impl->map.data();
    const uint64_t fsize = impl->map.size();
    auto fail = [&](std::string msg) { return error(Code::format_error, "'" + path + "': " + msg); };

    if (fsize < 8)
      return fail("file is " + std::to_string(fsize) +
                  " bytes, shorter than the 8-byte header length prefix");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(base[i]);
    if (n > kMaxHeaderBytes)
      return fail("header length " + std::to_string(n) + " exceeds the " +
                  std::to_string(kMaxHeaderBytes) + "-byte limit");
    if (n > fsize - 8)
      return fail("header length " + std::to_string(n) + " extends past the end of the file (" +
                  std::to_string(fsize) + " bytes)");
    if (n == 0) return fail("header length is 0 (the header must be a JSON object)");
    const char* hdr = reinterpret_cast<const char*>(base + 8);
    if (hdr[0] != '{') return fail("header does not begin with '{' (it must be a JSON object)");
    impl->header_len = static_cast<size_t>(n);

    std::string jerr;
    auto parsed = detail::parse_json_unique(hdr, hdr + n, jerr);
    if (!parsed) return fail("header: " + jerr);
    const json& j = *parsed;
    if (!j.is_object()) return fail("header is not a JSON object");

    const uint64_t data_size = fsize - 8 - n;
    const std::byte* data = base + 8 + n;
    struct Range {
      uint64_t begin, end;
      const std::string* name;
    };
    std::vector<Range> ranges;
    ranges.reserve(j.size());

    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const json& v = it.value();
      if (key == "__metadata__") {
        if (!v.is_object())
          return fail("__metadata__ must be an object of string -> string, got " +
                      std::string(v.type_name()));
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (!m.value().is_string())
            return fail("__metadata__ value for key " + detail::quote(m.key()) +
                        " is not a string (got " + std::string(m.value().type_name()) + ")");
          impl->metadata.emplace(m.key(), m.value().get<std::string>());
        }
        continue;
      }
      const std::string tn = "tensor " + detail::quote(key) + ": ";
      if (!v.is_object())
        return fail(tn + "entry is not an object (got " + std::string(v.type_name()) + ")");
      for (auto f = v.begin(); f != v.end(); ++f)
        if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
          return fail(tn + "unexpected field " + detail::quote(f.key()) +
                      " (allowed: dtype, shape, data_offsets)");
      for (const char* req : {"dtype", "shape", "data_offsets"})
        if (!v.contains(req)) return fail(tn + "missing '" + req + "'");

      const json& jd = v["dtype"];
      if (!jd.is_string()) return fail(tn + "'dtype' is not a string");
      const auto& dname = jd.get_ref<const std::string&>();
      auto dt = parse_dtype(dname);
      if (!dt) return fail(tn + "unknown or unsupported dtype " + detail::quote(dname));

      const json& js = v["shape"];
      if (!js.is_array()) return fail(tn + "'shape' must be an array");
      std::vector<int64_t> shape;
      shape.reserve(js.size());
      uint64_t numel = 1;
      bool overflow = false;
      for (const json& d : js) {
        if (!d.is_number_unsigned())
          return fail(tn + "'shape' entries must be non-negative integers, got " + d.dump());
        const uint64_t dim = d.get<uint64_t>();
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return fail(tn + "shape dimension " + std::to_string(dim) + " overflows int64");
        if (__builtin_mul_overflow(numel, dim, &numel)) overflow = true;
        shape.push_back(static_cast<int64_t>(dim));
      }
      uint64_t nbytes = 0;
      if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dt)), &nbytes))
        return fail(tn + "shape " + detail::shape_string(shape) + " x " + dname +
                    " overflows the element count or byte size");

      const json& jo = v["data_offsets"];
      if (!jo.is_array() || jo.size() != 2)
        return fail(tn + "'data_offsets' must be an array [begin, end]");
      if (!jo[0].is_number_unsigned() || !jo[1].is_number_unsigned())
        return fail(tn + "'data_offsets' must be non-negative integers, got " + jo.dump());
      const uint64_t b = jo[0].get<uint64_t>(), e = jo[1].get<uint64_t>();
      if (b > e)
        return fail(tn + "data_offsets [" + std::to_string(b) + "," + std::to_string(e) +
                    "] have begin > end");
      if (e - b != nbytes)
        return fail(tn + "shape " + detail::shape_string(shape) + " x " + dname + " is " +
                    std::to_string(nbytes) + " bytes but data_offsets span " +
                    std::to_string(e - b) + " bytes (size does not match)");
      if (e > data_size)
        return fail(tn + "data_offsets [" + std::to_string(b) + "," + std::to_string(e) +
                    "] run past the end of the data section (" + std::to_string(data_size) +
                    " bytes)");

      TensorView tv;
      tv.dtype = *dt;
      tv.shape = std::move(shape);
      tv.data = data + b;
      tv.nbytes = static_cast<size_t>(nbytes);
      tv.file = &impl->path;
      auto [pos, inserted] = impl->tensors.emplace(key, std::move(tv));
      if (!inserted) return fail(tn + "duplicate tensor");  // unreachable: JSON keys are unique
      pos->second.name = pos->first;
      ranges.push_back(Range{b, e, &pos->first});
    }

    // The ranges must tile [0, data_size) exactly.
    std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t cursor = 0;
    const std::string* prev = nullptr;
    for (const Range& r : ranges) {
      if (r.begin < cursor)
        return fail("tensors " + detail::quote(*prev) + " and " + detail::quote(*r.name) +
                    " overlap in the data section (at byte " + std::to_string(r.begin) + ")");
      if (r.begin > cursor)
        return fail("hole in the data section: bytes [" + std::to_string(cursor) + "," +
                    std::to_string(r.begin) + ") before tensor " + detail::quote(*r.name) +
                    " belong to no tensor (holes are not allowed, as in the reference "
                    "implementation)");
      cursor = r.end;
      prev = r.name;
    }
    if (cursor != data_size)
      return fail("data section not fully covered: " + std::to_string(data_size - cursor) +
                  " trailing bytes after byte " + std::to_string(cursor) +
                  " belong to no tensor (the reference implementation rejects this)");
    return File(std::move(impl));
  }

  std::unique_ptr<Impl> impl_;
};

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

// ---- writer ----

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
