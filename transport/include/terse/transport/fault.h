// Fault injection: a Transport decorator that delays a send, drops connections or SIGKILLs the
// process at a chosen point, so tests and soak runs can check that every layer above turns a
// broken world into errors (never a hang, a crash or a wrong result reported as success).
//
// Off by default and free when off: the backends' factories (createUcxTransport,
// createInProcTransport) wrap their transport only when the rules they are given
// (TransportSettings::faults, transport/settings.h: TERSE_FAULT as the communicator read it)
// name its rank; otherwise callers get the backend itself and no operation pays anything. A
// malformed TERSE_FAULT fails the communicator's creation, so a typo never silently runs a
// fault-free test.
//
// TERSE_FAULT holds rules separated by ';', each an action followed by ':key=value' fields:
//
//   kill:rank=2:after_sends=17               SIGKILL this process at rank 2's 18th send
//   drop:rank=1:peer=0:phase=gather          close rank 1's connection to rank 0 at its first
//                                            send to rank 0 with a gather-phase tag
//   drop:rank=3:after_recvs=4                close all of rank 3's connections (the rank aborts)
//   delay:ms=50:count=0                      sleep 50 ms before every send of every rank
//
// Actions:
//   kill   raise SIGKILL in this process (meant for ranks as processes; with ranks as threads
//          it ends them all).
//   drop   peer=P: Transport::disconnect(P): this rank's operations with P fail at once; P
//          learns at once over the in-process fabric and by its timeout over UCX (a link that
//          fails silently). Without peer: the rank's transport is aborted, which drops every
//          connection and which every peer sees at once (UCX over TCP, in-process fabric).
//   delay  sleep `ms` milliseconds before the hit send is posted (or before a hit receive is
//          reported complete); `count` operations in a row are hit (default 1, 0 = all later).
// Trigger (at most one; default after_sends=0):
//   after_sends=N  the (N+1)-th matching send is hit, before it is posted.
//   after_recvs=N  the (N+1)-th matching receive is hit when it completes: kill dies then, drop
//                  reports the drop instead of the completion, delay sleeps first.
// Filters (which operations match and are counted):
//   rank=R         only the transport of rank R (default: every rank).
//   peer=P         only operations with rank P.
//   phase=NAME     only tags of one phase of the collectives layer: descriptor, reduce, gather
//                  (collectives/src/requests.h) or barrier (the communicator's reserved tags).
//   tag=V/M        only tags with (tag & M) == V (numbers in decimal or 0x hex).
#pragma once

#include "terse/transport/transport.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace terse {

enum class FaultAction : uint8_t { kKill, kDrop, kDelay };

struct FaultRule {
  FaultAction action = FaultAction::kKill;
  int rank = -1;  // -1: every rank
  int peer = -1;  // -1: every peer (drop: every connection)
  bool onRecv = false;
  uint64_t after = 0;  // operations that pass unharmed before the first hit
  uint64_t tagMask = 0, tagValue = 0;
  int delayMs = 0;
  uint64_t count = 1;  // delay: operations hit in a row (0 = every later one)
  std::string text;    // the rule as written, for messages
};

// The tag classes behind phase=NAME. The collectives' tag layout (requests.h) and the
// communicator's reserved range static_assert against these, so a change there breaks the build
// instead of silently aiming faults at the wrong messages.
struct FaultPhaseTags {
  const char* name;
  uint64_t mask, value;
};
inline constexpr FaultPhaseTags kFaultPhases[] = {
    {"reduce", uint64_t{3} << 18, uint64_t{0} << 18},
    {"gather", uint64_t{3} << 18, uint64_t{1} << 18},
    {"descriptor", uint64_t{3} << 18, uint64_t{2} << 18},
    // Tags from (2^40 - 2^16) up: Communicator::kReservedTagBase.
    {"barrier", kMaxTransportTag & ~uint64_t{0xffff}, kMaxTransportTag & ~uint64_t{0xffff}},
};

// Parses TERSE_FAULT's syntax (above). Errors name the rule and the field.
Result<std::vector<FaultRule>> parseFaultRules(const std::string& text);

// Wraps `inner` in the fault decorator with the rules that apply to its rank; returns `inner`
// itself when none does.
std::unique_ptr<Transport> injectFaults(std::unique_ptr<Transport> inner,
                                        std::vector<FaultRule> rules);

}  // namespace terse
