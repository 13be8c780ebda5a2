// The QEMU backend of the core Runtime interface (runtime/runtime.h): turns a
// VmStartRequest into a QemuVm.
#pragma once

#include <memory>
#include <string>

#include "runtime/runtime.h"
#include "runtime/qemu/accel_probe.h"

namespace airlock::qemu {

// Probes the accelerator once (cached under state_dir) and checks that QEMU
// is installed; FailedPrecondition naming the fix otherwise.
StatusOr<std::unique_ptr<Runtime>> NewQemuRuntime(const std::string& state_dir);

}  // namespace airlock::qemu
