// What a rank reads from values other ranks published in the rendezvous store
// (storeAllGather): each rank's "<header>\n<payload>" and a failed rank's "<code>\n<text>".
// Anyone who reaches the store can write these, so they are parsed as untrusted bytes. Pure
// functions, so fuzz/fuzz_peer.cc and the unit tests drive exactly what bootstrap.cc runs.
#pragma once

#include "terse/common/status.h"

#include <cstddef>
#include <string>

namespace terse::rendezvous_detail {

// How much of another rank's text an error message quotes.
constexpr size_t kMaxQuotedBytes = 4096;

// The value a failing rank publishes under <prefix>/failed.
std::string encodePublishedFailure(int rank, const Status& why);

// The failure another rank published. A well-formed value keeps its code (one of the error
// codes: never kOk or kInProgress, whatever number was written) and its text; anything else is
// a kRemoteError quoting the value. The text is quoted with printableBytes (bounded, escaped).
Status parsePublishedFailure(const std::string& value);

// Splits rank `peer`'s published value: ok with the payload when it starts with `header` (which
// ends in '\n'); otherwise kInvalidUsage naming both ranks and quoting (bounded, escaped) what
// the peer announced.
Status splitPublishedValue(int peer, int self, const std::string& value, const std::string& header,
                           std::string* payload);

}  // namespace terse::rendezvous_detail
