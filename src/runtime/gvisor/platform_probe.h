// Which runsc platform runs guests fastest here (docs/runtime-gvisor.md
// "Platform"): systrap (seccomp traps; runsc 2023+), ptrace or kvm, measured.
// A probe, never an assumption: on a host whose /dev/kvm only emulates,
// runsc --platform=kvm hangs, and ptrace's traps cost ~100x systrap's.
#pragma once

#include <chrono>
#include <string>

namespace airlock::gvisor {

struct PlatformDecision {
  std::string platform;  // "systrap" | "ptrace" | "kvm"
  std::string reason;    // e.g. "systrap: 0.25 s; ptrace: 2.40 s; kvm: did not finish in 5 s"
};

// Runs `runsc --platform=P do dd ... bs=1 count=20000` (40,000 system calls;
// no network, the host's root read only) on systrap, ptrace (each bounded by
// 4 x `limit`) and kvm (when /dev/kvm opens; bounded by `limit`) and picks
// the fastest that finished. scratch: a directory for runsc's state.
PlatformDecision ProbePlatform(const std::string& runsc, const std::string& scratch,
                               std::chrono::milliseconds limit = std::chrono::seconds(5));

// ProbePlatform, cached in <state_dir>/gvisor-platform for this boot of the
// host and this runsc binary.
PlatformDecision ProbePlatformCached(const std::string& runsc, const std::string& state_dir);

}  // namespace airlock::gvisor
