// The net plugin's implementation: connection-oriented byte pipes over UCX tagged messages.
// The C tables in net_tables.cc are thin shims over these classes; nothing here is exported.
//
// Connection setup (net_connect.{h,cc}). listen() opens a nonblocking TCP socket on the chosen
// interface and puts its address in NCCL's 128-byte handle. connect() dials it, sends a hello,
// and reads back the receiver's UCX worker address plus a receiver-chosen comm id; accept()
// answers. Both run as small state machines advanced on each call, so neither ever blocks. The
// TCP socket then stays open for the life of the comm: it carries no data, but it turns a dead
// peer into a hang-up the other side sees at once, whatever UCX transport moves the bytes.
//
// Data (net_ucx.cc). A send comm owns a UCX endpoint to the receiver's worker; a message travels
// with the UCX tag (recvCommId << 32 | NCCL tag), so receives on one comm match its sends in
// posting order per tag, and the tag picks the buffer of a grouped receive.
//
// Lossless compression (TERSE_NET_LOSSLESS=1, net_lossless.h): both ends agree at connect time.
// A lossless receive comm does not post its receives to UCX: it waits for each message with
// ucp_tag_probe_nb, in posting order per tag, because only the message's tag says whether it is a
// compressed frame (received into a staging buffer and decoded by test()) or raw bytes (received
// straight into NCCL's buffer).
//
// Thread-safety: every entry point locks its NetContext's mutex; NCCL calls from several
// threads (service thread for connect/accept/regMr, progress thread for isend/irecv/test).
#pragma once

#include "terse/common/status.h"

#include "abi/nccl_plugin.h"
#include "net_device.h"
#include "net_lossless.h"
#include "terse/transport/ucx_core.h"

#include <ucp/api/ucp.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace terse::plugin {

class NetContext;
class Comm;

// Result of one request's sub-operation, filled by UCX callbacks.
struct SubOp {
  void* ucpRequest = nullptr;  // live UCX request, nullptr once its callback ran
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t bytes = 0;  // what arrived (a compressed frame's size until test() decodes it)
  // Lossless receive comms: the receive waits for its message to be probed, then lands in `dst`
  // (raw) or in `staging` (a compressed frame).
  bool probing = false;
  bool compressed = false;
  void* dst = nullptr;
  size_t capacity = 0;
  uint64_t tag = 0;
  ucs_memory_type_t memType = UCS_MEMORY_TYPE_UNKNOWN;
  // Nonzero: a compressed frame of this many bytes was refused by checkFrameSize and received
  // into nothing (to take it off UCX's queue); test() reports it.
  size_t refusedFrameBytes = 0;
  // A compressed send's frame or a compressed receive's frame; kept with the pooled slot so a
  // stream of messages allocates once.
  StagingBuffer staging;

  void reset() {
    ucpRequest = nullptr;
    done = false;
    status = UCS_OK;
    bytes = 0;
    probing = false;
    compressed = false;
    dst = nullptr;
    capacity = 0;
    tag = 0;
    memType = UCS_MEMORY_TYPE_UNKNOWN;
    refusedFrameBytes = 0;
  }
};

// What NCCL holds as `request`. Pooled per comm, so no allocation per message.
struct NetRequest {
  Comm* comm = nullptr;
  bool inUse = false;
  bool abandoned = false;  // test() reported an error; freed when UCX lets go of it
  int n = 0;
  std::array<SubOp, kMaxGroupedRecvs> ops{};
};

// What NCCL holds as `mhandle`: the registered range, checked on every isend/irecv.
struct MemRegion {
  uintptr_t begin;
  size_t size;
  int type;  // NCCL_PTR_HOST or NCCL_PTR_CUDA
};

// What a lossless send comm did, logged when it closes (and read by the tests through it).
struct LosslessStats {
  uint64_t eligible = 0;    // sends of at least TERSE_NET_LOSSLESS_MIN_BYTES
  uint64_t compressed = 0;  // of those, sent as compressed frames
  uint64_t rawBytes = 0;    // bytes of the eligible sends
  uint64_t wireBytes = 0;   // what they took on the wire
};

class Comm {
 public:
  Comm(NetContext* ctx, int fd, size_t poolSize, uint32_t recvCommId, bool lossless);
  virtual ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  NetContext* context() const { return ctx_; }
  uint32_t id() const { return recvCommId_; }
  int fd() const { return fd_; }
  bool lossless() const { return lossless_; }
  // Marks the comm broken; every pending and later request fails with ncclRemoteError.
  void fail(const std::string& why);
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }

  NetRequest* allocRequest();
  // Ends a request (also drops its pending probes); abandon() keeps the slot until UCX lets go.
  void freeRequest(NetRequest* r);
  void abandon(NetRequest* r);
  // Checks the bootstrap socket (rate-limited): a hang-up means the peer process is gone.
  bool peerHungUp(bool force);
  // Requests whose UCX operations are still running (used while closing).
  bool hasLiveUcxOps() const;
  // Closed by NCCL but UCX still holds requests into the pool: freed with the worker.
  void markClosed() { closed_ = true; }
  bool closed() const { return closed_; }
  std::vector<NetRequest>& pool() { return pool_; }

 protected:
  NetContext* ctx_;
  int fd_;
  uint32_t recvCommId_;
  bool lossless_;
  std::vector<NetRequest> pool_;
  std::string failure_;
  bool closed_ = false;
  int64_t lastCheckMs_ = INT64_MIN / 2;  // CLOCK_MONOTONIC_COARSE, ms

 private:
  virtual void forgetProbes(NetRequest*) {}
};

class SendComm : public Comm {
 public:
  SendComm(NetContext* ctx, int fd, uint32_t recvCommId, size_t poolSize, bool lossless)
      : Comm(ctx, fd, poolSize, recvCommId, lossless) {}
  ~SendComm() override;
  Status createEndpoint(const std::string& workerAddress);
  ucp_ep_h ep() const { return ep_; }
  void forgetEndpoint() { ep_ = nullptr; }  // after ucp_ep_close_nbx
  LosslessStats& stats() { return stats_; }

 private:
  ucp_ep_h ep_ = nullptr;
  LosslessStats stats_;
};

// A sub-receive waiting for ucp_tag_probe_nb (lossless comms only).
struct PendingProbe {
  NetRequest* request;
  int index;
};

class RecvComm : public Comm {
 public:
  RecvComm(NetContext* ctx, int fd, uint32_t recvCommId, size_t poolSize, bool lossless)
      : Comm(ctx, fd, poolSize, recvCommId, lossless) {}
  // In posting order; matchProbes serves them first come first served per tag.
  std::vector<PendingProbe>& probes() { return probes_; }

 private:
  void forgetProbes(NetRequest* r) override;
  std::vector<PendingProbe> probes_;
};

class ListenComm;
struct ConnectAttempt;
// The context a listen comm belongs to (ListenComm is private to net_ucx.cc).
NetContext* contextOf(ListenComm* listen);

// One UCX context + worker. v11 makes one per init() (per NCCL communicator); v8..v10 share one.
class NetContext {
 public:
  static Result<std::unique_ptr<NetContext>> create(const DeviceInfo& device);
  ~NetContext();
  NetContext(const NetContext&) = delete;
  NetContext& operator=(const NetContext&) = delete;

  Status listen(int dev, void* handle, ListenComm** out);
  Status connect(int dev, void* handle, SendComm** out);
  Status accept(ListenComm* listen, RecvComm** out);
  Status closeListen(ListenComm* listen);
  Status closeSend(SendComm* comm);
  Status closeRecv(RecvComm* comm);

  Status regMr(Comm* comm, void* data, size_t size, int type, MemRegion** out);
  Status deregMr(Comm* comm, MemRegion* region);
  Status isend(SendComm* comm, void* data, size_t size, int tag, MemRegion* mh, NetRequest** out);
  Status irecv(RecvComm* comm, int n, void** data, const size_t* sizes, const int* tags,
               void** mhandles, NetRequest** out);
  Status test(NetRequest* request, int* done, int* sizes);

  std::mutex& mutex() { return mu_; }
  ucp_worker_h worker() const { return ucx_.worker; }
  const DeviceInfo& device() const { return device_; }
  // Memory types UCX can move (NCCL_PTR_* bits), from ucp_context_query.
  int ptrSupport() const { return ptrSupport_; }
  // Whether endpoints ask UCX for peer-failure reports (not possible over shared memory only).
  bool peerErrorMode() const { return peerErrorMode_; }
  void disablePeerErrorMode() { peerErrorMode_ = false; }
  // Progresses UCX, then starts the receives whose messages a lossless comm can now probe.
  void progress();

 private:
  NetContext() = default;
  Status init(const DeviceInfo& device);
  void closeComm(Comm* comm);
  Status advanceConnect(ConnectAttempt* attempt, SendComm** out);
  void matchProbes(RecvComm* comm);
  // Decodes the compressed frames of a finished request into NCCL's buffers.
  Status decodeFrames(NetRequest* r);

  std::mutex mu_;
  DeviceInfo device_;
  UcxWorker ucx_;  // context, worker and the worker's address (transport/ucx_core.h)
  int ptrSupport_ = NCCL_PTR_HOST;
  bool peerErrorMode_ = true;
  LosslessConfig lossless_;
  std::unique_ptr<LosslessCodec> codec_;  // when lossless_.enabled
  std::vector<RecvComm*> losslessRecvs_;  // open lossless receive comms, for progress()
  std::vector<uint64_t> idleTags_;        // matchProbes' scratch
  uint32_t nextRecvCommId_ = 1;
  uint64_t nextListenNonce_ = 1;
  // Everything still open, so finalize can tear down what NCCL left behind.
  std::vector<std::unique_ptr<ListenComm>> listens_;
  std::vector<std::unique_ptr<ConnectAttempt>> attempts_;
  std::vector<std::unique_ptr<Comm>> comms_;
};

}  // namespace terse::plugin
