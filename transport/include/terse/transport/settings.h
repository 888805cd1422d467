// The transports' settings, as values: the backends' factories take them and never read the
// environment. The communicator reads them once when it is made (api/src/settings.h) and
// passes them in; a transport made alone (unit tests) gets none of TERSE_FAULT's rules and
// TERSE_UCX_TCP_EAGER's default unless its caller says otherwise.
#pragma once

#include "terse/transport/fault.h"

#include <vector>

namespace terse {

class EnvSetting;  // terse/common/env.h

// The declarations (registered with the library; the entry points read them).
extern const EnvSetting kFaultSetting;        // TERSE_FAULT: fault injection rules (fault.h)
extern const EnvSetting kUcxTcpEagerSetting;  // TERSE_UCX_TCP_EAGER: 0 or 1 (transport/ucx.h)

struct TransportSettings {
  // TERSE_FAULT's rules (parseFaultRules); the factories keep those that name their rank.
  std::vector<FaultRule> faults;
  // TERSE_UCX_TCP_EAGER: with UCX_TLS naming only tcp and no UCX_RNDV_THRESH of the user's,
  // send every message eagerly (transport/src/ucx.cc says why).
  bool ucxTcpEager = true;
};

}  // namespace terse
