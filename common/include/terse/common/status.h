// Errors as values. Every fallible internal call returns Status or Result<T>; the message says
// what was wrong and, where possible, what to do about it.
#pragma once

#include <terse/types.h>

#include <cstdio>
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

// Formatted constructors: errorInvalidArgument("count %zu > %zu", a, b).
std::string formatString(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Bytes another process chose, fit to go into a message: at most `maxBytes` of them (then
// "..."), printable ASCII kept, every other byte and the backslash written as \xNN, so NULs,
// control bytes and terminal escapes never reach a log unchanged and no escape can be forged.
std::string printableBytes(const void* bytes, size_t len, size_t maxBytes);
#define TERSE_DEFINE_STATUS_FACTORY(Name, Code)                    \
  template <typename... Args>                                      \
  Status Name(const char* fmt, Args... args) {                     \
    if constexpr (sizeof...(Args) == 0)                            \
      return Status(StatusCode::Code, fmt);                        \
    else                                                           \
      return Status(StatusCode::Code, formatString(fmt, args...)); \
  }
TERSE_DEFINE_STATUS_FACTORY(errorInvalidArgument, kInvalidArgument)
TERSE_DEFINE_STATUS_FACTORY(errorInvalidUsage, kInvalidUsage)
TERSE_DEFINE_STATUS_FACTORY(errorCorrupt, kCorrupt)
TERSE_DEFINE_STATUS_FACTORY(errorTimeout, kTimeout)
TERSE_DEFINE_STATUS_FACTORY(errorRemote, kRemoteError)
TERSE_DEFINE_STATUS_FACTORY(errorSystem, kSystemError)
TERSE_DEFINE_STATUS_FACTORY(errorUnsupported, kUnsupported)
TERSE_DEFINE_STATUS_FACTORY(errorInternal, kInternal)
#undef TERSE_DEFINE_STATUS_FACTORY

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

// Propagation helpers. The function that detects an error builds its message; callers only
// add context or pass it on.
#define TERSE_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::terse::Status terse_status_ = (expr);          \
    if (!terse_status_.isOk()) return terse_status_; \
  } while (0)

#define TERSE_CONCAT_INNER(a, b) a##b
#define TERSE_CONCAT(a, b) TERSE_CONCAT_INNER(a, b)
#define TERSE_ASSIGN_OR_RETURN(lhs, expr)                  \
  auto TERSE_CONCAT(terse_result_, __LINE__) = (expr);     \
  if (!TERSE_CONCAT(terse_result_, __LINE__).isOk())       \
    return TERSE_CONCAT(terse_result_, __LINE__).status(); \
  lhs = std::move(TERSE_CONCAT(terse_result_, __LINE__)).value()
