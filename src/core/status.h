// Result<T>: a value or an error (a message and a code). The library returns errors; only main()
// exits. The code lets a caller react (the server maps it to an HTTP status once) without
// matching message text.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace kvasir {

enum class ErrorCode {
  unknown,           // not classified (most load and format errors)
  invalid_argument,  // the caller's input is wrong (HTTP 400)
  not_found,         // the named thing does not exist (404)
  too_large,         // input beyond a limit (400/413)
  exhausted,         // out of a resource for now (429)
  unavailable,       // not now: loading, shutting down (503)
  internal,          // a bug (500)
};

struct Error {
  std::string message;
  ErrorCode code = ErrorCode::unknown;
  int64_t retry_after_ms = 0;  // exhausted: when trying again may succeed (0: not known)
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}      // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const std::string& error() const { return std::get<1>(v_).message; }
  ErrorCode error_code() const { return std::get<1>(v_).code; }
  const Error& error_info() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void> equivalent.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error.message)), code_(error.code), failed_(true) {}  // NOLINT
  static Status ok_status() { return {}; }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return error_; }
  ErrorCode error_code() const { return code_; }

 private:
  std::string error_;
  ErrorCode code_ = ErrorCode::unknown;
  bool failed_ = false;
};

}  // namespace kvasir
