#include "runtime/gvisor/platform_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "common/log.h"
#include "common/proc_fields.h"
#include "common/subprocess.h"

namespace airlock::gvisor {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds `runsc do /bin/true` took on `platform`, or -1 with `why`.
double TimeTrue(const std::string& runsc, const std::string& platform, const std::string& scratch,
                std::chrono::milliseconds limit, std::string* why) {
  std::error_code ec;
  std::string root = scratch + "/probe-" + platform;
  std::filesystem::remove_all(root, ec);
  std::filesystem::create_directories(root, ec);
  auto t0 = Clock::now();
  auto r = Run({"timeout", "-s", "KILL", std::to_string(std::max<long>(1, limit.count() / 1000)), runsc, "--root",
                root, "--platform", platform, "--network", "none", "do", "/bin/true"});
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::filesystem::remove_all(root, ec);
  if (!r.ok()) {
    *why = r.status().message();
    return -1;
  }
  if (!r->status.success()) {
    *why = r->status.signal ? "did not finish in " + std::to_string(limit.count() / 1000) + " s"
                            : r->status.ToString() + ": " + r->err.substr(0, 200);
    return -1;
  }
  return s;
}

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

}  // namespace

PlatformDecision ProbePlatform(const std::string& runsc, const std::string& scratch, std::chrono::milliseconds limit) {
  std::string why_ptrace, why_kvm = "/dev/kvm cannot be opened";
  double ptrace = TimeTrue(runsc, "ptrace", scratch, limit * 4, &why_ptrace);
  double kvm = -1;
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    kvm = TimeTrue(runsc, "kvm", scratch, limit, &why_kvm);
  }
  std::string p = ptrace >= 0 ? "ptrace: " + Seconds(ptrace) : "ptrace: " + why_ptrace;
  std::string k = kvm >= 0 ? "kvm: " + Seconds(kvm) : "kvm: " + why_kvm;
  if (kvm >= 0 && (ptrace < 0 || kvm < ptrace)) return {"kvm", k + "; " + p};
  return {"ptrace", p + "; " + k};
}

PlatformDecision ProbePlatformCached(const std::string& runsc, const std::string& state_dir) {
  const std::string path = state_dir + "/gvisor-platform";
  const std::string boot = KernelBootId();
  {
    std::ifstream f(path);
    std::string name, reason, cached_boot;
    if (f && std::getline(f, name) && std::getline(f, reason) && std::getline(f, cached_boot) && cached_boot == boot &&
        (name == "kvm" || name == "ptrace")) {
      return {name, reason};
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(state_dir + "/run", ec);
  PlatformDecision d = ProbePlatform(runsc, state_dir + "/run");
  if (Status st = WriteFileAtomic(path, d.platform + "\n" + d.reason + "\n" + boot + "\n", 0644); !st.ok())
    LOG_DEBUG("gvisor platform cache not written: {}", st.ToString());
  return d;
}

}  // namespace airlock::gvisor
