// Errors as values: every fallible library call returns Status or Result<T>.
#pragma once
#include <string>
#include <utility>
#include <variant>

namespace dsv41 {

enum class Code {
  ok = 0,
  invalid_argument,  // caller passed something malformed (shape, size, option)
  io_error,          // a file could not be opened, mapped or read
  format_error,      // a file's contents violate its format
  mismatch,          // a checkpoint does not match the configured shape
  out_of_range,      // a length or position beyond what the model/cache allows
  out_of_memory,
  cancelled,         // a callback asked to stop
  unsupported,
  internal,
  resource_exhausted,  // a bounded resource is full (a queue, a memory budget); retry later
};

inline const char* code_name(Code c) {
  switch (c) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid_argument";
    case Code::io_error: return "io_error";
    case Code::format_error: return "format_error";
    case Code::mismatch: return "mismatch";
    case Code::out_of_range: return "out_of_range";
    case Code::out_of_memory: return "out_of_memory";
    case Code::cancelled: return "cancelled";
    case Code::unsupported: return "unsupported";
    case Code::internal: return "internal";
    case Code::resource_exhausted: return "resource_exhausted";
  }
  return "unknown";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::ok; }
  explicit operator bool() const { return ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const {
    return ok() ? std::string("ok") : std::string(code_name(code_)) + ": " + message_;
  }

 private:
  Code code_ = Code::ok;
  std::string message_;
};

inline Status error(Code c, std::string msg) { return Status(c, std::move(msg)); }

// Result<T>: a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status s) : v_(std::move(s)) {
    if (std::get<Status>(v_).ok()) v_ = Status(Code::internal, "Result built from an ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dsv41

// Propagate a non-ok Status from an expression returning Status.
#define DSV41_TRY(expr)                          \
  do {                                           \
    ::dsv41::Status dsv41_try_s_ = (expr);       \
    if (!dsv41_try_s_.ok()) return dsv41_try_s_; \
  } while (0)
