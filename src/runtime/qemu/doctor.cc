#include "runtime/qemu/doctor.h"

#include <sys/stat.h>

#include "common/subprocess.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/cgroup.h"
#include "runtime/qemu/qemu_runtime.h"
#include "runtime/qemu/qemu_vm.h"

namespace airlock::qemu {
namespace {

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::vector<DoctorCheck> QemuDoctorChecks(const std::string& state_dir) {
  std::vector<DoctorCheck> out;
  {
    DoctorCheck c{"qemu-system-x86_64", false, "", "apt-get install qemu-system-x86"};
    auto v = RunChecked({"qemu-system-x86_64", "--version"});
    if (v.ok()) {
      auto m = RunChecked({"qemu-system-x86_64", "-M", "help"});
      bool microvm = m.ok() && m->find("microvm") != std::string::npos;
      c.ok = microvm;
      c.detail = FirstLine(*v) + (microvm ? ", microvm machine available" : ", NO microvm machine");
    } else {
      c.detail = v.status().message();
    }
    out.push_back(c);
  }
  {
    DoctorCheck c{"qemu-img", false, "", "apt-get install qemu-utils"};
    auto v = RunChecked({"qemu-img", "--version"});
    c.ok = v.ok();
    c.detail = v.ok() ? FirstLine(*v) : v.status().message();
    out.push_back(c);
  }
  {
    DoctorCheck c{"qemu seccomp (-sandbox)", QemuSupportsSandbox("qemu-system-x86_64"), "",
                  "use a QEMU built with libseccomp (Debian's is)"};
    c.detail = c.ok ? "supported; VMMs run with -sandbox on" : "not supported: VMMs run without a seccomp filter";
    out.push_back(c);
  }
  {
    AccelDecision d = state_dir.empty() ? ProbeAccel() : ProbeAccelCached(state_dir);
    // TCG is a working (slow) answer, so the check passes either way; the
    // detail says why.
    DoctorCheck c{"accelerator", true, std::string(AccelName(d.accel)) + ": " + d.reason,
                  d.accel == Accel::kTcg ? "for KVM: a CPU with vmx/svm, kvm_intel/kvm_amd loaded, rw /dev/kvm" : ""};
    out.push_back(c);
  }
  {
    DoctorCheck c{"cgroups", false, "", "mount the memory, pids and cpu controllers (v1) or cgroup2 with them delegated"};
    CgroupVersion v = DetectCgroupVersion();
    struct stat st;
    if (v == CgroupVersion::kV2) {
      auto ctl = RunChecked({"cat", "/sys/fs/cgroup/cgroup.controllers"});
      bool ok = ctl.ok() && ctl->find("memory") != std::string::npos && ctl->find("pids") != std::string::npos &&
                ctl->find("cpu") != std::string::npos;
      c.ok = ok;
      c.detail = "v2; controllers: " + (ctl.ok() ? FirstLine(*ctl) : ctl.status().message());
    } else if (v == CgroupVersion::kV1) {
      bool mem = ::stat("/sys/fs/cgroup/memory/tasks", &st) == 0, pids = ::stat("/sys/fs/cgroup/pids/tasks", &st) == 0,
           cpu = ::stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", &st) == 0;
      c.ok = mem && pids && cpu;
      c.detail = std::string("v1 (hybrid); memory ") + (mem ? "yes" : "NO") + ", pids " + (pids ? "yes" : "NO") +
                 ", cpu " + (cpu ? "yes" : "NO");
    } else {
      c.detail = "no cgroup hierarchy under /sys/fs/cgroup: VMMs run without memory/pids limits";
    }
    out.push_back(c);
  }
  {
    // The exact path a launch takes: a jailed QEMU (uid from the default
    // range, no capabilities, own mount namespace) runs --version.
    DoctorCheck c{"vmm jail", false, "", "run as root on a kernel with mount namespaces and pivot_root; "
                                         "`airlock serve --no-vmm-jail` runs VMMs as root (debugging only)"};
    Status st = CheckVmmJail(state_dir);
    c.ok = st.ok();
    c.detail = st.ok() ? "QEMU runs as its own uid, no capabilities, own mount namespace" : st.message();
    out.push_back(c);
  }
  return out;
}

}  // namespace airlock::qemu
