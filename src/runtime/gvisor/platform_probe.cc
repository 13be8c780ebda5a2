#include "runtime/gvisor/platform_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "common/file_util.h"
#include "common/log.h"
#include "common/proc_fields.h"
#include "common/subprocess.h"

namespace airlock::gvisor {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds `runsc do` of kProbeCommand took on `platform`, or -1 with `why`.
// The command makes 40,000 system calls (dd copying 20,000 single bytes), so
// the time is the platform's trap cost as much as the sandbox's start: the
// platforms differ in the first (systrap ~1 us a call, ptrace ~100 us), much
// less in the second.
double TimeProbe(const std::string& runsc, const std::string& platform, const std::string& scratch,
                 std::chrono::milliseconds limit, std::string* why) {
  std::error_code ec;
  std::string root = scratch + "/probe-" + platform;
  std::filesystem::remove_all(root, ec);
  std::filesystem::create_directories(root, ec);
  auto t0 = Clock::now();
  auto r = Run({"timeout", "-s", "KILL", std::to_string(std::max<long>(1, limit.count() / 1000)), runsc, "--root",
                root, "--platform", platform, "--network", "none", "do", "dd", "if=/dev/zero", "of=/dev/null", "bs=1",
                "count=20000", "status=none"});
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
  // systrap (runsc 2023+: seccomp traps, the default) and ptrace run
  // anywhere; kvm needs a /dev/kvm that really virtualises (the software
  // one on some cloud VMs hangs it, hence the limit).
  struct Candidate {
    std::string name;
    std::chrono::milliseconds limit;
    double seconds = -1;
    std::string why;
  };
  std::vector<Candidate> cs = {{"systrap", limit * 4}, {"ptrace", limit * 4}, {"kvm", limit}};
  for (auto& c : cs) {
    if (c.name == "kvm") {
      int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
      if (fd < 0) {
        c.why = "/dev/kvm cannot be opened";
        continue;
      }
      ::close(fd);
    }
    c.seconds = TimeProbe(runsc, c.name, scratch, c.limit, &c.why);
  }
  const Candidate* best = nullptr;
  std::string reason;
  for (const auto& c : cs) {
    if (c.seconds >= 0 && (!best || c.seconds < best->seconds)) best = &c;
    reason += (reason.empty() ? "" : "; ") + c.name + ": " + (c.seconds >= 0 ? Seconds(c.seconds) : c.why);
  }
  // Nothing ran: ptrace, whose error a start then reports.
  return {best ? best->name : "ptrace", reason};
}

PlatformDecision ProbePlatformCached(const std::string& runsc, const std::string& state_dir) {
  const std::string path = state_dir + "/gvisor-platform";
  // Valid for one boot of the host and one runsc binary (its size and mtime).
  std::error_code sec;
  const auto mtime = std::filesystem::last_write_time(runsc, sec).time_since_epoch().count();
  const std::string key = KernelBootId() + " " + runsc + ":" + std::to_string(std::filesystem::file_size(runsc, sec)) +
                          ":" + std::to_string(mtime);
  {
    std::ifstream f(path);
    std::string name, reason, cached_key;
    if (f && std::getline(f, name) && std::getline(f, reason) && std::getline(f, cached_key) && cached_key == key &&
        (name == "kvm" || name == "ptrace" || name == "systrap")) {
      return {name, reason};
    }
  }
  std::error_code ec;
  // Scratch beside run/, never in it (every directory there is a sandbox's).
  std::filesystem::create_directories(state_dir + "/runsc", ec);
  PlatformDecision d = ProbePlatform(runsc, state_dir + "/runsc");
  if (Status st = WriteFileAtomic(path, d.platform + "\n" + d.reason + "\n" + key + "\n", 0644); !st.ok())
    LOG_DEBUG("gvisor platform cache not written: {}", st.ToString());
  return d;
}

}  // namespace airlock::gvisor
