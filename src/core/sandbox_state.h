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
//
// Apart from the state, a sandbox has an outcome: why it ended, set once
// when its end is decided (before teardown) and never changed after. The
// state says where the machine is; the outcome says what happened to it
// (google/sandboxed-api keeps the same split: sandbox2::Result apart from
// API errors).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock {

enum class SandboxState { kCreating, kRunning, kPausing, kPaused, kResuming, kKilling, kKilled, kFailed, kRollingBack };

std::string_view SandboxStateName(SandboxState s);

// Why a sandbox ended.
enum class SandboxOutcome {
  kKilled,           // killed through the API (or destroyed by its in-process owner)
  kTtlExpired,       // its timeout passed
  kLifetimeCap,      // it reached serve --max-lifetime, whatever its timeout
  kVmmExited,        // its VMM died under it (guest panic, QEMU crash, OOM kill)
  kCreateFailed,     // its bring-up failed (nothing was handed out)
  kAutoPauseFailed,  // its timeout passed with autoPause on, and the pause failed
  kDaemonStopped,    // destroyed by a daemon stopping with --kill-on-exit
  kRollbackFailed,   // a rollback stopped its VMM and the checkpoint did not come up
};

// "killed", "ttl_expired", "lifetime_cap", "vmm_exited", "create_failed",
// "auto_pause_failed", "daemon_stopped", "rollback_failed": the names the
// API and audit use.
std::string_view SandboxOutcomeName(SandboxOutcome o);

// The end of a sandbox: its outcome, what is known about it (the console's
// last line of a dead VMM, the error of a failed create or pause; may be
// empty) and when it was decided (Unix ms).
struct SandboxEnd {
  SandboxOutcome outcome = SandboxOutcome::kKilled;
  std::string detail;
  int64_t at_ms = 0;
  // "TTL expired", "vmm exited (console: ...)", ...: one line for logs and errors.
  std::string Describe() const;
};

// OK when `from → to` is a legal transition, else FailedPrecondition naming both.
Status CheckTransition(SandboxState from, SandboxState to);

}  // namespace airlock
