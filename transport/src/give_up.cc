#include "terse/transport/give_up.h"

#include "terse/transport/group.h"

#include "peer_input.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <vector>

namespace terse {
namespace {

// Appends the first notice that a peer sent this rank (see give_up.h). `t` is the whole world;
// when the call that failed ran on a group, `members` are its ranks there (group rank -> world
// rank), and a sender that is one of them is also named by its rank in the group.
Status withPeersNotice(Transport& t, Status why, const std::vector<int>& members,
                       const std::string& groupKind) {
  const int n = t.size(), me = t.rank();
  std::vector<std::array<char, kFailureNoticeBytes>> text(n);
  std::vector<TransportRequest*> reqs(n, nullptr);
  for (int p = 0; p < n; ++p)
    if (p != me &&
        !t.irecv(p, kFailureNoticeTag, text[p].data(), kFailureNoticeBytes, &reqs[p]).isOk())
      reqs[p] = nullptr;
  // A peer's notice travels just ahead of its disconnection, so it has normally arrived by the
  // time that disconnection failed this rank's call; a few milliseconds cover the rest.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
  int from = -1;
  size_t length = 0;
  for (bool pending = true; pending && from < 0;) {
    pending = false;
    for (int p = 0; p < n; ++p) {
      if (reqs[p] == nullptr) continue;
      bool done = false;
      size_t bytes = 0;
      if (!t.test(reqs[p], &done, &bytes).isOk()) {
        reqs[p] = nullptr;  // released by test
        continue;
      }
      if (!done) {
        pending = true;
        continue;
      }
      reqs[p] = nullptr;
      if (from < 0 && bytes > 0) from = p, length = bytes;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
  }
  for (TransportRequest* r : reqs)
    if (r != nullptr) t.cancel(r);
  if (from < 0) return why;
  // The peer's bytes, whatever they are: escaped so NULs or control bytes never reach a log.
  const std::string notice = formatFailureNotice(
      reinterpret_cast<const uint8_t*>(text[from].data()), length, kFailureNoticeBytes);
  std::string sender = "rank " + std::to_string(from);
  auto at = std::find(members.begin(), members.end(), from);
  if (at != members.end())
    sender += " (rank " + std::to_string(at - members.begin()) + " of this " + groupKind + ")";
  return Status(why.code(), why.message() + "; " + sender + " had given up first: " + notice);
}

void sendNotices(Transport& t, const Status& why) {
  const int n = t.size(), me = t.rank();
  const std::string text = why.message().substr(0, kFailureNoticeBytes);
  std::vector<TransportRequest*> reqs;
  for (int p = 0; p < n; ++p) {
    TransportRequest* r = nullptr;
    if (p != me && t.isend(p, kFailureNoticeTag, text.data(), text.size(), &r).isOk())
      reqs.push_back(r);
  }
  // Let them leave before the abort closes the connections.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (!reqs.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < reqs.size();) {
      bool done = false;
      if (!t.test(reqs[i], &done, nullptr).isOk() || done) {
        reqs[i] = reqs.back();  // released by test
        reqs.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (TransportRequest* r : reqs) t.cancel(r);
}

}  // namespace

Status giveUpOnWorld(Transport& transport, Status why) {
  // A group's abort ends the connections of the whole world under it (group.h), so every rank
  // of that world hears why, not only the group's members, and the notices name world ranks
  // (issue #35: ranks of a sibling split learned only "rank 1 aborted or closed its transport",
  // and members were told of "rank 1" in the group's numbering).
  std::vector<int> members;
  std::string kind;
  Transport* world = groupWorld(transport, &members, &kind);
  Transport& everyone = world ? *world : transport;
  if (everyone.size() > 1) {
    why = withPeersNotice(everyone, std::move(why), members, kind);
    sendNotices(everyone, why);
  }
  transport.abort(why);
  // A transport acts on an abort on its driving thread, which is this one; this rank may make
  // no further call for a long time (or ever), so act now.
  transport.progress();
  return why;
}

}  // namespace terse
