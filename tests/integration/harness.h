// Shared helpers for integration tests: they boot real microVMs through the
// `airlock` binary or the Manager, so they need root, QEMU and a built guest
// image; without them a test skips and says what is missing.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/subprocess.h"

namespace airlock::testing {

// Paths, from the environment CTest sets (AIRLOCK_BIN, AIRLOCK_STATE_DIR,
// AIRLOCK_EXAMPLES).
std::string AirlockBin();
std::string StateDir();
std::string ExamplesDir();
// The runtime every daemon, `airlock run` and Manager of a test uses:
// AIRLOCK_RUNTIME, default "qemu" (so the whole suite runs once per runtime).
std::string RuntimeName();

// Empty when microVM tests can run here; else the reason to skip.
std::string SkipReason();

#define AIRLOCK_REQUIRE_VM()                               \
  do {                                                     \
    std::string why = ::airlock::testing::SkipReason();    \
    if (!why.empty()) GTEST_SKIP() << why;                 \
  } while (0)

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};
// Runs `airlock --state-dir D ARGS...` with optional stdin bytes; bounded output capture.
// `run` and `serve` get `--runtime RuntimeName()` right after the command.
// `on_tick(pid)` is called about every 100 ms while the CLI runs.
CliResult RunCli(const std::vector<std::string>& args, const std::string& stdin_bytes = "",
                 size_t max_output = 64 << 20, const std::function<void(pid_t)>& on_tick = {});

// Peak resident set (VmHWM) of a live process in KiB; 0 if unknown.
long PeakRssKib(pid_t pid);

std::string ReadFileOrDie(const std::string& path);
std::string MakeTempDir();

// Snapshot of what airlock leaves on the host: netns al-*, links alh*,
// run dirs, leases, VMM processes.
struct HostResources {
  std::vector<std::string> netns;
  std::vector<std::string> links;
  std::vector<std::string> run_dirs;
  std::vector<std::string> leases;
  std::vector<std::string> vmm_pids;
  std::string ToString() const;
  bool operator==(const HostResources&) const = default;
};
HostResources SnapshotResources();

}  // namespace airlock::testing
