// Runtime selection by name (`airlock serve|run --runtime NAME`,
// ManagerConfig::runtime): the one place that knows which backends exist.
// The core and the CLI open a Runtime here and never include a backend's
// headers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/doctor_check.h"
#include "common/status.h"
#include "runtime/options.h"
#include "runtime/runtime.h"

namespace airlock {

inline constexpr char kDefaultRuntime[] = "qemu";

// The names OpenRuntime accepts, default first ("qemu" today).
std::vector<std::string> AvailableRuntimes();

// "qemu, ..." (for help texts and errors).
std::string AvailableRuntimesText();

// OK when `name` is one of AvailableRuntimes(); else InvalidArgument
// "unknown runtime 'x' (available: qemu)". Checks the name only.
Status CheckRuntimeName(std::string_view name);

// Opens runtime `name`: CheckRuntimeName's error for an unknown name, else
// the backend's own (FailedPrecondition naming the fix when its VMM is not
// installed or its jail cannot run here; never a silent fallback).
StatusOr<std::unique_ptr<Runtime>> OpenRuntime(std::string_view name, const RuntimeOptions& options);

// Which runtime wrote the snapshot directory `dir` (each backend's commit
// record has its own name): one of AvailableRuntimes(); kDefaultRuntime when
// none is recognised (the caller's store then reports it).
std::string RuntimeOfSnapshot(const std::string& dir);

// What `airlock doctor` checks for runtime `name` (installed, accelerator,
// jail), in order; `state_dir` empty: nothing cached. One failed check
// naming the problem for an unknown name.
std::vector<DoctorCheck> RuntimeDoctorChecks(std::string_view name, const std::string& state_dir);

}  // namespace airlock
