// A communicator's settings: read from the environment once, when the communicator is made, and
// handed down as values to what it builds (the engine, the transport, the rendezvous). Splits
// inherit their parent's, so a communicator and its children run with what their ranks read
// and compared at the world's creation, whatever the environment says later. This file and the
// other entry points (the NCCL plugin, the tools) are the only readers of terse's settings;
// the layers below declare theirs and take the values (terse/common/env.h).
#pragma once

#include "terse/collectives/engine.h"
#include "terse/common/env.h"
#include "terse/rendezvous/bootstrap.h"
#include "terse/transport/settings.h"

#include <chrono>
#include <string>

namespace terse {

struct CommSettings {
  // The kEveryRank settings, as compared across the ranks (Communicator::createUcx).
  AgreedSettings agreed = AgreedSettings::defaults();
  // The engine's tunables: agreed's, with this rank's TERSE_PIPELINE_DEPTH.
  EngineSettings engine = EngineSettings::defaults();
  // TERSE_FAULT's rules and TERSE_UCX_TCP_EAGER, for the transport factories.
  TransportSettings transport;
  // TERSE_NODE ("" when unset: the host's name and boot id), for the topology exchange.
  std::string node;
};

// Every setting a communicator over processes uses, each parsed as its declaration says: a
// malformed value is a kInvalidArgument naming it (the messages of checkEnvironment(), which
// such communicators run first).
Result<CommSettings> readCommSettings();

// The settings of a world whose ranks are threads of this process (unit tests): one environment,
// so nothing to compare. A malformed engine setting keeps its default, as in an engine built
// alone (checkEnvironment() refuses it where communicators are made for users). The transport's
// are left empty: readFaultRules() gives TERSE_FAULT's where the world makes its transports.
CommSettings readInProcessSettings();

// TERSE_FAULT's rules; a malformed TERSE_FAULT is an error, so a typo never silently runs a
// fault-free test.
Result<std::vector<FaultRule>> readFaultRules();

// The launchers' and terse's variables a process learns its rank and store from
// (rendezvous/bootstrap.h): the value of each that is set.
BootstrapVariables readBootstrapVariables();

}  // namespace terse
