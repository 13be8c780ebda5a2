// Which runsc platform runs guests fastest here (docs/runtime-gvisor.md
// "Platform"): KVM when /dev/kvm really runs a runsc guest quickly, else
// ptrace, which works wherever runsc does. A probe, never an assumption: on
// a host whose /dev/kvm only emulates, runsc --platform=kvm hangs.
#pragma once

#include <chrono>
#include <string>

namespace airlock::gvisor {

struct PlatformDecision {
  std::string platform;  // "ptrace" | "kvm"
  std::string reason;    // e.g. "kvm: /bin/true did not finish in 5 s; ptrace: 0.41 s"
};

// Runs `runsc --platform=P do /bin/true` (no network, the host's root read
// only) for kvm (when /dev/kvm opens) and ptrace, each bounded by `limit`;
// picks kvm only when it answered and was faster. scratch: a directory for
// runsc's state.
PlatformDecision ProbePlatform(const std::string& runsc, const std::string& scratch,
                               std::chrono::milliseconds limit = std::chrono::seconds(5));

// ProbePlatform, cached in <state_dir>/gvisor-platform for this boot.
PlatformDecision ProbePlatformCached(const std::string& runsc, const std::string& state_dir);

}  // namespace airlock::gvisor
