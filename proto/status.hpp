#pragma once
/// status and result<T>: the cheap error scheme used everywhere (no exceptions inside the
/// core; exceptions only at the edges: config parsing and main). A status is an errc plus a
/// human-readable message; the message is only allocated on failure.
#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include "proto/errc.hpp"

namespace kvc {

class [[nodiscard]] status {
 public:
  status() = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  static status success() { return {}; }

  bool ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  /// "code: message", for logs and CLI errors.
  std::string to_string() const;

  friend bool operator==(const status& a, const status& b) noexcept {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  errc code_ = errc::ok;
  std::string message_;
};

inline status make_error(errc code, std::string message) { return {code, std::move(message)}; }

/// A value or a failed status. Accessing value() of a failed result is a programming error.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  result(status error) : status_(std::move(error)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "a result built from a status must carry an error");
  }

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const status& error() const noexcept { return status_; }
  errc code() const noexcept { return status_.code(); }

  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  status status_;
};

}  // namespace kvc
