#include "terse/rendezvous/bootstrap.h"

#include "published.h"

#include "terse/common/env.h"
#include "terse/common/logging.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <unistd.h>

#ifndef TERSE_VERSION_STRING
#define TERSE_VERSION_STRING "unknown"
#endif

namespace terse {

// The bootstrap's settings (terse/common/env.h). The entry point reads them with the launchers'
// variables (BootstrapVariables) and passes their text here.
const EnvSetting kRankSetting{
    {"TERSE_RANK", "int", "",
     "This process's rank. When unset, taken from OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
     "or RANK (torchrun).",
     0, kMaxRanks - 1}};
const EnvSetting kWorldSizeSetting{
    {"TERSE_WORLD_SIZE", "int", "",
     "Number of ranks. When unset, taken from OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or "
     "WORLD_SIZE (torchrun).",
     1, kMaxRanks}};
const EnvSetting kLocalRankSetting{
    {"TERSE_LOCAL_RANK", "int", "",
     "Rank within this host. When unset, taken from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or "
     "LOCAL_RANK.",
     0, kMaxRanks - 1}};
const EnvSetting kLocalSizeSetting{
    {"TERSE_LOCAL_SIZE", "int", "",
     "Ranks on this host. When unset, taken from OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or "
     "LOCAL_WORLD_SIZE (torchrun). Only checked against the topology terse derives (TERSE_NODE).",
     1, kMaxRanks}};
const EnvSetting kStoreSetting{
    {"TERSE_STORE", "string", "",
     "Rendezvous store: host:port of the TCP store served by rank 0, or a directory path for the "
     "file store. When unset under torchrun, MASTER_ADDR:MASTER_PORT+1 (PyTorch's own store "
     "holds MASTER_PORT)."}};

namespace {

// The launchers' variables each of terse's own falls back on, in order.
const std::initializer_list<const char*> kRankFallbacks = {"OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                           "SLURM_PROCID", "RANK"};
const std::initializer_list<const char*> kSizeFallbacks = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                           "SLURM_NTASKS", "WORLD_SIZE"};
const std::initializer_list<const char*> kLocalRankFallbacks = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                                                "SLURM_LOCALID", "LOCAL_RANK"};
const std::initializer_list<const char*> kLocalSizeFallbacks = {
    "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"};
const std::initializer_list<const char*> kTorchrunStore = {"MASTER_ADDR", "MASTER_PORT"};

// The first of `names` that is set. terse's own variable comes first, parsed as its declaration
// says; the launchers' are parsed by the same strict parser with the same range (a world size
// of 2^31 must be refused as such, not wrap to a negative int).
Result<std::optional<int64_t>> firstInt(const BootstrapVariables& vars, const EnvSetting& setting,
                                        std::initializer_list<const char*> fallbacks,
                                        std::string* source) {
  const char* terseName = setting.name();
  const int64_t min = setting.info().min, max = setting.info().max;
  const std::string own = vars.get(terseName);
  if (!own.empty()) {
    TERSE_ASSIGN_OR_RETURN(int64_t v, parseIntSetting(terseName, own, min, max));
    *source = terseName;
    return std::optional<int64_t>(v);
  }
  for (const char* name : fallbacks) {
    const std::string text = vars.get(name);
    if (text.empty()) continue;
    auto v = parseIntSetting(name, text, min, max);
    if (!v.isOk())
      return v.status().withContext(std::string("read because ") + terseName + " is unset");
    *source = name;
    return std::optional<int64_t>(v.value());
  }
  return std::optional<int64_t>();
}

// Who claims a rank, for the message when two processes claim the same one.
std::string claimant() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return formatString("pid %d on %s", static_cast<int>(getpid()), host);
}

std::string headerOf(int size) {
  return std::string("terse ") + TERSE_VERSION_STRING + " size " + std::to_string(size) + "\n";
}

}  // namespace

std::string BootstrapVariables::get(const std::string& name) const {
  auto it = values.find(name);
  return it != values.end() ? it->second : std::string();
}

const std::vector<std::string>& bootstrapVariableNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const EnvSetting* s : {&kRankSetting, &kWorldSizeSetting, &kLocalRankSetting,
                                &kLocalSizeSetting, &kStoreSetting})
      out.push_back(s->name());
    for (auto list :
         {kRankFallbacks, kSizeFallbacks, kLocalRankFallbacks, kLocalSizeFallbacks, kTorchrunStore})
      for (const char* name : list) out.push_back(name);
    return out;
  }();
  return names;
}

Result<BootstrapInfo> bootstrapInfoFrom(const BootstrapVariables& vars) {
  BootstrapInfo info;
  std::string sizeSource, localSource;
  TERSE_ASSIGN_OR_RETURN(auto rank, firstInt(vars, kRankSetting, kRankFallbacks, &info.rankSource));
  TERSE_ASSIGN_OR_RETURN(auto size, firstInt(vars, kWorldSizeSetting, kSizeFallbacks, &sizeSource));
  TERSE_ASSIGN_OR_RETURN(auto local,
                         firstInt(vars, kLocalRankSetting, kLocalRankFallbacks, &localSource));
  if (!rank && !size) {
    // Nothing launched us as part of a world: a single rank.
    info.rank = 0;
    info.size = 1;
    info.rankSource = "default (no launcher variables set)";
  } else if (!rank || !size) {
    return errorInvalidArgument(
        "found the %s but not the %s; set both TERSE_RANK and TERSE_WORLD_SIZE (or launch with "
        "terse-run, mpirun, srun or torchrun)",
        rank ? "rank" : "world size", rank ? "world size" : "rank");
  } else {
    info.rank = static_cast<int>(*rank);
    info.size = static_cast<int>(*size);
  }
  if (info.size < 1 || info.size > (1 << 24))
    return errorInvalidArgument("world size %d (from %s) is outside 1..2^24", info.size,
                                sizeSource.c_str());
  if (info.rank < 0 || info.rank >= info.size)
    return errorInvalidArgument("rank %d (from %s) is outside 0..%d for a world of %d ranks",
                                info.rank, info.rankSource.c_str(), info.size - 1, info.size);
  info.localRank = local ? static_cast<int>(*local) : info.rank;
  std::string localSizeSource;
  TERSE_ASSIGN_OR_RETURN(auto localSize,
                         firstInt(vars, kLocalSizeSetting, kLocalSizeFallbacks, &localSizeSource));
  if (local) info.launcherLocalRank = static_cast<int>(*local);
  if (localSize) info.launcherLocalSize = static_cast<int>(*localSize);
  info.localSource = localSource + (localSize ? (local ? " and " : "") + localSizeSource : "");
  if (info.localRank < 0)
    return errorInvalidArgument("local rank %d (from %s) is negative", info.localRank,
                                localSource.c_str());

  info.store = vars.get(kStoreSetting.name());
  if (info.store.empty()) {
    // torchrun: PyTorch's own TCP store already listens on MASTER_PORT (torch.distributed and
    // terse run in the same job), so terse's store takes the next port.
    const std::string addrText = vars.get("MASTER_ADDR"), portText = vars.get("MASTER_PORT");
    const char* addr = addrText.c_str();
    const char* port = portText.c_str();
    if (*addr && *port) {
      errno = 0;
      char* end = nullptr;
      long p = std::strtol(port, &end, 10);
      if (errno != 0 || *end != '\0' || p < 1 || p > 65534)
        return errorInvalidArgument(
            "MASTER_PORT='%s' is not a port in 1..65534 (terse's store would use MASTER_PORT+1, "
            "read because TERSE_STORE is unset); set TERSE_STORE=host:port",
            port);
      info.store = std::string(addr) + ":" + std::to_string(p + 1);
    }
  }
  if (info.store.empty() && info.size > 1)
    return errorInvalidArgument(
        "no rendezvous store for a world of %d ranks: set TERSE_STORE=host:port (a free port on "
        "rank 0's host) or TERSE_STORE=/shared/fresh/directory, or use terse-run, which sets it",
        info.size);
  return info;
}

bool parseHostPort(const std::string& spec, std::string* host, int* port) {
  if (spec.empty() || spec[0] == '/' || spec[0] == '.') return false;
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) return false;
  const std::string digits = spec.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 5)
    return false;
  *host = spec.substr(0, colon);
  *port = std::atoi(digits.c_str());
  return true;
}

Result<std::unique_ptr<Store>> openStore(const BootstrapInfo& info,
                                         std::chrono::milliseconds timeout) {
  if (info.store.empty()) return errorInvalidArgument("no store address (set TERSE_STORE)");
  std::string host;
  int port = 0;
  if (parseHostPort(info.store, &host, &port))
    return createTcpStore(host, port, info.rank == 0, timeout);
  return createFileStore(info.store);
}

namespace {

std::string describeMissingRanks(const std::vector<size_t>& missing) {
  std::string list;
  for (size_t i = 0; i < missing.size() && i < 16; ++i)
    list += (i ? ", " : "") + std::to_string(missing[i]);
  if (missing.size() > 16) list += ", ...";
  return (missing.size() == 1 ? "rank " : "ranks ") + list + " (" + std::to_string(missing.size()) +
         " missing) never arrived at the rendezvous:";
}

}  // namespace

namespace {

// A rank that fails the rendezvous publishes why under <prefix>/failed, so the others report the
// cause rather than the store vanishing when rank 0, which serves it, exits. Rank 0 then stays a
// moment (at most 2 s) until the ranks that arrived have read it.
Status failRendezvous(Store& store, const std::string& prefix, int rank, int size,
                      const Status& why, bool publish, std::chrono::milliseconds timeout) {
  if (publish)
    (void)store.set(prefix + "/failed", rendezvous_detail::encodePublishedFailure(rank, why));
  if (rank != 0) {
    // Whatever made us fail, we are done reading: rank 0 need not wait for us.
    (void)store.set(prefix + "/failed-seen/" + std::to_string(rank), "1");
    return why;
  }
  std::vector<int> waitFor;
  for (int q = 1; q < size; ++q) {
    auto present = store.tryGet(prefix + "/rank/" + std::to_string(q));
    if (present.isOk() && present->has_value()) waitFor.push_back(q);
  }
  auto until = std::chrono::steady_clock::now() +
               std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2));
  while (!waitFor.empty() && std::chrono::steady_clock::now() < until) {
    auto seen = store.tryGet(prefix + "/failed-seen/" + std::to_string(waitFor.back()));
    if (!seen.isOk()) break;
    if (seen->has_value())
      waitFor.pop_back();
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return why;
}

// The failure another rank published, if any (acknowledged so rank 0 may go).
Status publishedFailure(Store& store, const std::string& prefix, int rank) {
  auto got = store.tryGet(prefix + "/failed");
  if (!got.isOk() || !got->has_value()) return Status::ok();
  (void)store.set(prefix + "/failed-seen/" + std::to_string(rank), "1");
  return rendezvous_detail::parsePublishedFailure(**got);
}

}  // namespace

Result<std::vector<std::string>> storeAllGather(Store& store, const std::string& prefix, int rank,
                                                int size, const std::string& mine,
                                                std::chrono::milliseconds timeout) {
  const std::string header = headerOf(size);
  // Two processes started with the same rank would both publish under that rank's key, the
  // second overwriting the first, and the world could look complete to everyone: each rank
  // claims its number first, and a second claim fails the whole rendezvous at once.
  const std::string me = claimant();
  TERSE_ASSIGN_OR_RETURN(std::optional<std::string> holder,
                         store.setIfAbsent(prefix + "/claim/" + std::to_string(rank), me));
  if (holder && *holder != me)
    return failRendezvous(
        store, prefix, rank, size,
        errorInvalidUsage("rank %d was started twice: %s holds it and %s asked for it too; every "
                          "process needs its own rank (TERSE_RANK or the launcher's)",
                          rank, printableBytes(holder->data(), holder->size(), 300).c_str(),
                          me.c_str()),
        true, timeout);
  TERSE_RETURN_IF_ERROR(store.set(prefix + "/rank/" + std::to_string(rank), header + mine));
  // Poll every rank's key, checking each header as soon as it appears, so a mismatched rank is
  // reported at once rather than as a timeout.
  std::vector<std::string> all(size);
  std::vector<bool> seen(size, false);
  int remaining = size;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto delay = std::chrono::milliseconds(1);
  auto missingRanks = [&] {
    std::vector<size_t> missing;
    for (int q = 0; q < size; ++q)
      if (!seen[q]) missing.push_back(static_cast<size_t>(q));
    return describeMissingRanks(missing);
  };
  for (;;) {
    Status other = publishedFailure(store, prefix, rank);
    if (!other.isOk()) return failRendezvous(store, prefix, rank, size, other, false, timeout);
    for (int r = 0; r < size; ++r) {
      if (seen[r]) continue;
      Result<std::optional<std::string>> got = store.tryGet(prefix + "/rank/" + std::to_string(r));
      if (!got.isOk()) {
        // Rank 0 is gone with its store: say who was missing, not only that the store went.
        return Status(got.status().code(),
                      got.status().message() + "; at that point " + missingRanks());
      }
      std::optional<std::string> value = std::move(got).value();
      if (!value) continue;
      Status same = rendezvous_detail::splitPublishedValue(r, rank, *value, header, &all[r]);
      if (!same.isOk()) return failRendezvous(store, prefix, rank, size, same, true, timeout);
      seen[r] = true;
      --remaining;
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() >= deadline)
      return failRendezvous(
          store, prefix, rank, size,
          errorTimeout("%s rank %d waited %lld ms for a world of %d ranks on the %s store; "
                       "check that every rank was started with the same TERSE_STORE",
                       missingRanks().c_str(), rank, static_cast<long long>(timeout.count()), size,
                       store.describe().c_str()),
          true, timeout);
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(32));
  }
  // Rank 0 may serve the store: it waits until everyone has read before it may go away.
  TERSE_RETURN_IF_ERROR(store.set(prefix + "/read/" + std::to_string(rank), "1"));
  if (rank == 0) {
    std::vector<std::string> readKeys;
    for (int r = 0; r < size; ++r) readKeys.push_back(prefix + "/read/" + std::to_string(r));
    TERSE_RETURN_IF_ERROR(store.waitAll(readKeys, timeout, &describeMissingRanks));
  }
  return all;
}

}  // namespace terse
