// Leaving a world after a failure that the peers cannot see for themselves.
//
// A rank whose collective (or barrier) fails part-way leaves the other ranks out of step: some
// wait for its messages, or for a neighbour that waits for them, and would learn only at their
// timeout. giveUpOnWorld() makes them learn now and learn why:
//  1. it looks (10 ms at most) for failure notices that peers which gave up earlier sent it,
//     and appends the first one to `why` ("rank P had given up first: ..."), so a rank that
//     learns of a failure second-hand still names the rank where it began (the notice is the
//     peer's bytes: bytes outside printable ASCII come out as \xNN, see peer_input.h);
//  2. it sends every peer a notice with its reason (at most kFailureNoticeBytes of the message,
//     50 ms at most for them to leave);
//  3. it aborts the transport and drives it once, which drops the connections: every peer's
//     pending and later operations with this rank fail at once.
// Notices are best effort: one that misses (a dead peer, a slow link) only leaves a peer's
// message shorter. Call it on the thread that drives the transport.
#pragma once

#include "terse/common/status.h"
#include "terse/transport/transport.h"

#include <cstddef>

namespace terse {

constexpr size_t kFailureNoticeBytes = 512;

// Returns `why`, with the first peer's notice appended if one arrived.
Status giveUpOnWorld(Transport& transport, Status why);

}  // namespace terse
