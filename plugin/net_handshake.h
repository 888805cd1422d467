// The plugin's connection handshakes: what connect, accept and the CollNet connect read from
// bytes another rank chose. NCCL carries each listen handle to the other ranks through its own
// bootstrap, and the hello and reply travel over the setup socket (net_ucx.h describes the
// exchange). The layouts and the checks of received copies live here as pure functions, so the
// fuzz target (fuzz/fuzz_handshake.cc) and the unit tests drive exactly what the plugin runs.
#pragma once

#include "terse/common/status.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace terse::plugin {

constexpr uint32_t kHandleMagic = 0x74727365;  // "trse"
// 2: the hello and reply carry each side's TERSE_NET_LOSSLESS.
constexpr uint32_t kProtocolVersion = 2;
constexpr size_t kMaxWorkerAddress = 64 << 10;

// Hello and reply flags.
constexpr uint32_t kFlagLossless = 1u << 0;          // the side's TERSE_NET_LOSSLESS
constexpr uint32_t kFlagLosslessMismatch = 1u << 1;  // reply: rejected because they differ

// NCCL's 128-byte handle. listen fills the address part; connect keeps its attempt id in the
// tail of its own copy (NCCL calls connect again with the same buffer until it succeeds).
struct WireHandle {
  uint32_t magic;
  uint32_t version;
  uint64_t listenNonce;
  union {
    sockaddr_in v4;
    sockaddr_in6 v6;
  } addr;
  uint64_t attempt;  // 0 in the listener's copy
};

// Sent by connect on the setup socket.
struct Hello {
  uint32_t magic;
  uint32_t version;
  uint64_t listenNonce;
  uint32_t flags;  // kFlagLossless
  uint32_t reserved;
};

// accept's answer, followed by addrLen bytes of its UCX worker address.
struct ReplyHeader {
  uint32_t magic;
  uint32_t recvCommId;  // 0 = rejected
  uint32_t addrLen;
  uint32_t flags;  // kFlagLossless, kFlagLosslessMismatch
};

// Where a connect handle says to dial.
struct ConnectTarget {
  sockaddr_storage addr;
  socklen_t len;
  uint64_t listenNonce;
};

// Checks a listen handle a peer made. kInvalidArgument when it is not this version's handle
// (magic, version) or its address is neither IPv4 nor IPv6 (the socket would be opened for
// whatever family the bytes name).
Status parseConnectHandle(const WireHandle& h, ConnectTarget* out);

// What accept makes of a connecting peer's hello.
enum class HelloVerdict {
  kAccept,            // this version, this listen, the same TERSE_NET_LOSSLESS
  kForeign,           // another magic, version or listen (stale handle): dropped with a WARN
  kLosslessMismatch,  // ours, but TERSE_NET_LOSSLESS differs: refused with a reason
};
HelloVerdict checkHello(const Hello& h, uint64_t listenNonce, bool losslessHere);

// Checks accept's reply header as connect reads it from the peer at `peer` (for messages).
// kInvalidUsage when TERSE_NET_LOSSLESS differs; kRemoteError when the peer rejected the
// connection or announces a worker address of 0 or more than kMaxWorkerAddress bytes (the
// address buffer is sized from it next).
Status checkReplyHeader(const ReplyHeader& h, bool losslessHere, const std::string& peer);

namespace collnet {

// The CollNet listen handle. Every rank's listen serves a rendezvous store; connect uses the
// one named by handles[0] (NCCL passes all ranks' handles in rank order), so every rank finds
// rank 0's store without any other out-of-band channel.
struct Handle {
  uint32_t magic;
  uint32_t version;
  uint64_t nonce;  // names this listen's store keys and lets rank 0 recognise its own handle
  int32_t port;
  char host[64];  // numeric address, NUL-terminated
};
constexpr uint32_t kHandleMagic = 0x74436e31;  // "tCn1"
constexpr uint32_t kHandleVersion = 1;

// Checks handles[rank] as connect receives it. kInvalidUsage when it is not this version's
// handle; kInvalidArgument when its host is empty or not NUL-terminated within its 64 bytes or
// its port is outside 1..65535. `out` gets a copy whose host is a C string.
Status parseHandle(int rank, const void* bytes, Handle* out);

}  // namespace collnet
}  // namespace terse::plugin
