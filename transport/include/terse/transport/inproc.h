// The in-process backend: ranks are threads of one process that share an InProcFabric. It exists
// for fast, deterministic unit tests of everything above the transport.
//
// It follows transport.h's contract with one deliberate strictness: a send completes only once
// the matching receive is posted and the bytes are copied (as UCX's rendezvous protocol does for
// large messages), so code that silently relies on eager buffering deadlocks here in a test
// instead of on a cluster.
//
// A rank "dies" when its transport is aborted or destroyed: every pending and later operation of
// the other ranks that involves it fails with kRemoteError naming it.
#pragma once

#include "terse/transport/settings.h"
#include "terse/transport/transport.h"

#include <memory>

namespace terse {

class InProcFabric;

// A fabric for `size` ranks (1 <= size <= 2^24). Each rank attaches exactly once.
Result<std::shared_ptr<InProcFabric>> makeInProcFabric(int size);

// The transport of `rank` on `fabric`, wrapped in the fault decorator where `settings.faults`
// name its rank. Thread-safety as transport.h: one thread drives it.
Result<std::unique_ptr<Transport>> createInProcTransport(
    std::shared_ptr<InProcFabric> fabric, int rank,
    const TransportSettings& settings = TransportSettings());

}  // namespace terse
