// Which accelerator QEMU gets. KVM only when all of: /dev/kvm opens
// read-write and answers KVM_GET_API_VERSION == 12, the CPU advertises vmx or
// svm in /proc/cpuinfo, and kvm_intel or kvm_amd is loaded (/sys/module/...).
// Otherwise TCG (slower, complete). Some hosts expose a /dev/kvm backed by
// something else (e.g. kvm_pvm) on which a stock guest kernel crashes; the
// cpuinfo/module checks rule those out.
//
// The decision is cached in <state_dir>/accel ("kvm|tcg\n<reason>\n<boot id>")
// and re-probed after a reboot (boot id changes) or when the file is removed.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace airlock::qemu {

enum class Accel { kTcg, kKvm };
std::string_view AccelName(Accel a);  // "tcg" / "kvm"

struct AccelDecision {
  Accel accel = Accel::kTcg;
  std::string reason;  // human-readable, for `airlock doctor`
};

// The seam: what the probe reads from the host (faked in unit tests).
struct AccelHost {
  std::function<StatusOr<int>()> kvm_api_version;          // open /dev/kvm + ioctl
  std::function<StatusOr<std::string>()> cpuinfo;          // /proc/cpuinfo
  std::function<bool(const std::string& module)> module_loaded;
  static AccelHost Real();
};

AccelDecision ProbeAccel(const AccelHost& host = AccelHost::Real());
// Cached probe; the cache is best effort (a read-only state dir still probes).
AccelDecision ProbeAccelCached(const std::string& state_dir, const AccelHost& host = AccelHost::Real());

}  // namespace airlock::qemu
