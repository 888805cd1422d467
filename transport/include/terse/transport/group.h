// Some ranks of a transport seen as a world of their own: the building block of
// sub-communicators (Communicator::split) and, later, of the two-level collectives, which run the
// existing algorithms unchanged over a node's ranks and over one rank per node.
//
// A group's rank r is members[r] of the parent. Its messages travel on the parent's connections
// in a tag space of its own: a group tag t < 2^kGroupTagBits goes out as (space << kGroupTagBits)
// | t, so calls on different groups (and on the whole world, space 0) never match each other.
// Tags from kFailureNoticeTag's reserved range pass through unchanged (failure notices are
// best-effort text for whichever group reads them).
//
// Requests, progress and failures are the parent's: a dead member fails the calls of every
// group that contains it, and aborting a group aborts the parent (the connections are shared;
// a group that gave up cannot leave the others in step). The parent must outlive its groups.
// A group is driven by the parent's thread, or by a thread of its own when the parent is a
// SharedTransport (transport/shared.h), as split communicators are.
#pragma once

#include "terse/common/status.h"
#include "terse/transport/transport.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

// Group tags use the low 34 bits (the collectives' tag layout fits: call sequence 14 | phase 2 |
// index 18); the space takes bits 34-39.
constexpr int kGroupTagBits = 34;
constexpr uint64_t kMaxGroupTag = (uint64_t{1} << kGroupTagBits) - 1;
// Space 0 is the whole world's; spaces 1..kMaxGroupSpace are for groups (split communicators,
// one each). A group in a space that others use too (space 0, or a split's space for its
// two-level groups) must keep its tags apart from theirs itself, as the collectives' step tags
// do (collectives/src/requests.h). (Space 63 would reach the reserved range at the top of the
// 40-bit tag space.)
constexpr uint32_t kMaxGroupSpace = 62;

// `members` are distinct parent ranks, this rank among them, in the group's rank order. When
// `parent` is itself a group, the new group is made directly on that group's parent (members
// mapped to its ranks), so `space` is a space of the underlying transport like every other.
// `kind` names the group in errors ("rank 5 (rank 2 of this split)").
Result<std::unique_ptr<Transport>> createGroupTransport(Transport& parent, std::vector<int> members,
                                                        uint32_t space,
                                                        const std::string& kind = "group");

// When `t` is a group: the transport underneath (never itself a group), with the group's
// members as its ranks in *members and the group's `kind` in *kind. Null when `t` is not a group.
Transport* groupWorld(Transport& t, std::vector<int>* members = nullptr,
                      std::string* kind = nullptr);

// How errors name rank `rank` of `t`: "rank 3" in a world; in a group, its rank in the world
// underneath and then its rank in the group, "rank 5 (rank 2 of this split)", since the ranks a
// caller knows (and the transports' own errors) are those of the world.
std::string rankName(Transport& t, int rank);

}  // namespace terse
