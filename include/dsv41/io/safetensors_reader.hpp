// Safetensors reader: one file, memory-mapped, lazy, fully validated. Host only: uses
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

}  // namespace dsv41::st
