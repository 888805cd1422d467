// Traffic patterns shared by the thread tests and the forked-process tests. They check with
// gtest EXPECTs; in a forked child the parent learns of failures from the exit status.
#pragma once

#include "terse/transport/transport.h"

#include <cstddef>
#include <vector>

namespace terse::testing {

// Each rank sends to both neighbours and receives from both at once, one message per size, and
// checks every byte against the (source, destination, sequence) pattern.
void ringBothDirections(Transport& t, const std::vector<size_t>& sizes);

// perPair messages on each of `tags` tags to every rank (itself included), receives for tag 0
// posted before the sends and the rest after; checks per-(peer, tag) order and content.
void manyInFlight(Transport& t, int perPair, int tags);

// The sizes the ring checks: 0 B to 64 MiB (to 4 MiB above four ranks, where eight copies of
// each buffer on two cores would take minutes).
std::vector<size_t> ringSizes(int worldSize);

}  // namespace terse::testing
