// Host checks for `airlock doctor` about the gVisor runtime: runsc and its
// version, fuse2fs (template trees), the platform runsc runs guests on
// (platform_probe.h), cgroups for the Sentry's limits. Nothing is left behind.
#pragma once

#include <string>
#include <vector>

#include "common/doctor_check.h"

namespace airlock::gvisor {

// `state_dir` empty: probe the platform without touching the cache.
std::vector<DoctorCheck> GvisorDoctorChecks(const std::string& state_dir = "");

}  // namespace airlock::gvisor
