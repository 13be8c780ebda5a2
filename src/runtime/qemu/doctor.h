// Host checks for `airlock doctor` about the QEMU runtime: qemu binary and
// version, qemu-img, -sandbox support, /dev/kvm and the accel decision,
// cgroup controllers (memory, pids, cpu), the VMM jail (a jailed QEMU
// --version). Nothing is left behind.
#pragma once

#include "common/doctor_check.h"

#include <string>
#include <vector>

namespace airlock::qemu {

// `state_dir` empty: probe accel without touching the cache.
std::vector<DoctorCheck> QemuDoctorChecks(const std::string& state_dir = "");

}  // namespace airlock::qemu
