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
