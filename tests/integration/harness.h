// Shared helpers for integration tests: they boot real microVMs through the
// `airlock` binary or the Manager, so they need root, QEMU and a built guest
// image; without them a test skips and says what is missing.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
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

#define AIRLOCK_REQUIRE_VM()                            \
  do {                                                  \
    std::string why = ::airlock::testing::SkipReason(); \
    if (!why.empty()) GTEST_SKIP() << why;              \
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

// What sandboxes leave on the host: netns al-<id>, host links alh*, run
// dirs, leases, VMM processes (names, sorted).
struct HostResources {
  std::vector<std::string> netns;
  std::vector<std::string> links;
  std::vector<std::string> run_dirs;
  std::vector<std::string> leases;
  std::vector<std::string> vmm_pids;
  std::string ToString() const;
  bool operator==(const HostResources&) const = default;
};

// The resources of this test's sandboxes, and only theirs, so that a leak
// check holds while other airlock daemons run on the host (on other state
// dirs, or on this one: run dirs there before it was made are not the
// test's). Make it before the test creates sandboxes: from then on it notes
// (inotify) every run dir made under StateDir()/run, so a sandbox that
// failed to start and was cleaned up is still known by its id.
class SandboxResources {
 public:
  SandboxResources();
  // StateDir()'s run dirs and VMM processes made since construction, and
  // for every sandbox id seen: its netns al-<id>, its
  // host link net::HostVethName(id) and the lease naming it.
  HostResources Snapshot();
  const std::set<std::string>& ids() const { return ids_; }

 private:
  UniqueFd inotify_;
  std::set<std::string> ids_;
  std::set<std::string> preexisting_;
};

}  // namespace airlock::testing
