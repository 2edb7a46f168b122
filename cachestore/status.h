// Status and Result<T>: how every layer below the FUSE boundary reports errors.
//
// An error is a positive errno plus a short context (the operation and the path), so that the
// FUSE adapter can reply with the errno and the log can say what failed. No exception crosses a
// module boundary; these types carry errors instead.
//
// Thread-safety: plain values; safe to copy and move between threads.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace epochfs::cachestore {

// The text of errno value err ("No such file or directory"); safe from any thread, unlike
// strerror.
std::string error_text(int err);

class [[nodiscard]] Status {
 public:
  Status() = default;

  static Status ok() { return Status(); }

  // REQUIRES: err > 0.
  static Status error(int err, std::string context) { return Status(err, std::move(context)); }

  bool is_ok() const { return errno_ == 0; }

  // The positive errno, or 0 when ok.
  int error_code() const { return errno_; }

  const std::string& context() const { return context_; }

  // "context: strerror(errno)", or "ok".
  std::string to_string() const;

 private:
  Status(int err, std::string context) : errno_(err), context_(std::move(context)) {}

  int errno_ = 0;
  std::string context_;
};

// A value or a Status that is not ok.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)

  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return v_.index() == 0; }

  // REQUIRES: is_ok().
  T& value() & { return std::get<0>(v_); }

  const T& value() const& { return std::get<0>(v_); }

  T&& value() && { return std::get<0>(std::move(v_)); }

  // ok() when there is a value.
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

  int error_code() const { return is_ok() ? 0 : std::get<1>(v_).error_code(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace epochfs::cachestore
