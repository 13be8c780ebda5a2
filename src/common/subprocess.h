// Child processes. A Child kills (SIGKILL) and reaps its process when it goes
// out of scope unless Release()d, so an early return never leaks a process.
// Between fork and exec only async-signal-safe calls are made; everything
// (argv, envp, fds) is prepared before fork.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock {

// How a child ended. exit_code is set for a normal exit, signal for a death
// by signal. ShellCode() is the shell convention: code, or 128+signal.
struct ExitStatus {
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool success() const { return exit_code && *exit_code == 0; }
  int ShellCode() const { return exit_code ? *exit_code : 128 + signal.value_or(0); }
  std::string ToString() const;  // "exit status 3" / "signal: killed"
  static ExitStatus FromWaitStatus(int wstatus);
};

struct SpawnOptions {
  std::vector<std::string> argv;      // argv[0] is looked up in PATH if it has no '/'
  std::optional<std::map<std::string, std::string>> env;  // default: inherit
  // Child fds 0/1/2. Invalid (-1) means: 0 ← /dev/null, 1 and 2 inherited.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  bool stdout_to_devnull = false;
  bool stderr_to_devnull = false;
  int netns_fd = -1;        // setns(CLONE_NEWNET) before exec when >= 0
  bool new_session = true;  // setsid(), so a terminal's Ctrl-C does not reach it
  bool die_with_parent = true;  // PR_SET_PDEATHSIG(SIGKILL)
  std::string cwd;
};

class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(Child&& o) noexcept;
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();  // SIGKILL + reap if still owned and not yet reaped

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !status_; }
  // Blocks until the child exits.
  StatusOr<ExitStatus> Wait();
  // Waits at most `timeout`; DeadlineExceeded when still running.
  StatusOr<ExitStatus> WaitFor(std::chrono::milliseconds timeout);
  // Non-blocking; nullopt while running.
  std::optional<ExitStatus> Poll();
  Status Signal(int sig);
  // Kill and reap now.
  void Kill();
  // Give up ownership: the destructor will not kill it.
  pid_t Release();

 private:
  pid_t pid_ = -1;
  std::optional<ExitStatus> status_;
};

StatusOr<Child> Spawn(const SpawnOptions& options);

// Runs a command to completion, capturing stdout and stderr (bounded at
// `max_output` bytes each; the rest is drained and dropped).
struct RunResult {
  ExitStatus status;
  std::string out;
  std::string err;
};
StatusOr<RunResult> Run(const std::vector<std::string>& argv, int netns_fd = -1,
                        size_t max_output = 1 << 20);
// Run and require exit 0; the error carries the command and its stderr.
StatusOr<std::string> RunChecked(const std::vector<std::string>& argv, int netns_fd = -1);

// Finds an executable in PATH (or checks an absolute path); NotFound if absent.
StatusOr<std::string> FindExecutable(const std::string& name);

// Start time of process `pid` in clock ticks since boot (/proc/<pid>/stat
// field 22), so that a recycled pid is not taken for its predecessor; 0 if
// unknown.
unsigned long long ProcessStartTicks(pid_t pid);

}  // namespace airlock
