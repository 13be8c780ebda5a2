// The host CPU weight of all guests together. Every VMM's cgroup lives under
// one parent per runtime (qemu: airlock, runtime/qemu/cgroup.h; gVisor:
// airlock-gvisor, the bundle's cgroupsPath), and that parent gets
// kGuestGroupCpuShares (cgroup v1 cpu.shares; a host task at nice 0 weighs
// 1024) or kGuestGroupCpuWeight (v2 cpu.weight; nice 0 weighs 100): all of a
// runtime's guests together weigh a quarter of one host task. When the cores
// are full, the daemon (its event loop, nft, QMP, the helpers it runs) and
// the host's own work are scheduled first and the guests share the rest;
// guests among themselves are unchanged, and an idle host gives them all of
// it. Measured with `make bench-burst` (32 creates at once on 2 TCG cores):
// GET /sandboxes/{id} p99 61 -> 9 ms and the list's 80 -> 13 ms at the same
// burst wall time (docs/performance.md "Bursts and the control plane").
//
// SetGuestGroupCpuWeight is best effort (a host without the cpu controller,
// or one not delegated to us, keeps the default weight): it makes the parent
// if missing and writes its weight, idempotently, before each guest starts.
// On v2 the parent has cpu.weight only once the cpu controller is enabled
// for it: call it after that.
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <string>

namespace airlock {

inline constexpr int kGuestGroupCpuShares = 256;
inline constexpr int kGuestGroupCpuWeight = 25;

inline void SetGuestGroupCpuWeight(const std::string& parent_name, const std::string& root = "/sys/fs/cgroup") {
  struct stat st;
  if (::stat((root + "/cgroup.controllers").c_str(), &st) == 0) {  // v2
    ::mkdir((root + "/" + parent_name).c_str(), 0755);
    std::ofstream(root + "/" + parent_name + "/cpu.weight") << kGuestGroupCpuWeight;
  } else if (::stat((root + "/cpu/tasks").c_str(), &st) == 0) {  // v1
    ::mkdir((root + "/cpu/" + parent_name).c_str(), 0755);
    std::ofstream(root + "/cpu/" + parent_name + "/cpu.shares") << kGuestGroupCpuShares;
  }
}

}  // namespace airlock
