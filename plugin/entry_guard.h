// The exception firewall every exported NCCL entry point (net and CollNet tables) runs behind:
// a Status becomes an ncclResult_t, the error is logged once, and no exception crosses into NCCL.
// Each table passes its own `warn` so lines carry that table's logging prefix.
#pragma once

#include "abi/nccl_plugin.h"

#include "terse/common/status.h"

#include <exception>
#include <new>
#include <string>

namespace terse::plugin {

inline ncclResult_t ncclResultOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return ncclSuccess;
    case StatusCode::kInvalidArgument: return ncclInvalidArgument;
    case StatusCode::kUnsupported: return ncclInvalidArgument;
    case StatusCode::kInvalidUsage: return ncclInvalidUsage;
    case StatusCode::kRemoteError: return ncclRemoteError;
    case StatusCode::kTimeout: return ncclRemoteError;
    case StatusCode::kSystemError: return ncclSystemError;
    case StatusCode::kInProgress: return ncclInProgress;
    case StatusCode::kCorrupt:
    case StatusCode::kInternal: return ncclInternalError;
  }
  return ncclInternalError;
}

// Runs body() (returning Status); `warn(entry, message)` logs a failure.
template <typename Warn, typename Body>
ncclResult_t guardEntry(const char* entry, Warn&& warn, Body&& body) noexcept {
  try {
    Status s = body();
    if (!s.isOk()) warn(entry, s.message().c_str());
    return ncclResultOf(s.code());
  } catch (const std::bad_alloc&) {
    warn(entry, "out of memory");
    return ncclSystemError;
  } catch (const std::exception& e) {
    warn(entry, (std::string("internal error: ") + e.what()).c_str());
    return ncclInternalError;
  } catch (...) {
    warn(entry, "unknown internal error");
    return ncclInternalError;
  }
}

inline Status notNull(const void* p, const char* entry, const char* what) {
  if (p == nullptr) return errorInvalidArgument("%s: %s is NULL", entry, what);
  return Status::ok();
}

}  // namespace terse::plugin
