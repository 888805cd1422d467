#include "terse/transport/ucx_core.h"

#include "ucx_text.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace terse {

// UCX's own variables, which ucp_config_read() takes from the environment itself: terse looks at
// the same variables so that its choices (eager TCP, peer mode, a tweak the user overrides)
// follow what UCX will do, which a value read earlier and passed down could contradict. They
// are UCX's, not settings of terse's (no TERSE_* variable is read here).
std::string ucxTlsFromEnv() {
  const char* tls = std::getenv("UCX_TLS");
  return tls != nullptr ? tls : "";
}

bool ucxUserSet(const char* name) {
  return std::getenv((std::string("UCX_") + name).c_str()) != nullptr;
}

Status ucxOpenWorker(const UcxWorkerOptions& options, UcxWorker* out) {
  UcxWorker w;
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK)
    return errorSystem("reading UCX's configuration failed (%s); check the UCX_* variables",
                       ucs_status_string(s));
  for (const UcxConfigTweak& t : options.tweaks) {
    if (ucxUserSet(t.name)) continue;
    s = ucp_config_modify(config, t.name, t.value);
    if (s == UCS_OK) continue;
    if (t.required) {
      ucp_config_release(config);
      return errorSystem("setting UCX's %s to %s failed (%s)%s%s", t.name, t.value,
                         ucs_status_string(s), *t.hint ? "; " : "", t.hint);
    }
    w.notes.push_back(std::string("could not set UCX's ") + t.name + " to " + t.value + ": " +
                      ucs_status_string(s));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  s = ucp_init(&params, config, &w.context);
  ucp_config_release(config);
  if (s != UCS_OK)
    return errorSystem("ucp_init failed (%s); check UCX_TLS and UCX_NET_DEVICES",
                       ucs_status_string(s));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = options.threadMode;
  s = ucp_worker_create(w.context, &wp, &w.worker);
  if (s != UCS_OK) {
    ucxCloseWorker(&w);
    return errorSystem("ucp_worker_create failed (%s)", ucs_status_string(s));
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  s = ucp_worker_get_address(w.worker, &address, &length);
  if (s != UCS_OK) {
    ucxCloseWorker(&w);
    return errorSystem("ucp_worker_get_address failed (%s)", ucs_status_string(s));
  }
  w.address.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(w.worker, address);
  *out = std::move(w);
  return Status::ok();
}

void ucxCloseWorker(UcxWorker* w) {
  if (w->worker != nullptr) ucp_worker_destroy(w->worker);
  if (w->context != nullptr) ucp_cleanup(w->context);
  w->worker = nullptr;
  w->context = nullptr;
}

bool ucxPurgeAssertsOnWireup() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major < 1 || (major == 1 && minor < 14);
}

void ucxParkWorker(UcxWorker* w) {
  static std::mutex mu;
  static auto* parked = new std::vector<std::pair<ucp_context_h, ucp_worker_h>>();
  std::lock_guard<std::mutex> lock(mu);
  parked->emplace_back(w->context, w->worker);
  w->context = nullptr;
  w->worker = nullptr;
  // The module holding this code (libterse.so, or the NCCL net plugin, which NCCL dlcloses at
  // finalize) must now stay loaded: the parked worker keeps UCX callbacks that point into it,
  // and unloading would also drop the list above, leaving the worker unreachable (the leak
  // LeakSanitizer reported once the CollNet plugin's peer-death test ran under it). A no-load
  // dlopen with RTLD_NODELETE pins the already-loaded module; the handle is kept on purpose.
  static bool pinned = false;
  Dl_info self{};
  if (!pinned && dladdr(reinterpret_cast<void*>(&ucxParkWorker), &self) != 0 &&
      self.dli_fname != nullptr)
    pinned = dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) != nullptr;
}

ucs_status_t ucxCreateEndpoint(ucp_worker_h worker, const std::string& address, bool* peerMode,
                               ucp_err_handler_cb_t onError, void* arg, ucp_ep_h* ep) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = *peerMode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  params.err_handler.cb = onError;
  params.err_handler.arg = arg;
  ucs_status_t s = ucp_ep_create(worker, &params, ep);
  if (s == UCS_ERR_UNREACHABLE && *peerMode) {
    // UCX 1.13's shared-memory transports have no peer-failure support, so a PEER-mode endpoint
    // cannot use them: connect without it (the callers notice dead peers in their own ways).
    *peerMode = false;
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    s = ucp_ep_create(worker, &params, ep);
  }
  if (s != UCS_OK) *ep = nullptr;
  return s;
}

ucs_status_ptr_t ucxCloseEndpoint(ucp_ep_h ep, bool force) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &param);
  return UCS_PTR_IS_PTR(sp) ? sp : nullptr;
}

bool ucxWaitRequest(ucp_worker_h worker, ucs_status_ptr_t sp,
                    std::chrono::steady_clock::time_point deadline) {
  while (ucp_request_check_status(sp) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(worker);
  return ucp_request_check_status(sp) != UCS_INPROGRESS;
}

std::string ucxEndpointTransports(ucp_ep_h ep) {
  // UCX 1.13 has no query for an endpoint's transports (ucp_ep_query reports names and socket
  // addresses only), so this reads the lane table that ucp_ep_print_info writes.
  char* text = nullptr;
  size_t length = 0;
  FILE* f = open_memstream(&text, &length);
  if (f == nullptr) return "?";
  ucp_ep_print_info(ep, f);
  std::fclose(f);
  std::string info(text, length);
  std::free(text);
  return ucxLaneTransports(info);
}

bool ucxIsPeerFailure(ucs_status_t s) {
  switch (s) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
    // Shared memory: the peer's segment could not be attached because it is gone with the
    // peer (the first large message to a rank that died; found by the fault-injection tests).
    case UCS_ERR_SHMEM_SEGMENT: return true;
    default: return false;
  }
}

}  // namespace terse
