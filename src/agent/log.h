// The agent's logging: common/guest_log.h with the prefix "airlock-agent"
// (its stderr is the serial console when it runs as PID 1).
#pragma once

#include "common/guest_log.h"

namespace airlock::agent {

inline void SetLogVerbose(bool verbose) { guest_log::Configure("airlock-agent", verbose); }
using guest_log::LogDebug;
using guest_log::LogError;
using guest_log::LogInfo;

}  // namespace airlock::agent
