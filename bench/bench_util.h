// Helpers shared by the benchmarks: time, percentiles, a process's memory
// from /proc/PID/smaps_rollup, and the raw primitive of a microVM start
// (bare QEMU spawned until its QMP greeting), measured in the same run as
// the numbers it is compared with.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/proc_fields.h"
#include "common/subprocess.h"
#include "runtime/qemu/qmp_client.h"

namespace airlock::bench {

inline double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The p-quantile (0..1) of v, nearest rank; 0 for an empty v.
inline double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

using airlock::ReadSmapsRollupKib;  // common/proc_fields.h
inline uint64_t PssKib(pid_t pid) { return ReadSmapsRollupKib(pid)["Pss"]; }

// Bare QEMU (microvm, no devices, -S) spawned until its QMP greeting, in ms; -1 on failure.
inline double BareQemuSpawnMs() {
  const std::string sock = "/tmp/airlock-bench-qmp-" + std::to_string(::getpid()) + ".sock";
  ::unlink(sock.c_str());
  auto t0 = std::chrono::steady_clock::now();
  SpawnOptions so;
  so.argv = {"qemu-system-x86_64",
             "-M",
             "microvm",
             "-accel",
             "tcg",
             "-m",
             "512",
             "-nodefaults",
             "-nographic",
             "-S",
             "-qmp",
             "unix:" + sock + ",server=on,wait=off"};
  so.stdout_to_devnull = so.stderr_to_devnull = true;
  auto child = Spawn(so);
  if (!child.ok()) return -1;
  double ms = -1;
  while (Ms(t0) < 10000) {
    auto q = qemu::QmpClient::Connect(sock, std::chrono::seconds(2));
    if (q.ok()) {
      ms = Ms(t0);
      (void)(*q)->Execute("quit");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  (void)child->WaitFor(std::chrono::seconds(2));
  ::unlink(sock.c_str());
  return ms;
}

}  // namespace airlock::bench
