// The socket-level pieces of CollNet's rendezvous: the printable address of the setup interface
// (what goes into the handle) and a free port to serve the rank-0 store on.
#pragma once

#include "terse/common/status.h"

#include <sys/socket.h>

#include <string>

namespace terse::plugin::collnet {

// The numeric host of `addr` ("10.0.0.5", "fe80::1"), or "" when it cannot be printed.
std::string numericHost(const sockaddr_storage& addr);

// A port the kernel considers free on `host` right now. Another process may take it before
// the store binds it; listen then simply asks again.
Result<int> probeFreePort(const std::string& host);

}  // namespace terse::plugin::collnet
