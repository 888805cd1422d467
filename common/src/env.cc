#include "terse/common/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace terse {

const std::vector<EnvVarInfo>& envRegistry() {
  // Keep in step with docs/env.md (checked by a test). Sorted by topic, not alphabet.
  static const std::vector<EnvVarInfo> kRegistry = {
      {"TERSE_DEBUG", "enum", "WARN",
       "Log level: NONE, WARN, INFO or TRACE. Lines go to stderr (or to NCCL's logger inside the "
       "plugin)."},
      {"TERSE_DEBUG_SUBSYS", "string", "ALL",
       "Comma-separated subsystems to log: INIT, COLL, NET, CODEC, BOOT, PLUGIN, ALL. A leading ^ "
       "inverts the list."},
      {"TERSE_CPU_THREADS", "int", "0",
       "Threads used by CPU codec kernels on large buffers; 0 means one per hardware thread."},
      {"TERSE_RANK", "int", "",
       "This process's rank. When unset, taken from OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID "
       "or RANK (torchrun)."},
      {"TERSE_WORLD_SIZE", "int", "",
       "Number of ranks. When unset, taken from OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or "
       "WORLD_SIZE (torchrun)."},
      {"TERSE_LOCAL_RANK", "int", "",
       "Rank within this host. When unset, taken from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or "
       "LOCAL_RANK."},
      {"TERSE_STORE", "string", "",
       "Rendezvous store: host:port of the TCP store served by rank 0, or a directory path for the "
       "file store. When unset under torchrun, MASTER_ADDR:MASTER_PORT+1 (PyTorch's own store "
       "holds MASTER_PORT)."},
      {"TERSE_TIMEOUT_MS", "int", "300000",
       "Per-operation timeout in milliseconds for rendezvous, transport and collectives. A peer "
       "that does not answer within it is reported by rank."},
      {"TERSE_SEGMENT_BYTES", "int", "1048576",
       "Pipeline segment of the collectives, in bytes of float32 (rounded to a multiple of 65536 "
       "elements): compression, transfer and reduction of different segments overlap."},
      {"TERSE_PIPELINE_DEPTH", "int", "1",
       "Compressed collectives: how many segment rounds a rank compresses and sends ahead of "
       "the segment it reduces (1-8). Deeper keeps a slow link busier while ranks wait on each "
       "other, at the cost of a longer drain."},
      {"TERSE_UCX_TCP_EAGER", "int", "1",
       "With UCX_TLS naming only tcp (and self) and no UCX_RNDV_THRESH of the user's, terse's "
       "transport sends every message eagerly (UCX's RNDV_THRESH=inf): UCX's rendezvous waits "
       "for a busy receiver to answer each message before data moves, which cost the compressed "
       "collectives 10-15% of a 1 Gbit/s link. 0 leaves the threshold to UCX. Not applied with "
       "shared memory or RDMA, where rendezvous is the faster protocol."},
      {"TERSE_SMALL_BYTES", "int", "65536",
       "Uncompressed allreduces of at most this many float32 bytes use recursive doubling "
       "(latency-bound) instead of the ring (bandwidth-bound)."},
      {"TERSE_TRANSPORT", "enum", "ucx",
       "Byte transport between processes: ucx (the default) or inproc (threads of one process, "
       "for tests)."},
      {"TERSE_FAULT", "string", "",
       "Fault injection for tests (off when empty): rules separated by ';', e.g. "
       "kill:rank=2:after_sends=17, drop:rank=1:peer=0:phase=gather, delay:ms=50:count=0. "
       "Actions kill (SIGKILL the process), drop (close connections) and delay (sleep before a "
       "send); triggers after_sends=N / after_recvs=N; filters rank, peer, phase, tag. See "
       "transport/include/terse/transport/fault.h."},
      {"TERSE_TEST_SEED", "int", "",
       "Tests and terse-bench soak: seed of the randomized fault-injection and soak runs. Unset: "
       "a fresh seed per run, printed so a failure can be replayed."},
      {"TERSE_NET_IFNAME", "string", "",
       "NCCL net plugin: interface whose address carries connection setup. When unset, the first "
       "interface named in UCX_NET_DEVICES, else the first non-loopback interface that is up."},
      {"TERSE_NET_SPEED_MBPS", "int", "0",
       "NCCL net plugin: link speed in Mbit/s reported to NCCL; 0 reads it from sysfs (10000 when "
       "the link has none, e.g. loopback)."},
      {"TERSE_NET_MAX_RECVS", "int", "8",
       "NCCL net plugin: most buffers in one grouped receive (maxRecvs), 1..8."},
      {"TERSE_NET_LOSSLESS", "bool", "0",
       "NCCL net plugin: compress sends of at least TERSE_NET_LOSSLESS_MIN_BYTES with zstd "
       "(lossless; incompressible messages go raw). Must be the same on every rank: connections "
       "between ranks that differ fail. Pays only on slow links with compressible data (see "
       "docs/nccl-plugin.md)."},
      {"TERSE_NET_LOSSLESS_MIN_BYTES", "int", "65536",
       "NCCL net plugin: smallest send that TERSE_NET_LOSSLESS compresses, 256..2^30 bytes."},
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

std::string envRaw(const char* name) {
  const char* value = std::getenv(name);
  if (value != nullptr) return value;
  const EnvVarInfo* info = findVar(name);
  return info ? info->defaultValue : "";
}

Result<std::string> envString(const char* name) {
  if (findVar(name) == nullptr)
    return errorInternal("environment variable %s is not in terse's registry", name);
  return envRaw(name);
}

Result<int64_t> envInt(const char* name) {
  TERSE_ASSIGN_OR_RETURN(std::string text, envString(name));
  if (text.empty()) return errorInvalidArgument("%s is not set and has no default", name);
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0')
    return errorInvalidArgument("%s='%s' is not an integer", name, text.c_str());
  return static_cast<int64_t>(value);
}

Result<bool> envBool(const char* name) {
  TERSE_ASSIGN_OR_RETURN(std::string text, envString(name));
  const char* t = text.c_str();
  if (!strcasecmp(t, "1") || !strcasecmp(t, "true") || !strcasecmp(t, "yes") ||
      !strcasecmp(t, "on"))
    return true;
  if (!strcasecmp(t, "0") || !strcasecmp(t, "false") || !strcasecmp(t, "no") ||
      !strcasecmp(t, "off") || text.empty())
    return false;
  return errorInvalidArgument(
      "%s='%s' is not a boolean (accepted: 1/0, true/false, yes/no, on/off)", name, t);
}

}  // namespace terse
