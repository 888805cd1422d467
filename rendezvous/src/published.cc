#include "published.h"

namespace terse::rendezvous_detail {

std::string encodePublishedFailure(int rank, const Status& why) {
  return std::to_string(static_cast<int>(why.code())) + "\nrank " + std::to_string(rank) + ": " +
         why.message();
}

Status parsePublishedFailure(const std::string& value) {
  const size_t nl = value.find('\n');
  // One or two digits, no sign or leading zero: std::to_string of an error code.
  int code = -1;
  if (nl != std::string::npos && nl >= 1 && nl <= 2 && value[0] != '0') {
    code = 0;
    for (size_t i = 0; i < nl && code >= 0; ++i)
      code = value[i] >= '0' && value[i] <= '9' ? code * 10 + (value[i] - '0') : -1;
  }
  // Only codes that mean an error: a peer's kOk would read as success, kInProgress as "call
  // again", and a number outside the enum as no code at all.
  const bool known = code >= static_cast<int>(StatusCode::kInvalidArgument) &&
                     code <= static_cast<int>(StatusCode::kInternal);
  if (!known)
    return errorRemote("%s", printableBytes(value.data(), value.size(), kMaxQuotedBytes).c_str());
  return Status(static_cast<StatusCode>(code),
                printableBytes(value.data() + nl + 1, value.size() - nl - 1, kMaxQuotedBytes));
}

Status splitPublishedValue(int peer, int self, const std::string& value, const std::string& header,
                           std::string* payload) {
  if (value.compare(0, header.size(), header) == 0) {
    payload->assign(value, header.size(), std::string::npos);
    return Status::ok();
  }
  // What the peer announced: its first line, as far as it goes.
  const size_t nl = value.find('\n');
  const size_t shown = nl == std::string::npos ? value.size() : nl;
  return errorInvalidUsage(
      "rank %d announced '%s' but rank %d runs '%s': all ranks must run the same terse "
      "version with the same world size (check TERSE_WORLD_SIZE and the launcher's -n)",
      peer, printableBytes(value.data(), shown, kMaxQuotedBytes).c_str(), self,
      header.substr(0, header.size() - 1).c_str());
}

}  // namespace terse::rendezvous_detail
