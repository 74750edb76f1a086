// Safetensors dtypes and limits, the TensorView of a tensor's bytes, and the helpers the reader,
// checkpoint and writer share (strict JSON parsing, error text). Host only: uses nlohmann-json.
#pragma once
#include <dsv41/core/status.hpp>

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

}  // namespace dsv41::st
