// The interpreter server's logging: common/guest_log.h with the prefix
// "airlock-interpreter" (its stderr is kept by the agent's service supervisor).
#pragma once

#include "common/guest_log.h"

namespace airlock::interpreter {

inline void SetLogVerbose(bool verbose) { guest_log::Configure("airlock-interpreter", verbose); }
using guest_log::LogDebug;
using guest_log::LogError;
using guest_log::LogInfo;

}  // namespace airlock::interpreter
