// The net plugin's connection setup state (net_connect.cc): what connect() and accept() keep
// between NCCL's calls while their nonblocking TCP exchanges are under way, and the listening comm.
// Private to the plugin; net_ucx.cc sees it only to tear down what NCCL left open.
#pragma once

#include "net_handshake.h"
#include "net_ucx.h"

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse::plugin {

struct ConnectAttempt {
  enum class Stage { kConnecting, kSendHello, kReadHeader, kReadAddress };
  ~ConnectAttempt() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  Stage stage = Stage::kConnecting;
  Hello hello{};
  size_t off = 0;
  ReplyHeader header{};
  std::string address;  // the receiver's UCX worker address
  std::string peer;
};

struct PendingAccept {
  enum class Stage { kReadHello, kSendReply };
  ~PendingAccept() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  Stage stage = Stage::kReadHello;
  Hello hello{};
  size_t off = 0;
  std::vector<uint8_t> reply;
  uint32_t recvCommId = 0;
};

class ListenComm {
 public:
  ~ListenComm() {
    if (fd >= 0) ::close(fd);
  }
  NetContext* ctx = nullptr;
  int fd = -1;
  uint64_t nonce = 0;
  std::vector<std::unique_ptr<PendingAccept>> pending;
};

}  // namespace terse::plugin
