// Cgroups for the processes the agent starts (cgroup v2, which PID 1 mounts
// at /sys/fs/cgroup; docs/agent.md "Limits"):
//
//   <root>                    the agent itself: never limited
//   <root>/commands           every process tree started through the API:
//                             pids.max = total_pids, memory.max = memory_max
//   <root>/commands/c<N>      one per Start: pids.max = pids_per_command
//
// So a fork bomb fills its own leaf, not the guest: the agent, which stays in
// the root cgroup, can still fork, make threads and answer, and a second
// command gets a leaf of its own. cgroup.kill ends a whole leaf at once,
// including children that called setsid() or were re-parented to PID 1.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::agent {

struct CgroupLimits {
  int64_t total_pids = 0;        // commands/pids.max
  int64_t pids_per_command = 0;  // commands/c<N>/pids.max
  int64_t memory_max = 0;        // commands/memory.max in bytes; 0 = not set
};

// Limits for a guest with `threads_max` (/proc/sys/kernel/threads-max) and
// `mem_total` bytes of RAM: the agent keeps 256 tasks and max(32 MiB, 1/16
// of RAM) to itself; one command gets one task per MiB of RAM (at least
// 128), at most half of the total.
CgroupLimits DefaultCgroupLimits(int64_t threads_max, int64_t mem_total);

// One leaf: where a started process lives.
struct CommandCgroup {
  std::string path;  // <root>/commands/c<N>
  UniqueFd procs;    // O_WRONLY fd of its cgroup.procs: the child writes "0"
};

class CommandCgroups {
 public:
  // Enables the pids, memory and cpu controllers below `root` (those the
  // kernel has), creates <root>/commands with `limits`. Idempotent. Errors:
  // unavailable when `root` is not a cgroup2 mount; the failing write.
  static StatusOr<std::unique_ptr<CommandCgroups>> Setup(const std::string& root, const CgroupLimits& limits);

  // A fresh leaf with pids.max set. Errors: the failing mkdir or write.
  StatusOr<CommandCgroup> Create();
  // SIGKILLs every process in the leaf (cgroup.kill). OK when it is gone.
  static Status Kill(const std::string& leaf);
  // True while a process of the leaf lives (cgroup.events "populated 1").
  static bool Populated(const std::string& leaf);
  // Removes the leaf once empty; until then it is kept and retried on each
  // later Create or Release (a background child may outlive its command).
  void Release(const std::string& leaf);

  const std::string& commands_dir() const { return commands_; }
  const CgroupLimits& limits() const { return limits_; }

 private:
  CommandCgroups(std::string commands, CgroupLimits limits) : commands_(std::move(commands)), limits_(limits) {}
  void Sweep();

  std::string commands_;
  CgroupLimits limits_;
  uint64_t next_ = 0;
  std::vector<std::string> pending_;  // released, not yet empty
};

}  // namespace airlock::agent
