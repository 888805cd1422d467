// The UCX knowledge that terse's two UCX users share: the transport's backend
// (transport/src/ucx.cc) and the NCCL net plugin (plugin/net_ucx.cc). Reading UCX's
// configuration with terse's tweaks, creating the context and worker, creating an endpoint with
// the UCX 1.13 PEER -> NONE fallback, closing endpoints and waiting for requests with a bound,
// telling a peer's failure from a local one, and what UCX_TLS allows. A UCX quirk is handled
// here once, for both.
//
// Internal to terse: only those two files include it (it is not an installed header, and it
// exposes UCX's own types). What each user does with a peer failure (the transport's rank
// failure, process watch and notices; the plugin's comm failure and setup-socket hang-up) stays
// with it.
#pragma once

#include "terse/common/status.h"

#include <ucp/api/ucp.h>

#include <chrono>
#include <string>
#include <vector>

namespace terse {

// ---- what UCX_TLS allows (pure text, tests/transport/ucx_text_test.cc) ----------------------

// UCX_TLS names only transports that cannot report a peer's failure in UCX 1.13 (shared memory:
// sm, shm, mm, posix, sysv, cma, knem, xpmem, and self). Asking such a list for a PEER-mode
// endpoint only makes UCX log an error before refusing. False for an empty value or an exclusion
// list ("^tcp").
bool ucxTlsOnlySharedMemory(const std::string& tls);

// UCX_TLS names tcp and nothing else but self (UCX_TLS=tcp, as across hosts without RDMA or the
// emulated links of scripts/bench-network.sh).
bool ucxTlsOnlyTcp(const std::string& tls);

// UCX_TLS as set, or "" when unset.
std::string ucxTlsFromEnv();

// ---- context and worker ---------------------------------------------------------------------

// One change to UCX's configuration, applied before ucp_init unless the user set UCX_<name>
// (the user's value always wins).
struct UcxConfigTweak {
  const char* name;   // without the UCX_ prefix: "RNDV_THRESH"
  const char* value;  // "inf"
  // Whether failing to apply it fails the worker (with `hint` in the message); otherwise the
  // failure is noted in UcxWorker::notes and UCX's default stays.
  bool required = false;
  const char* hint = "";
};

// Whether the user set UCX_<name> (a UCX variable named without its prefix).
bool ucxUserSet(const char* name);

struct UcxWorkerOptions {
  ucs_thread_mode_t threadMode = UCS_THREAD_MODE_SINGLE;
  std::vector<UcxConfigTweak> tweaks;
};

// A UCX context with one worker (tag matching only), and the worker's address for peers.
struct UcxWorker {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::string address;             // the worker's address: what a peer's ucp_ep_create takes
  std::vector<std::string> notes;  // tweaks UCX refused (optional ones only), for the caller's log
};

// Reads UCX's configuration (its UCX_* variables), applies the tweaks, and creates the context
// and worker. On failure whatever was created is released and `*out` stays empty.
Status ucxOpenWorker(const UcxWorkerOptions& options, UcxWorker* out);

// Destroys the worker (if any) and the context (if any), leaving `w` empty.
void ucxCloseWorker(UcxWorker* w);

// UCX before 1.14 asserts (and aborts the process, in builds with assertions such as Debian's)
// when ucp_worker_destroy purges an endpoint with a wire-up reply still queued (the assertion was
// wrong and was removed upstream: openucx/ucx#8175). True on those versions.
bool ucxPurgeAssertsOnWireup();

// Keeps `w`'s worker and context for the life of the process instead of destroying them (see
// ucxPurgeAssertsOnWireup), leaving `w` empty. The module holding terse's code stays loaded from
// then on: the parked worker keeps UCX callbacks that point into it.
void ucxParkWorker(UcxWorker* w);

// ---- endpoints ------------------------------------------------------------------------------

// Creates an endpoint to a peer's worker `address`. `*peerMode` says whether to ask UCX for
// peer-failure reports (UCP_ERR_HANDLING_MODE_PEER, with `onError(arg, ep, status)` called from
// progress when the peer fails). UCX 1.13's shared-memory transports have no peer-failure
// support, so UCX refuses a PEER-mode endpoint that can only use them (UCS_ERR_UNREACHABLE);
// rather than refuse the user's UCX_TLS=shm, the endpoint is then created without it and
// `*peerMode` becomes false. The same transports serve every peer, so callers keep that answer
// for later endpoints. The endpoint's error handler is set in either mode.
ucs_status_t ucxCreateEndpoint(ucp_worker_h worker, const std::string& address, bool* peerMode,
                               ucp_err_handler_cb_t onError, void* arg, ucp_ep_h* ep);

// Starts closing `ep`: gracefully (flushing what was sent) or, with `force`, at once (every
// outstanding operation on it completes with UCS_ERR_CANCELED). Returns the request to wait on
// (ucxWaitRequest), or nullptr when the close finished in place.
ucs_status_ptr_t ucxCloseEndpoint(ucp_ep_h ep, bool force);

// Progresses `worker` until request `sp` is no longer in progress or `deadline` passes; true when
// it finished. Neither frees nor cancels it.
bool ucxWaitRequest(ucp_worker_h worker, ucs_status_ptr_t sp,
                    std::chrono::steady_clock::time_point deadline);

// The transports of an endpoint's lanes, in lane order without repeats ("sysv,cma"); "?" when
// UCX does not say.
std::string ucxEndpointTransports(ucp_ep_h ep);

// ---- failures -------------------------------------------------------------------------------

// UCX statuses that mean the other side is gone or unreachable rather than a local failure.
bool ucxIsPeerFailure(ucs_status_t s);

}  // namespace terse
