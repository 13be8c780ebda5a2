#include "cli/doctor.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "image/image.h"
#include "net/doctor.h"
#include "runtime/registry.h"

namespace airlock::cli {

int RunDoctor(const std::string& state_dir) {
  int failed = 0;
  auto print = [&](const std::string& name, bool ok, const std::string& detail, const std::string& fix) {
    std::printf("%s %-22s %s\n", ok ? "ok  " : "FAIL", name.c_str(), detail.c_str());
    if (!ok) {
      ++failed;
      if (!fix.empty()) std::printf("     %-22s fix: %s\n", "", fix.c_str());
    }
  };
  print("root", ::geteuid() == 0, ::geteuid() == 0 ? "running as root" : "not root",
        "run airlock as root (it creates network namespaces and tap devices)");
  std::error_code ec;
  bool sd = std::filesystem::is_directory(state_dir, ec) && ::access(state_dir.c_str(), W_OK) == 0;
  print("state dir", sd, state_dir, "mkdir -p " + state_dir + " (as root), or pass --state-dir");
  print("runtimes", true, AvailableRuntimesText() + " (default " + kDefaultRuntime + "; serve/run --runtime)", "");
  for (const auto& r : AvailableRuntimes()) {
    for (const auto& c : RuntimeDoctorChecks(r, state_dir)) print(c.name, c.ok, c.detail, c.fix);
  }
  for (const auto& c : net::NetworkDoctorChecks()) print(c.name, c.ok, c.detail, c.fix);
  auto img = image::FindImage(state_dir, "base");
  if (img.ok()) {
    print("guest image", true, "base " + img->id.substr(0, 12) + ", kernel " + img->kernel_release, "");
  } else {
    print("guest image", false, img.status().message(), "airlock image build");
  }
  // Snapshot disk use (docs/snapshots.md): blocks actually allocated.
  for (const char* kind : {"templates", "paused", "forks", "named", "checkpoints"}) {
    std::string dir = state_dir + "/snapshots/" + kind;
    uint64_t bytes = 0;
    int count = 0;
    for (auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (!e.is_directory(ec)) continue;  // a fork's owner file
      ++count;
      for (auto& f : std::filesystem::recursive_directory_iterator(e.path(), ec)) {
        struct stat st;
        if (::lstat(f.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += uint64_t(st.st_blocks) * 512;
      }
    }
    char detail[160];
    std::snprintf(detail, sizeof detail, "%d, %.1f MiB on disk (%s)", count, bytes / 1048576.0, dir.c_str());
    print(std::string("snapshots: ") + kind, true, detail, "");
  }
  std::printf("\n%s\n", failed == 0 ? "all checks passed" : (std::to_string(failed) + " check(s) failed").c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace airlock::cli
