// Errors as values: every fallible call of the C++ API returns a Status or a Result<T>. The
// message says what was wrong and, where possible, what to do about it. The codes are the C
// API's terse_status_t (types.h), so both APIs report the same failure the same way.
#pragma once

#include <terse/types.h>

#include <string>
#include <utility>
#include <variant>

namespace terse {

enum class StatusCode : int {
  kOk = TERSE_OK,
  kInvalidArgument = TERSE_INVALID_ARGUMENT,
  kInvalidUsage = TERSE_INVALID_USAGE,
  kCorrupt = TERSE_CORRUPT,
  kTimeout = TERSE_TIMEOUT,
  kRemoteError = TERSE_REMOTE_ERROR,
  kSystemError = TERSE_SYSTEM_ERROR,
  kUnsupported = TERSE_UNSUPPORTED,
  kInternal = TERSE_INTERNAL,
  kInProgress = TERSE_IN_PROGRESS,
};

const char* statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<code name>: <message>", for logs and exceptions.
  std::string toString() const;
  // Prefixes context, keeping the code: "while X: <message>".
  Status withContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must be an error status

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOkStatus;
    return isOk() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace terse
