#include "terse/common/env.h"

#include <cctype>
#include <cerrno>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace terse {

const std::vector<EnvVarInfo>& envRegistry() {
  // Keep in step with docs/env.md (checked by a test). Sorted by topic, not alphabet.
  static const std::vector<EnvVarInfo> kRegistry = {
      {"TERSE_DEBUG", "enum", "WARN",
       "Log level: NONE, WARN, INFO or TRACE. Lines go to stderr (or to NCCL's logger inside the "
       "plugin).",
       0, 0, "NONE,WARN,INFO,TRACE"},
      {"TERSE_DEBUG_SUBSYS", "list", "ALL",
       "Comma-separated subsystems to log: INIT, COLL, NET, CODEC, BOOT, PLUGIN, ALL. A leading ^ "
       "inverts the list.",
       0, 0, "INIT,COLL,NET,CODEC,BOOT,PLUGIN,ALL"},
      {"TERSE_CPU_THREADS", "int", "0",
       "Threads used by CPU codec kernels on large buffers; 0 means one per hardware thread.", 0,
       1024},
      {"TERSE_RANK", "int", "",
       "This process's rank. When unset, taken from OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
       "or RANK (torchrun).",
       0, kMaxRanks - 1},
      {"TERSE_WORLD_SIZE", "int", "",
       "Number of ranks. When unset, taken from OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or "
       "WORLD_SIZE (torchrun).",
       1, kMaxRanks},
      {"TERSE_LOCAL_RANK", "int", "",
       "Rank within this host. When unset, taken from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or "
       "LOCAL_RANK.",
       0, kMaxRanks - 1},
      {"TERSE_LOCAL_SIZE", "int", "",
       "Ranks on this host. When unset, taken from OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or "
       "LOCAL_WORLD_SIZE (torchrun). Only checked against the topology terse derives (TERSE_NODE).",
       1, kMaxRanks},
      {"TERSE_NODE", "string", "",
       "This rank's node: ranks with the same value share a node (shared memory, uncompressed "
       "steps of two-level collectives). When unset, the host's name and boot id. Set it to "
       "emulate several hosts on one machine (terse-run --nodes, network namespaces)."},
      {"TERSE_STORE", "string", "",
       "Rendezvous store: host:port of the TCP store served by rank 0, or a directory path for the "
       "file store. When unset under torchrun, MASTER_ADDR:MASTER_PORT+1 (PyTorch's own store "
       "holds MASTER_PORT)."},
      {"TERSE_TIMEOUT_MS", "int", "300000",
       "Per-operation timeout in milliseconds for rendezvous, transport and collectives. A peer "
       "that does not answer within it is reported by rank.",
       1, kMaxTimeoutMs},
      {"TERSE_SEGMENT_BYTES", "int", "1048576",
       "Pipeline segment of the collectives, in bytes of float32 (rounded to a multiple of 65536 "
       "elements): compression, transfer and reduction of different segments overlap.",
       int64_t{1} << 18, int64_t{1} << 30},
      {"TERSE_PIPELINE_DEPTH", "int", "1",
       "Compressed collectives: how many segment rounds a rank compresses and sends ahead of "
       "the segment it reduces (1-8). Deeper keeps a slow link busier while ranks wait on each "
       "other, at the cost of a longer drain.",
       1, 8},
      {"TERSE_UCX_TCP_EAGER", "int", "1",
       "With UCX_TLS naming only tcp (and self) and no UCX_RNDV_THRESH of the user's, terse's "
       "transport sends every message eagerly (UCX's RNDV_THRESH=inf): UCX's rendezvous waits "
       "for a busy receiver to answer each message before data moves, which cost the compressed "
       "collectives 10-15% of a 1 Gbit/s link. 0 leaves the threshold to UCX. Not applied with "
       "shared memory or RDMA, where rendezvous is the faster protocol.",
       0, 1},
      {"TERSE_SMALL_BYTES", "int", "65536",
       "Uncompressed allreduces of at most this many float32 bytes use recursive doubling "
       "(latency-bound) instead of the ring (bandwidth-bound).",
       0, int64_t{1} << 30},
      {"TERSE_ALGO", "enum", "auto",
       "How allreduce, reduce-scatter and allgather cross the ranks: twolevel (exact reduction "
       "inside each node, the codec across nodes on each local rank's slice, allgather inside the "
       "node), flat (every rank a peer of every other) or auto (two-level when there are "
       "several nodes with the same number of ranks, more than one each; else flat). twolevel "
       "on a world whose nodes cannot run it fails communicator creation; split communicators "
       "follow it where they can. Every rank must resolve the same.",
       0, 0, "auto,flat,twolevel"},
      {"TERSE_TRANSPORT", "enum", "ucx",
       "Byte transport between processes: ucx (the default) or inproc (threads of one process, "
       "for tests).",
       0, 0, "ucx,inproc"},
      {"TERSE_FAULT", "string", "",
       "Fault injection for tests (off when empty): rules separated by ';', e.g. "
       "kill:rank=2:after_sends=17, drop:rank=1:peer=0:phase=gather, delay:ms=50:count=0. "
       "Actions kill (SIGKILL the process), drop (close connections) and delay (sleep before a "
       "send); triggers after_sends=N / after_recvs=N; filters rank, peer, phase, tag. See "
       "transport/include/terse/transport/fault.h."},
      {"TERSE_TEST_SEED", "int", "",
       "Tests and terse-bench soak: seed of the randomized fault-injection and soak runs. Unset: "
       "a fresh seed per run, printed so a failure can be replayed.",
       0, std::numeric_limits<int64_t>::max()},
      {"TERSE_NET_IFNAME", "string", "",
       "NCCL net plugin: interface whose address carries connection setup. When unset, the first "
       "interface named in UCX_NET_DEVICES, else the first non-loopback interface that is up."},
      {"TERSE_NET_SPEED_MBPS", "int", "0",
       "NCCL net plugin: link speed in Mbit/s reported to NCCL; 0 reads it from sysfs (10000 when "
       "the link has none, e.g. loopback).",
       0, 100000000},
      {"TERSE_NET_MAX_RECVS", "int", "8",
       "NCCL net plugin: most buffers in one grouped receive (maxRecvs), 1..8.", 1, 8},
      {"TERSE_NET_LOSSLESS", "bool", "0",
       "NCCL net plugin: compress sends of at least TERSE_NET_LOSSLESS_MIN_BYTES with zstd "
       "(lossless; incompressible messages go raw). Must be the same on every rank: connections "
       "between ranks that differ fail. Pays only on slow links with compressible data (see "
       "docs/nccl-plugin.md)."},
      {"TERSE_NET_LOSSLESS_MIN_BYTES", "int", "65536",
       "NCCL net plugin: smallest send that TERSE_NET_LOSSLESS compresses, 256..2^30 bytes.", 256,
       int64_t{1} << 30},
      {"TERSE_COLLNET_CODEC", "string", "none",
       "NCCL CollNet plugin: codec spec for iallreduce/ireducescatter (none, fp16, bf16, int8, "
       "onebit, topk with options, see docs/codecs.md) or auto[:max=NAME]. An unknown spec is a "
       "WARN at init and runs uncompressed."},
      {"TERSE_COLLNET_EF_PERIOD", "string", "auto",
       "NCCL CollNet plugin: iallreduce + ireducescatter calls per training step; residuals of "
       "error-feedback codecs (onebit, topk) are kept per position in that sequence. auto (or "
       "auto:warmup=N) learns it from the calls; 0 turns error feedback off (such codecs fall "
       "back to none)."},
      {"TERSE_LIBRARY", "string", "",
       "Python package (python/, docs/pytorch.md): path of the libterse.so to load. When unset: "
       "the checkout's build/lib (when imported from the source tree), then the dynamic loader's "
       "search path (LD_LIBRARY_PATH, ldconfig), then /usr/local/lib and /usr/lib."},
  };
  return kRegistry;
}

static const EnvVarInfo* findVar(const char* name) {
  for (const auto& v : envRegistry())
    if (std::strcmp(v.name, name) == 0) return &v;
  return nullptr;
}

namespace {

// A peer's or user's text inside our messages: control bytes escaped, long values cut.
std::string quoted(const std::string& text) { return printableBytes(text.data(), text.size(), 80); }

std::vector<std::string> splitChoices(const char* choices) {
  std::vector<std::string> out;
  std::string all = choices ? choices : "";
  size_t pos = 0;
  while (pos <= all.size()) {
    size_t comma = all.find(',', pos);
    if (comma == std::string::npos) comma = all.size();
    out.push_back(all.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// The choice `word` names (case-insensitively), or "" if none.
std::string matchChoice(const EnvVarInfo& info, const std::string& word) {
  for (const std::string& c : splitChoices(info.choices))
    if (strcasecmp(c.c_str(), word.c_str()) == 0) return c;
  return std::string();
}

// The variable's text, or its default when unset or empty.
Result<std::string> valueOf(const char* name, const EnvVarInfo** info) {
  *info = findVar(name);
  if (*info == nullptr)
    return errorInternal("environment variable %s is not in terse's registry", name);
  const char* value = std::getenv(name);
  return std::string(value != nullptr && *value != '\0' ? value : (*info)->defaultValue);
}

Status checkOne(const EnvVarInfo& v) {
  const std::string type = v.type;
  if (envRaw(v.name).empty()) return Status::ok();  // unset, and no default to check
  if (type == "int") return envInt(v.name).status();
  if (type == "bool") return envBool(v.name).status();
  if (type == "enum") return envEnum(v.name).status();
  if (type == "list") {
    const std::string text = envRaw(v.name);
    size_t pos = !text.empty() && text[0] == '^' ? 1 : 0;
    while (pos <= text.size()) {
      size_t comma = text.find(',', pos);
      if (comma == std::string::npos) comma = text.size();
      std::string word = text.substr(pos, comma - pos);
      if (matchChoice(v, word).empty())
        return errorInvalidArgument(
            "%s='%s': '%s' is not one of %s (a comma-separated list, optionally after ^)", v.name,
            quoted(text).c_str(), quoted(word).c_str(), envAccepted(v).c_str());
      pos = comma + 1;
    }
  }
  return Status::ok();
}

}  // namespace

std::string envAccepted(const EnvVarInfo& info) {
  const std::string type = info.type;
  if (type == "int") {
    auto bound = [](int64_t x) {
      if (x == std::numeric_limits<int64_t>::max()) return std::string("2^63-1");
      // Powers of two read better as such (2^30 rather than 1073741824).
      if (x >= 65536 && (x & (x - 1)) == 0) {
        int e = 0;
        while ((int64_t{1} << e) != x) ++e;
        return "2^" + std::to_string(e);
      }
      return std::to_string(x);
    };
    return bound(info.min) + ".." + bound(info.max);
  }
  if (type == "bool") return "1/0, true/false, yes/no, on/off";
  if (type == "enum" || type == "list") {
    std::string out;
    for (const std::string& c : splitChoices(info.choices)) out += (out.empty() ? "" : ", ") + c;
    return out;
  }
  return std::string();
}

std::string envRaw(const char* name) {
  const char* value = std::getenv(name);
  if (value != nullptr && *value != '\0') return value;
  const EnvVarInfo* info = findVar(name);
  return info ? info->defaultValue : "";
}

Result<std::string> envString(const char* name) {
  const EnvVarInfo* info = nullptr;
  return valueOf(name, &info);
}

Result<int64_t> parseIntSetting(const char* name, const std::string& text, int64_t min,
                                int64_t max) {
  // strtoll alone would skip leading blanks and read 0x.. or 010 in other bases with base 0;
  // base 10 and a first character that is a digit or a sign keep the form plain.
  const char first = text.empty() ? '\0' : text[0];
  const bool plain = std::isdigit(static_cast<unsigned char>(first)) ||
                     ((first == '-' || first == '+') && text.size() > 1 &&
                      std::isdigit(static_cast<unsigned char>(text[1])));
  errno = 0;
  char* end = nullptr;
  long long value = plain ? std::strtoll(text.c_str(), &end, 10) : 0;
  if (!plain || *end != '\0')
    return errorInvalidArgument("%s='%s' is not an integer (accepted: %lld..%lld)", name,
                                quoted(text).c_str(), static_cast<long long>(min),
                                static_cast<long long>(max));
  if (errno == ERANGE || value < min || value > max)
    return errorInvalidArgument("%s=%s is out of range (accepted: %lld..%lld)", name,
                                quoted(text).c_str(), static_cast<long long>(min),
                                static_cast<long long>(max));
  return static_cast<int64_t>(value);
}

Result<int64_t> envInt(const char* name) {
  const EnvVarInfo* info = nullptr;
  TERSE_ASSIGN_OR_RETURN(std::string text, valueOf(name, &info));
  if (text.empty()) return errorInvalidArgument("%s is not set and has no default", name);
  return parseIntSetting(name, text, info->min, info->max);
}

Result<bool> envBool(const char* name) {
  const EnvVarInfo* info = nullptr;
  TERSE_ASSIGN_OR_RETURN(std::string text, valueOf(name, &info));
  const char* t = text.c_str();
  if (!strcasecmp(t, "1") || !strcasecmp(t, "true") || !strcasecmp(t, "yes") ||
      !strcasecmp(t, "on"))
    return true;
  if (!strcasecmp(t, "0") || !strcasecmp(t, "false") || !strcasecmp(t, "no") ||
      !strcasecmp(t, "off") || text.empty())
    return false;
  return errorInvalidArgument("%s='%s' is not a boolean (accepted: %s)", name, quoted(text).c_str(),
                              envAccepted(*info).c_str());
}

Result<std::string> envEnum(const char* name) {
  const EnvVarInfo* info = nullptr;
  TERSE_ASSIGN_OR_RETURN(std::string text, valueOf(name, &info));
  std::string choice = matchChoice(*info, text);
  if (choice.empty())
    return errorInvalidArgument("%s='%s' is not one of %s", name, quoted(text).c_str(),
                                envAccepted(*info).c_str());
  return choice;
}

Status checkEnvironment() {
  for (const EnvVarInfo& v : envRegistry()) TERSE_RETURN_IF_ERROR(checkOne(v));
  return Status::ok();
}

}  // namespace terse
