// What the transport layer reads from bytes another rank chose: the blob each UCX rank publishes
// at bootstrap (host, pid, worker address) and the text of a failure notice (give_up.h).
//
// Pure functions, without UCX or a transport, so that fuzz/fuzz_peer.cc and the unit tests can
// drive them directly; ucx.cc and give_up.cc use exactly these.
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace terse {

// Bounds on a published blob's parts. The host part (the host's name, boot id and pid namespace,
// see hostIdentity() in ucx.cc) fits in 255 bytes; UCX worker addresses
// are a few hundred bytes to a few KiB (one entry per device and transport), so 64 KiB is far
// above any real one while still refusing a blob that is mostly garbage.
constexpr size_t kMaxPeerHostBytes = 255;
constexpr size_t kMaxPeerWorkerAddressBytes = 64 << 10;

// A UCX rank's published blob: "<host>\0<pid in decimal>\0<worker address bytes>".
struct PeerBlob {
  std::string host;  // the host identity: equal ones mean that the pid names a process here
  int pid = 0;
  std::string address;  // opaque bytes for ucp_ep_create
};

std::string encodePeerBlob(const PeerBlob& blob);

// Splits and checks the blob that `rank` published. Refused (kCorrupt, naming the rank): a
// missing separator, a host over kMaxPeerHostBytes, a pid that is not canonical decimal (digits
// only, no sign, no leading zero) in [1, INT_MAX], an empty or oversized worker address. An
// accepted blob re-encodes to the same bytes.
Status parsePeerBlob(int rank, const uint8_t* bytes, size_t len, PeerBlob* out);

// The text of a failure notice `len` bytes long, fit to be appended to an error message: at most
// `maxBytes` bytes of it are used (then "..."), and every byte outside printable ASCII, and the
// backslash, is written as \xNN, so a peer's NULs, control bytes or terminal escapes never reach
// a log unchanged. Printable text without backslashes comes out as it went in.
std::string formatFailureNotice(const uint8_t* bytes, size_t len, size_t maxBytes);

}  // namespace terse
