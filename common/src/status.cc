#include "terse/common/status.h"

#include <cstdarg>
#include <vector>

namespace terse {

const char* dataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "unknown-dtype";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown-op";
}

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kInvalidUsage: return "invalid usage";
    case StatusCode::kCorrupt: return "corrupt data";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kRemoteError: return "remote error";
    case StatusCode::kSystemError: return "system error";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kInProgress: return "in progress";
  }
  return "unknown status";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

Status Status::withContext(const std::string& context) const {
  if (isOk()) return *this;
  return Status(code_, context + ": " + message_);
}

std::string printableBytes(const void* bytes, size_t len, size_t maxBytes) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  const size_t use = len < maxBytes ? len : maxBytes;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(use + 3);
  for (size_t i = 0; i < use; ++i) {
    const unsigned char c = p[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (use < len) out += "...";
  return out;
}

std::string formatString(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list copy;
  va_copy(copy, ap);
  int len = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out;
  if (len > 0) {
    std::vector<char> buf(static_cast<size_t>(len) + 1);
    std::vsnprintf(buf.data(), buf.size(), fmt, ap);
    out.assign(buf.data(), static_cast<size_t>(len));
  }
  va_end(ap);
  return out;
}

}  // namespace terse
