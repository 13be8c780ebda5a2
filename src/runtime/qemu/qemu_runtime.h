// The QEMU backend of the core Runtime interface (runtime/runtime.h): turns a
// VmStartRequest into a QemuVm; its SnapshotStore is snapshot.h's format.
// Opened through runtime/registry.h (OpenRuntime("qemu", ...)); nothing
// outside src/runtime/ includes this.
#pragma once

#include <memory>
#include <string>

#include "runtime/options.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/uid_pool.h"
#include "runtime/runtime.h"

namespace airlock::qemu {

// The VMM jail's options are the runtime-neutral ones (runtime/options.h).
using ::airlock::VmmJailOptions;

// Probes the accelerator once (cached under state_dir), checks that QEMU is
// installed and, with the jail on, that a jailed QEMU runs here (ProbeJail);
// FailedPrecondition naming the fix otherwise: never a silent fallback to root.
StatusOr<std::unique_ptr<Runtime>> NewQemuRuntime(const std::string& state_dir, const VmmJailOptions& jail = {});

// Runs QEMU --version jailed as a uid leased from `jail`'s range (scratch
// dir under <state_dir>/run): OK, or the jail step that failed.
Status CheckVmmJail(const std::string& state_dir, const VmmJailOptions& jail = {});

}  // namespace airlock::qemu
