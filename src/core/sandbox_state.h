// The sandbox state machine, in one place. Runtimes and the network layer
// only do what a transition asks of them.
//
// The legal transitions (CheckTransition):
//   creating ─▶ running | failed | killing
//   running  ─▶ pausing | rolling back | killing
//   pausing  ─▶ paused | running (the pause failed) | killing
//   paused   ─▶ resuming | killing
//   resuming ─▶ running | paused (the resume failed) | killing
//   rolling back ─▶ running | failed (its VMM was gone when the restore failed) | killing
//   failed   ─▶ killing (cleanup of a half-made sandbox)
//   killing  ─▶ killed, which is final.
// Pause and resume: core/snapshots.cc, docs/snapshots.md.
#pragma once

#include <string_view>

#include "common/status.h"

namespace airlock {

enum class SandboxState { kCreating, kRunning, kPausing, kPaused, kResuming, kKilling, kKilled, kFailed, kRollingBack };

std::string_view SandboxStateName(SandboxState s);

// OK when `from → to` is a legal transition, else FailedPrecondition naming both.
Status CheckTransition(SandboxState from, SandboxState to);

}  // namespace airlock
