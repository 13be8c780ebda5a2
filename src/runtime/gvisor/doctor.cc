#include "runtime/gvisor/doctor.h"

#include <sys/stat.h>

#include <filesystem>

#include "common/subprocess.h"
#include "runtime/gvisor/platform_probe.h"

namespace airlock::gvisor {
namespace {

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

std::vector<DoctorCheck> GvisorDoctorChecks(const std::string& state_dir) {
  std::vector<DoctorCheck> out;
  auto runsc = FindExecutable("runsc");
  {
    DoctorCheck c{"runsc", runsc.ok(), "", "apt-get install runsc"};
    if (runsc.ok()) {
      auto v = RunChecked({*runsc, "--version"});
      c.detail = v.ok() ? FirstLine(*v) : v.status().message();
    } else {
      c.detail = "not installed: the gvisor runtime cannot run";
    }
    out.push_back(c);
  }
  {
    DoctorCheck c{"fuse2fs", FindExecutable("fuse2fs").ok(), "", "apt-get install fuse2fs"};
    c.detail = c.ok ? "template images become root trees in user space" : "not installed";
    out.push_back(c);
  }
  if (runsc.ok()) {
    PlatformDecision d;
    if (state_dir.empty()) {
      std::string scratch = std::filesystem::temp_directory_path().string();
      d = ProbePlatform(*runsc, scratch);
    } else {
      d = ProbePlatformCached(*runsc, state_dir);
    }
    DoctorCheck c{"gvisor platform", true, d.platform + ": " + d.reason,
                  d.platform != "kvm" ? "for --platform=kvm: a CPU with vmx/svm and a /dev/kvm that runs guests" : ""};
    out.push_back(c);
  }
  {
    struct stat st;
    bool mem = ::stat("/sys/fs/cgroup/memory/tasks", &st) == 0 || ::stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0;
    DoctorCheck c{"gvisor cgroups", mem, mem ? "runsc puts each sandbox's Sentry and gofer under airlock-gvisor/" : "",
                  "mount the memory, pids and cpu controllers"};
    out.push_back(c);
  }
  return out;
}

}  // namespace airlock::gvisor
