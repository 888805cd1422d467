#include "ucx_text.h"

#include <vector>

namespace terse {
namespace {

std::vector<std::string> splitCommas(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

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
