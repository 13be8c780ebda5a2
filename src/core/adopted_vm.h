// AdoptedVm: a VMM started (detached) by a previous daemon, known only by its
// pid and run dir. It is not our child: liveness is kill(pid, 0) plus "its
// /proc/<pid>/cmdline names the run dir" (so a recycled pid is never taken
// for it), and Destroy() SIGKILLs it, waits ≤ 3 s for it to vanish (init
// reaps it), then removes its cgroup leaves (best effort). The run dir is the
// Sandbox's to remove.
#pragma once

#include <sys/types.h>

#include <string>

#include "runtime/runtime.h"

namespace airlock {

// True when `pid` runs and its command line contains `needle`.
bool ProcessMatches(pid_t pid, const std::string& needle);

class AdoptedVm final : public VmInstance {
 public:
  AdoptedVm(std::string sandbox_id, pid_t pid, std::string run_dir)
      : id_(std::move(sandbox_id)), pid_(pid), run_dir_(std::move(run_dir)) {}
  ~AdoptedVm() override;
  pid_t pid() const override { return pid_; }
  bool alive() override { return !destroyed_ && ProcessMatches(pid_, run_dir_); }
  std::string ConsoleTail() override { return ""; }  // the console socket died with the old daemon
  Status Destroy() override;
  pid_t Release() override {
    released_ = true;
    return pid_;
  }

 private:
  std::string id_;
  pid_t pid_;
  std::string run_dir_;
  bool destroyed_ = false;
  bool released_ = false;
};

}  // namespace airlock
