#include "ucx_text.h"

#include "terse/common/env.h"
#include "terse/transport/ucx_core.h"

#include <initializer_list>

#include <vector>

namespace terse {
namespace {

// True when a UCX_TLS list names only transports in `allowed`; never for an exclusion list
// ("^...") or an empty value (which allows everything).
bool tlsListOnly(const std::string& list, std::initializer_list<const char*> allowed) {
  if (list.empty() || list[0] == '^') return false;
  for (const std::string& t : splitCommas(list)) {
    bool known = t.empty();
    for (const char* a : allowed) known = known || t == a;
    if (!known) return false;
  }
  return true;
}

}  // namespace

// Declared in terse/transport/ucx_core.h (the net plugin uses them too); pure text like the rest.
bool ucxTlsOnlySharedMemory(const std::string& tls) {
  return tlsListOnly(tls, {"sm", "shm", "mm", "posix", "sysv", "cma", "knem", "xpmem", "self"});
}

bool ucxTlsOnlyTcp(const std::string& tls) {
  return tls.find("tcp") != std::string::npos && tlsListOnly(tls, {"tcp", "self"});
}

bool ucxTlsAllowsSharedMemory(const std::string& tls) {
  if (tls.empty() || tls[0] == '^') return true;
  for (const std::string& t : splitCommas(tls))
    for (const char* shm : {"all", "sm", "shm", "mm", "posix", "sysv", "cma", "knem", "xpmem"})
      if (t == shm) return true;
  return false;
}

bool ucxUsesSharedMemory(const std::string& transports) {
  for (const std::string& t : splitCommas(transports))
    for (const char* shm : {"posix", "sysv", "cma", "knem", "xpmem"})
      if (t == shm) return true;
  return false;
}

std::string ucxLaneTransports(const std::string& printInfo) {
  std::vector<std::string> names;
  size_t lineStart = 0;
  while (lineStart < printInfo.size()) {
    size_t lineEnd = printInfo.find('\n', lineStart);
    if (lineEnd == std::string::npos) lineEnd = printInfo.size();
    const std::string line = printInfo.substr(lineStart, lineEnd - lineStart);
    lineStart = lineEnd + 1;
    // "lane[N]:", spaces, the resource index, ':', then "<transport>/<device>".
    size_t at = line.find("lane[");
    if (at == std::string::npos || (at = line.find("]:", at)) == std::string::npos) continue;
    at = line.find_first_not_of(' ', at + 2);
    if (at == std::string::npos) continue;
    at = line.find_first_not_of("0123456789", at);
    if (at == std::string::npos || line[at] != ':') continue;
    const size_t slash = line.find('/', at + 1);
    if (slash == std::string::npos) continue;
    const std::string tl = line.substr(at + 1, slash - at - 1);
    bool seen = tl.empty();
    for (const auto& n : names) seen = seen || n == tl;
    if (!seen) names.push_back(tl);
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out.empty() ? "?" : out;
}

}  // namespace terse
