// The sandbox state machine, in one place. Runtimes and the network layer
// only do what a transition asks of them.
//
//   creating ──▶ running ──▶ killing ──▶ killed
//      │                       ▲
//      └──▶ failed ────────────┘ (cleanup of a half-made sandbox)
//
// pausing/paused/resuming are reserved for the snapshot work.
#pragma once

#include <string_view>

#include "common/status.h"

namespace airlock {

enum class SandboxState { kCreating, kRunning, kPausing, kPaused, kResuming, kKilling, kKilled, kFailed };

std::string_view SandboxStateName(SandboxState s);

// OK when `from → to` is a legal transition, else FailedPrecondition naming both.
Status CheckTransition(SandboxState from, SandboxState to);

}  // namespace airlock
