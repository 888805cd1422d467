// What the UCX backend reads from text: the user's UCX_TLS and the lane table UCX prints for an
// endpoint. Pure functions, without UCX, so that tests/transport/ucx_text_test.cc can drive them
// with the text of real runs; ucx.cc uses exactly these.
#pragma once

#include <string>

namespace terse {

// Whether a UCX_TLS value lets UCX use shared memory: empty (unset), "all", an exclusion list
// ("^tcp"), or a list that names a shared-memory transport or alias (sm, shm, mm, posix, sysv,
// cma, knem, xpmem).
bool ucxTlsAllowsSharedMemory(const std::string& tls);

// Whether a comma-separated list of UCX transport names ("sysv,cma") holds one that moves bytes
// through memory shared by processes of one host (posix, sysv, cma, knem, xpmem).
bool ucxUsesSharedMemory(const std::string& transports);

// The transports of the lanes in what ucp_ep_print_info writes, in lane order without repeats:
// "sysv,cma" from "#  lane[0]:  3:sysv/memory.0 md[2] -> ..." and "#  lane[1]:  5:cma/memory.0
// ...". "?" when there is no lane line (another UCX version's format).
std::string ucxLaneTransports(const std::string& printInfo);

}  // namespace terse
