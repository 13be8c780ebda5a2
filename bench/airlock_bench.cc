// airlock-bench: where the time of a sandbox goes, each number printed beside
// the raw primitive measured in the same run on the same machine.
//
//   primitive: bare QEMU boot of the same kernel + initramfs until init runs
//   cold boot to agent-ready (Manager::Create)
//   `airlock run -- true`, end to end (a process, as a user runs it)
//   exec round trip of `true` on a running sandbox
//
// Usage: airlock-bench [--state-dir DIR] [--runs N] [--execs N]
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/subprocess.h"
#include "core/manager.h"
#include "image/image.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/qemu_vm.h"

namespace airlock {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

struct Stats {
  double p50 = 0, p95 = 0, min = 0;
  int n = 0;
};
Stats Summarise(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = static_cast<int>(v.size());
  s.min = v.front();
  s.p50 = v[(v.size() - 1) / 2];
  s.p95 = v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.95 * v.size())) - 1)];
  return s;
}

// Boots the kernel + initramfs with no root disk and no network, and times
// spawn → the initramfs's first console line (init is running). The machine
// is the runtime's own (BuildQemuArgv), less the disk, network, QMP and
// console socket, with the serial port on a pipe.
StatusOr<double> BareBootToInit(const image::GuestImage& img, qemu::Accel accel) {
  qemu::VmSpec spec;
  spec.sandbox_id = "bench";
  spec.kernel = img.kernel;
  spec.initrd = img.initrd;
  qemu::VmPaths paths = qemu::VmPaths::For("/nonexistent");
  std::vector<std::string> full = qemu::BuildQemuArgv(spec, accel, paths, false, qemu::HostTscKhz());
  std::vector<std::string> argv;
  for (size_t i = 0; i < full.size(); ++i) {
    const std::string& a = full[i];
    if ((a == "-drive" || a == "-device" || a == "-qmp" || a == "-chardev" || a == "-serial") && i + 1 < full.size()) {
      ++i;  // drop the option and its value
      continue;
    }
    argv.push_back(a);
  }
  argv.insert(argv.end(), {"-serial", "stdio"});
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd r(p[0]), w(p[1]);
  SpawnOptions so;
  so.argv = argv;
  so.stdout_fd = w.get();
  so.stderr_to_devnull = true;
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(Child child, Spawn(so));
  w.Reset();
  std::string seen;
  char buf[4096];
  while (Ms(t0, Clock::now()) < 60000) {
    pollfd pf{r.get(), POLLIN, 0};
    if (::poll(&pf, 1, 200) <= 0) continue;
    ssize_t n = ::read(r.get(), buf, sizeof(buf));
    if (n <= 0) break;
    seen.append(buf, n);
    // The initramfs's /init announces itself first thing.
    if (seen.find("airlock-init: start") != std::string::npos) return Ms(t0, Clock::now());
  }
  return DeadlineExceeded("bare boot never reached init; console: " + seen.substr(0, 2000));
}

void Row(const char* what, const Stats& s, const char* vs = "", double base = 0) {
  char ratio[64];
  if (base > 0)
    std::snprintf(ratio, sizeof(ratio), "%.2fx %s", s.p50 / base, vs);
  else
    std::snprintf(ratio, sizeof(ratio), "%s", vs);
  std::printf("| %-44s | %9.1f | %9.1f | %3d | %-18s |\n", what, s.p50, s.p95, s.n, ratio);
}

int Main(int argc, char** argv) {
  std::string state_dir = "/var/lib/airlock";
  int runs = 5, execs = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--state-dir")
      state_dir = argv[i + 1];
    else if (a == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (a == "--execs")
      execs = std::atoi(argv[i + 1]);
  }
  auto img = image::FindImage(state_dir, "base");
  if (!img.ok()) {
    std::fprintf(stderr, "airlock-bench: %s\n", img.status().message().c_str());
    return 1;
  }
  ManagerConfig mc;
  mc.state_dir = state_dir;
  mc.build_image_if_missing = false;
  auto m = Manager::Open(mc);
  if (!m.ok()) {
    std::fprintf(stderr, "airlock-bench: %s\n", m.status().message().c_str());
    return 1;
  }
  std::string accel = (*m)->runtime().accelerator();
  qemu::Accel accel_kind = qemu::ProbeAccelCached(state_dir).accel;

  InitLogging("warn");
  std::vector<double> bare, ready, run_true, exec_rt, health_rt;
  for (int i = 0; i < runs; ++i) {
    auto b = BareBootToInit(*img, accel_kind);
    if (!b.ok()) {
      std::fprintf(stderr, "airlock-bench: %s\n", b.status().message().c_str());
      return 1;
    }
    bare.push_back(*b);
  }
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    auto sb = (*m)->Create({});
    if (!sb.ok()) {
      std::fprintf(stderr, "airlock-bench: create: %s\n", sb.status().message().c_str());
      return 1;
    }
    ready.push_back(Ms(t0, Clock::now()));
    if (i == 0) {
      ExecRequest t;
      t.cmd = "true";
      for (int k = 0; k < execs; ++k) {
        auto e0 = Clock::now();
        auto r = (*sb)->agent().Exec(t, {});
        if (!r.ok()) {
          std::fprintf(stderr, "airlock-bench: exec: %s\n", r.status().message().c_str());
          return 1;
        }
        exec_rt.push_back(Ms(e0, Clock::now()));
        auto h0 = Clock::now();
        if ((*sb)->agent().Health(std::chrono::seconds(5)).ok()) health_rt.push_back(Ms(h0, Clock::now()));
      }
    }
    (void)(*m)->Destroy((*sb)->id());
  }
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  self[n > 0 ? n : 0] = 0;
  std::string airlock = std::filesystem::path(self).parent_path().parent_path() / "airlock";
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    auto r = Run({airlock, "--state-dir", state_dir, "run", "--", "true"});
    if (!r.ok() || !r->status.success()) {
      std::fprintf(stderr, "airlock-bench: airlock run -- true failed: %s\n",
                   r.ok() ? r->err.c_str() : r.status().message().c_str());
      return 1;
    }
    run_true.push_back(Ms(t0, Clock::now()));
  }
  Stats sb = Summarise(bare), sr = Summarise(ready), st = Summarise(run_true), se = Summarise(exec_rt),
        sh = Summarise(health_rt);
  std::printf("accelerator: %s\n\n", accel.c_str());
  std::printf("| %-44s | %9s | %9s | %3s | %-18s |\n", "measurement", "p50 ms", "p95 ms", "n", "vs primitive");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(11, '-').c_str(),
              std::string(11, '-').c_str(), std::string(5, '-').c_str(), std::string(20, '-').c_str());
  Row("primitive: bare qemu boot to init (no disk)", sb, "1.00x");
  Row("cold boot to agent-ready (Manager::Create)", sr, "bare boot", sb.p50);
  Row("`airlock run -- true` end to end", st, "bare boot", sb.p50);
  Row("primitive: agent GET /health round trip", sh, "1.00x");
  Row("exec round trip of `true` (running sandbox)", se, "/health", sh.p50);
  return 0;
}

}  // namespace
}  // namespace airlock

int main(int argc, char** argv) { return airlock::Main(argc, argv); }
