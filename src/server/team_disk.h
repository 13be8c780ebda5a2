// TeamDisk: the disk a team holds on this host, against its budget
// (serve --team-disk-budget; docs/limits.md "Disk per team").
//
// Units: bytes of allocated blocks (st_blocks * 512, so a sparse memory file
// counts what it really holds), summed over every regular file under each
// path, links never followed; budgets and messages in MiB.
//
// Sources (the daemon's ListHoldings, one walk per refresh):
//   uploads          template_files rows (team, path)
//   layers           template_layers rows (team, dir)
//   images           the rootfs of each ready build of the team's templates
//   checkpoints      snapshots/checkpoints/<sandbox>-<ckpt> of the team's sandboxes
//   paused snapshots snapshots/paused/<sandbox> of the team's sandboxes
//   named snapshots  snapshots/named/<snap> with their team
// A path listed for a team twice counts once. The sum is cached for
// `cache_for` (a walk stats every file), and dropped by Invalidate() after
// a write. Check() runs the walk on the caller's thread: call it on a worker.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock::server {

// Allocated bytes of `path` (a file, or a directory and all below it); 0
// when it does not exist.
int64_t AllocatedBytes(const std::string& path);

class TeamDisk;
// OK while `team` may write more (`disk` null: no budget); else
// ResourceExhausted naming the budget (answered 507), logged.
Status CheckTeamDisk(TeamDisk* disk, const std::string& team);

class TeamDisk {
 public:
  using Clock = std::chrono::steady_clock;
  struct Holding {
    std::string team, path;
  };
  struct Options {
    int64_t budget_mib = 0;  // 0: no budget (Check is always OK)
    std::chrono::milliseconds cache_for{2000};
    std::function<std::vector<Holding>()> list;  // every team's holdings
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
  };
  explicit TeamDisk(Options o) : o_(std::move(o)) {}

  bool enabled() const { return o_.budget_mib > 0; }
  int64_t budget_mib() const { return o_.budget_mib; }
  // The team's usage in bytes (refreshed when the cache is older than cache_for).
  int64_t UsageBytes(const std::string& team);
  // OK while the team uses less than its budget; else ResourceExhausted
  // (answered 507): "team X uses N MiB of its M MiB disk budget (uploads,
  // layers, images, checkpoints, paused and named snapshots; serve
  // --team-disk-budget)".
  Status Check(const std::string& team);
  // Bytes the team may still write before it reaches its budget (0 when
  // over; INT64_MAX without a budget).
  int64_t RemainingBytes(const std::string& team);
  // The next Check measures again (after an upload, a checkpoint, a delete).
  void Invalidate();

 private:
  void RefreshLocked();
  Options o_;
  std::mutex mu_;
  bool valid_ = false;
  Clock::time_point measured_at_{};
  std::map<std::string, int64_t> usage_;  // team -> bytes (guarded by mu_)
};

}  // namespace airlock::server
