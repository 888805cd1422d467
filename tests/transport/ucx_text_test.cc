// The UCX backend's readers of text (transport/src/ucx_text.h): which UCX_TLS values let
// same-node peers use shared memory, and which transports an endpoint's lanes use, read from what
// UCX 1.13.1 printed for real endpoints on the development machine. Also the UCX core's
// (transport/ucx_core.h) UCX_TLS classes, which the transport and the net plugin both act on.
#include "ucx_text.h"

#include "terse/transport/ucx_core.h"

#include <gtest/gtest.h>

#include <string>

namespace terse {
namespace {

// ucp_ep_print_info of a UCP_ERR_HANDLING_MODE_NONE endpoint between two processes of one host,
// no UCX_* variables (UCX 1.13.1).
const char* kSharedMemoryEndpoint =
    "#\n"
    "# UCP endpoint \n"
    "#\n"
    "#               peer: <no debug data>\n"
    "#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am "
    "am_bw#0\n"
    "#                 lane[1]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] "
    "rma_bw#0\n"
    "#\n"
    "#                tag_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n"
    "#                  rma_bw: mds rndv_rkey_size 9\n"
    "#\n";

// The same with UCP_ERR_HANDLING_MODE_PEER: shared memory is left out, TCP over loopback.
const char* kPeerModeEndpoint =
    "#\n"
    "# UCP endpoint \n"
    "#\n"
    "#               peer: <no debug data>\n"
    "#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am "
    "am_bw#0 keepalive wireup\n"
    "#\n"
    "#                tag_send: 0..<egr/short>..8185..<egr/zcopy>..20553..<rndv>..(inf)\n";

TEST(UcxText, LaneTransportsOfRealEndpoints) {
  EXPECT_EQ(ucxLaneTransports(kSharedMemoryEndpoint), "sysv,cma");
  EXPECT_EQ(ucxLaneTransports(kPeerModeEndpoint), "tcp");
  EXPECT_TRUE(ucxUsesSharedMemory(ucxLaneTransports(kSharedMemoryEndpoint)));
  EXPECT_FALSE(ucxUsesSharedMemory(ucxLaneTransports(kPeerModeEndpoint)));
}

TEST(UcxText, LaneTransportsListEachOnceInLaneOrder) {
  EXPECT_EQ(ucxLaneTransports("lane[0]: 1:posix/memory md[1] am\n"
                              "lane[1]: 7:cma/memory md[4] rma_bw#0\n"
                              "lane[2]: 1:posix/memory md[1] am_bw#1\n"
                              "lane[10]:12:tcp/eth0 md[5]\n"),
            "posix,cma,tcp");
}

TEST(UcxText, UnknownFormatsGiveAQuestionMark) {
  for (const char* text : {"", "# UCP endpoint\n", "lane[0]: sysv/memory\n", "lane[0]:  3:sysv\n",
                           "lane[0]:  3x:sysv/memory\n", "lane[0]  3:sysv/memory\n"})
    EXPECT_EQ(ucxLaneTransports(text), "?") << text;
  EXPECT_FALSE(ucxUsesSharedMemory("?"));
}

TEST(UcxText, TlsValuesThatAllowSharedMemory) {
  for (const char* tls : {"", "all", "^tcp", "^sm", "sm", "shm", "mm", "posix", "sysv,self",
                          "tcp,cma", "rc,ud,sm,self", "xpmem", "knem"})
    EXPECT_TRUE(ucxTlsAllowsSharedMemory(tls)) << tls;
  for (const char* tls : {"tcp", "tcp,self", "self", "rc,ud", "ib", "posixx", "tcp,", ","})
    EXPECT_FALSE(ucxTlsAllowsSharedMemory(tls)) << tls;
}

TEST(UcxText, SharedMemoryTransportNames) {
  for (const char* t : {"posix", "sysv", "cma", "knem", "xpmem", "tcp,cma", "sysv,tcp"})
    EXPECT_TRUE(ucxUsesSharedMemory(t)) << t;
  for (const char* t : {"", "tcp", "self", "rc_mlx5,ud_mlx5", "sm", "mixed"})
    EXPECT_FALSE(ucxUsesSharedMemory(t)) << t;
}

// Shared memory only: no endpoint can report a peer's failure in UCX 1.13, so neither the
// transport nor the net plugin asks for PEER mode. Every alias counts, "mm" included (the net
// plugin knew it, the transport did not, before both used the core).
TEST(UcxCore, TlsOnlySharedMemory) {
  for (const char* tls :
       {"sm", "shm", "mm", "posix", "sysv,cma", "self", "sysv,self", "sm,", "xpmem,knem"})
    EXPECT_TRUE(ucxTlsOnlySharedMemory(tls)) << tls;
  for (const char* tls : {"", "all", "^tcp", "^sm", "tcp", "sm,tcp", "rc,sm", "posixx", "shm,ud"})
    EXPECT_FALSE(ucxTlsOnlySharedMemory(tls)) << tls;
}

// TCP only (with self at most): the transport's eager sends apply there and nowhere else.
TEST(UcxCore, TlsOnlyTcp) {
  for (const char* tls : {"tcp", "tcp,self", "self,tcp", "tcp,"})
    EXPECT_TRUE(ucxTlsOnlyTcp(tls)) << tls;
  for (const char* tls : {"", "all", "self", "^tcp", "tcp,sm", "tcp,rc", "tcpx", "sm"})
    EXPECT_FALSE(ucxTlsOnlyTcp(tls)) << tls;
}

// The statuses that mean "the peer is gone" (both users report those as the peer's failure).
TEST(UcxCore, PeerFailureStatuses) {
  for (ucs_status_t s :
       {UCS_ERR_ENDPOINT_TIMEOUT, UCS_ERR_CONNECTION_RESET, UCS_ERR_UNREACHABLE, UCS_ERR_REJECTED,
        UCS_ERR_NOT_CONNECTED, UCS_ERR_IO_ERROR, UCS_ERR_TIMED_OUT, UCS_ERR_SHMEM_SEGMENT})
    EXPECT_TRUE(ucxIsPeerFailure(s)) << ucs_status_string(s);
  for (ucs_status_t s : {UCS_OK, UCS_ERR_CANCELED, UCS_ERR_MESSAGE_TRUNCATED, UCS_ERR_NO_MEMORY,
                         UCS_ERR_INVALID_PARAM})
    EXPECT_FALSE(ucxIsPeerFailure(s)) << ucs_status_string(s);
}

}  // namespace
}  // namespace terse
