#include "core/sandbox_state.h"

#include <string>

namespace airlock {

std::string_view SandboxStateName(SandboxState s) {
  switch (s) {
    case SandboxState::kCreating: return "creating";
    case SandboxState::kRunning: return "running";
    case SandboxState::kPausing: return "pausing";
    case SandboxState::kPaused: return "paused";
    case SandboxState::kResuming: return "resuming";
    case SandboxState::kKilling: return "killing";
    case SandboxState::kKilled: return "killed";
    case SandboxState::kFailed: return "failed";
    case SandboxState::kRollingBack: return "rolling back";
  }
  return "unknown";
}

std::string_view SandboxOutcomeName(SandboxOutcome o) {
  switch (o) {
    case SandboxOutcome::kKilled:
      return "killed";
    case SandboxOutcome::kTtlExpired:
      return "ttl_expired";
    case SandboxOutcome::kLifetimeCap:
      return "lifetime_cap";
    case SandboxOutcome::kVmmExited:
      return "vmm_exited";
    case SandboxOutcome::kCreateFailed:
      return "create_failed";
    case SandboxOutcome::kAutoPauseFailed:
      return "auto_pause_failed";
    case SandboxOutcome::kDaemonStopped:
      return "daemon_stopped";
    case SandboxOutcome::kRollbackFailed:
      return "rollback_failed";
  }
  return "unknown";
}

std::string SandboxEnd::Describe() const {
  std::string what;
  switch (outcome) {
    case SandboxOutcome::kKilled:
      what = "killed";
      break;
    case SandboxOutcome::kTtlExpired:
      what = "TTL expired";
      break;
    case SandboxOutcome::kLifetimeCap:
      what = "lifetime cap reached";
      break;
    case SandboxOutcome::kVmmExited:
      what = "vmm exited";
      break;
    case SandboxOutcome::kCreateFailed:
      what = "create failed";
      break;
    case SandboxOutcome::kAutoPauseFailed:
      what = "TTL expired (autoPause failed)";
      break;
    case SandboxOutcome::kDaemonStopped:
      what = "daemon stopped";
      break;
    case SandboxOutcome::kRollbackFailed:
      what = "rollback failed";
      break;
  }
  if (detail.empty()) return what;
  return outcome == SandboxOutcome::kVmmExited ? what + " (" + detail + ")" : what + ": " + detail;
}

Status CheckTransition(SandboxState from, SandboxState to) {
  using S = SandboxState;
  bool ok = false;
  switch (from) {
    case S::kCreating: ok = to == S::kRunning || to == S::kFailed || to == S::kKilling; break;
    case S::kRunning: ok = to == S::kKilling || to == S::kPausing || to == S::kRollingBack; break;
    case S::kPausing: ok = to == S::kPaused || to == S::kRunning || to == S::kKilling; break;
    case S::kPaused: ok = to == S::kResuming || to == S::kKilling; break;
    case S::kResuming: ok = to == S::kRunning || to == S::kPaused || to == S::kKilling; break;
    case S::kFailed: ok = to == S::kKilling; break;
    case S::kRollingBack: ok = to == S::kRunning || to == S::kFailed || to == S::kKilling; break;
    case S::kKilling: ok = to == S::kKilled; break;
    case S::kKilled: ok = false; break;
  }
  if (ok) return OkStatus();
  return FailedPrecondition("sandbox cannot go from " + std::string(SandboxStateName(from)) + " to " +
                            std::string(SandboxStateName(to)));
}

}  // namespace airlock
