// The gVisor backend of the core Runtime interface (runtime/runtime.h), over
// Debian's runsc (docs/runtime-gvisor.md). A sandbox is one runsc container:
// the template's root tree read-only under an in-memory overlay, the agent
// as its init serving the same envd API on the same port, its netstack on
// eth0 of the guest netns (GuestLink::kVethNetns), so the sandbox network,
// egress and audit are a microVM's. Snapshots are runsc checkpoints of a
// paused sandbox (snapshot.h; docs/runtime-gvisor.md "Snapshots").
// Opened through runtime/registry.h (OpenRuntime("gvisor")).
#pragma once

#include <memory>
#include <string>

#include "runtime/options.h"
#include "runtime/runtime.h"

namespace airlock::gvisor {

inline constexpr char kRuntimeName[] = "gvisor";

// Checks that runsc and fuse2fs are installed and picks the platform
// (platform_probe.h, cached under state_dir); FailedPrecondition naming the
// fix otherwise.
StatusOr<std::unique_ptr<Runtime>> NewGvisorRuntime(const RuntimeOptions& options);

}  // namespace airlock::gvisor
