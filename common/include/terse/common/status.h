// Errors as values, for terse's own code: Status and Result<T> themselves are public
// (include/terse/status.h); the formatted error constructors and the propagation macros here
// are how the layers build and pass them on, and are not part of the installed API.
#pragma once

#include <terse/status.h>

#include <cstdio>
#include <string>
#include <utility>
#include <variant>

namespace terse {

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
