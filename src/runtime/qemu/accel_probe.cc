#include "runtime/qemu/accel_probe.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/fd.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/proc_fields.h"

namespace airlock::qemu {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool HasCpuFlag(const std::string& cpuinfo, const std::string& flag) {
  std::stringstream ss(cpuinfo);
  std::string line;
  while (std::getline(ss, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::stringstream fs(line.substr(line.find(':') + 1));
    std::string f;
    while (fs >> f) {
      if (f == flag) return true;
    }
  }
  return false;
}

}  // namespace

std::string_view AccelName(Accel a) { return a == Accel::kKvm ? "kvm" : "tcg"; }

AccelHost AccelHost::Real() {
  AccelHost h;
  h.kvm_api_version = []() -> StatusOr<int> {
    UniqueFd fd(::open("/dev/kvm", O_RDWR | O_CLOEXEC));
    if (!fd) return ErrnoError("open /dev/kvm");
    int v = ::ioctl(fd.get(), KVM_GET_API_VERSION, 0);
    if (v < 0) return ErrnoError("ioctl KVM_GET_API_VERSION /dev/kvm");
    return v;
  };
  h.cpuinfo = []() -> StatusOr<std::string> {
    std::string s = ReadFile("/proc/cpuinfo");
    if (s.empty()) return NotFound("/proc/cpuinfo unreadable");
    return s;
  };
  h.module_loaded = [](const std::string& m) {
    struct stat st;
    return ::stat(("/sys/module/" + m).c_str(), &st) == 0;
  };
  return h;
}

AccelDecision ProbeAccel(const AccelHost& host) {
  auto api = host.kvm_api_version();
  if (!api.ok()) return {Accel::kTcg, "TCG: /dev/kvm not usable (" + api.status().message() + ")"};
  if (*api != KVM_API_VERSION)
    return {Accel::kTcg, "TCG: /dev/kvm API version " + std::to_string(*api) + " != " +
                             std::to_string(KVM_API_VERSION)};
  auto ci = host.cpuinfo();
  if (!ci.ok()) return {Accel::kTcg, "TCG: " + ci.status().message()};
  bool vmx = HasCpuFlag(*ci, "vmx"), svm = HasCpuFlag(*ci, "svm");
  if (!vmx && !svm)
    return {Accel::kTcg,
            "TCG: /dev/kvm exists but the CPU advertises neither vmx nor svm (no hardware virtualisation; "
            "/dev/kvm is likely a paravirtual stand-in such as kvm_pvm)"};
  const char* mod = vmx ? "kvm_intel" : "kvm_amd";
  if (!host.module_loaded(mod))
    return {Accel::kTcg, std::string("TCG: CPU has ") + (vmx ? "vmx" : "svm") + " but module " + mod +
                             " is not loaded"};
  return {Accel::kKvm, std::string("KVM: /dev/kvm usable, CPU has ") + (vmx ? "vmx" : "svm") + ", " + mod +
                           " loaded"};
}

AccelDecision ProbeAccelCached(const std::string& state_dir, const AccelHost& host) {
  const std::string path = state_dir + "/accel";
  const std::string boot = KernelBootId();
  {
    std::ifstream f(path);
    std::string name, reason, cached_boot;
    if (f && std::getline(f, name) && std::getline(f, reason) && std::getline(f, cached_boot) &&
        cached_boot == boot && (name == "kvm" || name == "tcg")) {
      return {name == "kvm" ? Accel::kKvm : Accel::kTcg, reason};
    }
  }
  AccelDecision d = ProbeAccel(host);
  std::string text = std::string(AccelName(d.accel)) + "\n" + d.reason + "\n" + boot + "\n";
  if (Status st = WriteFileAtomic(path, text, 0644); !st.ok()) LOG_DEBUG("accel cache not written: {}", st.ToString());
  return d;
}

}  // namespace airlock::qemu
