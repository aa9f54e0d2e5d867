#pragma once

#include <string>
#include <utility>

namespace xpu {

// Result of an operation that can fail at run time (bad input, an unreachable
// peer, a missing file). Cheap to copy; the message is for humans and names
// what failed. [[nodiscard]]: a failure cannot be dropped silently; a caller
// that means to ignore one says so with (void). Thread-compatible, like any
// value type.
class [[nodiscard]] Status {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kNotFound, kUnavailable, kIoError, kExhausted };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status Exhausted(std::string msg) { return {Code::kExhausted, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace xpu
