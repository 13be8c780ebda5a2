// VmCgroup: a cgroup for one VMM, created before it starts and removed after
// it exits. cgroup v2 (unified at /sys/fs/cgroup) → /sys/fs/cgroup/airlock/<id>
// with memory.max + pids.max + cpu.max "<cpus × 100000> 100000"; v1 (hybrid)
// → /sys/fs/cgroup/{memory,pids,cpu}/airlock/<id> with memory.limit_in_bytes
// + pids.max + cpu.cfs_quota_us = cpus × cpu.cfs_period_us (100000 µs), so
// a VMM never uses more than `cpus` host cores' worth of time; the parent
// (airlock) weighs kGuestGroupCpuShares (runtime/guest_cpu.h). Best effort: when the
// hierarchy is missing or not writable, Create() returns an error the caller
// logs and the VMM runs without one (docs/runtime-qemu.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/guest_cpu.h"

namespace airlock::qemu {

enum class CgroupVersion { kNone, kV1, kV2 };

struct CgroupLimits {
  uint64_t memory_bytes = 0;
  int pids_max = 256;
  int cpus = 0;  // CPU bandwidth in whole cores; 0: no cpu limit
};
inline constexpr int kCpuPeriodUs = 100000;
CgroupVersion DetectCgroupVersion(const std::string& root = "/sys/fs/cgroup");

class VmCgroup {
 public:
  VmCgroup() = default;
  static StatusOr<VmCgroup> Create(const std::string& sandbox_id, const CgroupLimits& limits,
                                   const std::string& root = "/sys/fs/cgroup");
  // The leaves an earlier process made for `sandbox_id` (those that exist),
  // so that a VMM taken over after a daemon restart (QemuVm::Reattach) has
  // its cgroup removed with it. Empty when there are none or the id is not
  // a plain name.
  static VmCgroup Existing(const std::string& sandbox_id, const std::string& root = "/sys/fs/cgroup");
  VmCgroup(VmCgroup&&) = default;
  VmCgroup& operator=(VmCgroup&&) = default;

  // cgroup.procs files a child must write its pid into before exec.
  const std::vector<std::string>& procs_files() const { return procs_; }
  const std::vector<std::string>& dirs() const { return dirs_; }
  CgroupVersion version() const { return version_; }
  // rmdir the leaves (the processes must have exited); idempotent.
  Status Remove();

 private:
  CgroupVersion version_ = CgroupVersion::kNone;
  std::vector<std::string> dirs_;
  std::vector<std::string> procs_;
};

}  // namespace airlock::qemu
