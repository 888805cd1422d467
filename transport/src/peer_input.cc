#include "peer_input.h"

#include <climits>
#include <cstring>

namespace terse {

std::string encodePeerBlob(const PeerBlob& blob) {
  std::string out = blob.host;
  out += '\0';
  out += std::to_string(blob.pid);
  out += '\0';
  out += blob.address;
  return out;
}

Status parsePeerBlob(int rank, const uint8_t* bytes, size_t len, PeerBlob* out) {
  const char* p = reinterpret_cast<const char*>(bytes);
  const char* end = p + len;
  const char* hostEnd = len > 0 ? static_cast<const char*>(std::memchr(p, '\0', len)) : nullptr;
  const char* pidEnd =
      hostEnd == nullptr
          ? nullptr
          : static_cast<const char*>(std::memchr(hostEnd + 1, '\0', end - (hostEnd + 1)));
  if (pidEnd == nullptr)
    return errorCorrupt(
        "rank %d published a malformed worker address (%zu bytes, without its host and pid "
        "fields); are all ranks running the same terse version?",
        rank, len);
  const size_t hostLen = static_cast<size_t>(hostEnd - p);
  if (hostLen > kMaxPeerHostBytes)
    return errorCorrupt("rank %d published a host name of %zu bytes (at most %zu)", rank, hostLen,
                        kMaxPeerHostBytes);
  // Canonical decimal only: the pid is kill()ed and read from /proc, where 0 or a negative
  // number would mean a process group or every process, never the peer.
  const char* digits = hostEnd + 1;
  const size_t pidLen = static_cast<size_t>(pidEnd - digits);
  bool canonical = pidLen > 0 && pidLen <= 10 && digits[0] != '0';
  long long pid = 0;
  for (size_t i = 0; canonical && i < pidLen; ++i) {
    if (digits[i] < '0' || digits[i] > '9')
      canonical = false;
    else
      pid = pid * 10 + (digits[i] - '0');
  }
  if (!canonical || pid > INT_MAX)
    return errorCorrupt(
        "rank %d published a process id that is not a positive decimal number "
        "(%zu bytes)",
        rank, pidLen);
  const size_t addressLen = static_cast<size_t>(end - (pidEnd + 1));
  if (addressLen == 0) return errorCorrupt("rank %d published an empty UCX worker address", rank);
  if (addressLen > kMaxPeerWorkerAddressBytes)
    return errorCorrupt("rank %d published a UCX worker address of %zu bytes (at most %zu)", rank,
                        addressLen, kMaxPeerWorkerAddressBytes);
  out->host.assign(p, hostLen);
  out->pid = static_cast<int>(pid);
  out->address.assign(pidEnd + 1, addressLen);
  return Status::ok();
}

std::string formatFailureNotice(const uint8_t* bytes, size_t len, size_t maxBytes) {
  return printableBytes(bytes, len, maxBytes);
}

}  // namespace terse
