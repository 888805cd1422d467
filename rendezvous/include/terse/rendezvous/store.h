// Key-value stores through which ranks find each other at start-up. Values are opaque bytes.
// Keys are written once per run; a get waits for its key to appear, up to a timeout.
//
// Thread-safety: a Store may be used from several threads (calls are serialised internally).
#pragma once

#include "terse/common/status.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace terse {

class Store {
 public:
  virtual ~Store() = default;

  virtual Status set(const std::string& key, const std::string& value) = 0;
  // The value, or nullopt when the key does not exist (yet).
  virtual Result<std::optional<std::string>> tryGet(const std::string& key) = 0;
  // Sets `key` only if it does not exist yet, atomically with respect to every other client:
  // nullopt when this call set it, else the value that was there (left unchanged). Ranks claim
  // their rank number with it, so two processes started with the same rank are caught.
  virtual Result<std::optional<std::string>> setIfAbsent(const std::string& key,
                                                         const std::string& value) = 0;
  // "tcp(host:port)", "file(/path)", "memory": for messages.
  virtual std::string describe() const = 0;

  // Waits up to `timeout` for `key`; a timeout is kTimeout naming the key.
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout);
  // Waits up to `timeout` for all `keys`. On timeout, the error lists the missing keys (or, with
  // `describeMissing`, whatever it returns for their indices, e.g. "ranks 3, 5").
  Status waitAll(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                 std::string (*describeMissing)(const std::vector<size_t>& missing) = nullptr);
};

// An in-memory store shared by ranks that are threads of one process.
std::shared_ptr<Store> createMemoryStore();

// A store in a directory shared by all ranks (local disk or a shared file system). Each key is a
// file written atomically (write then rename). The directory must be fresh for each run, since
// keys left by an earlier run would be read as this run's; it is created when missing.
Result<std::unique_ptr<Store>> createFileStore(const std::string& directory);

// A TCP store. With `serve`, this process (rank 0) listens on host:port first; every process,
// the server included, then connects as a client, retrying until `timeout` while the server is
// not up yet. The server lives as long as the returned Store. A serving store may be given port
// 0: the kernel picks a free port when it binds (no probe, so no other process can take it in
// between), and `*servedPort` (when given) receives the port served, which the other processes
// then connect to.
Result<std::unique_ptr<Store>> createTcpStore(const std::string& host, int port, bool serve,
                                              std::chrono::milliseconds timeout,
                                              int* servedPort = nullptr);

}  // namespace terse
