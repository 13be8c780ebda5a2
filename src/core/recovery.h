// Recovery: what a starting daemon does about what the previous one left on
// the host (docs/server.md "State, restart and TTL", docs/snapshots.md).
// Manager::Open runs it once, before the Manager is shared with anyone:
//
//   1. adoption: each sandbox of the previous daemon's registry (AdoptRequest)
//      is taken over: a running one whose VMM still runs and whose agent
//      answers (its network via SandboxNetwork::Adopt, its runtime's VMM
//      reattached, else by pid); a paused one from its committed pause
//      snapshot (a VMM a daemon killed mid-pause left stopped is ended); a
//      rollback a killed daemon left in flight (Registry::RollbackIntent) is
//      completed (its new VMM adopted, or the sandbox restored from the
//      checkpoint again, or kept paused on it). What cannot be taken over
//      is cleaned up fully (VMM, netns, run dir, pause snapshot, row).
//   2. sweeps: uncommitted saves, template snapshots of no current image,
//      orphans (run dirs, VMMs, leases and netns of dead owners that are
//      this daemon's or no daemon's), fork snapshots nothing is layered on,
//      checkpoints of sandboxes that are gone; in that order, each after
//      what makes its "in use" true.
//
// Single-threaded (the Manager's start). Nothing here fails the start:
// every error is logged and what it concerns is cleaned up.
#pragma once

#include <sys/types.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock {

class Manager;
class Sandbox;
struct AdoptRequest;
struct RollbackIntent;
namespace net {
class AddressPool;
}  // namespace net

// Kills every process whose command line names `run_dir` (a VMM left by a
// daemon killed -9; `owner_pid`, -1 when unknown, is only logged), then
// tears down sandbox `id`'s network and releases its lease in `pool`.
void ReapStaleGuest(const std::string& id, const std::string& run_dir, pid_t owner_pid, net::AddressPool& pool);

class Recovery {
 public:
  explicit Recovery(Manager& manager) : m_(manager) {}
  // Steps 1 and 2 above, for the previous daemon's sandboxes `adopt`.
  void Run(const std::vector<AdoptRequest>& adopt);

 private:
  // A Sandbox object for a registry record (fields only; the caller
  // attaches the VMM or the snapshot).
  std::shared_ptr<Sandbox> AdoptedSandbox(const AdoptRequest& r);
  // A running sandbox of the previous daemon; errors mean "clean it up".
  StatusOr<std::shared_ptr<Sandbox>> AdoptOne(const AdoptRequest& r);
  // A paused one (its snapshot under snapshots/paused/<id>).
  StatusOr<std::shared_ptr<Sandbox>> AdoptPausedOne(const AdoptRequest& r);
  // Is there a committed pause snapshot for r.id while its VMM is gone (a
  // daemon killed after the commit, before the registry said paused)?
  bool RecoverPaused(const AdoptRequest& r);
  // A rollback in flight: its new VMM adopted when the intent says it came
  // up and it answers (*redo false); otherwise every VMM of its run dir and
  // its network go and it is returned paused on the checkpoint (*redo true)
  // for RedoRollback. Never deletes a checkpoint.
  StatusOr<std::shared_ptr<Sandbox>> RecoverRollback(const AdoptRequest& r, const RollbackIntent& intent, bool* redo);
  // Brings a sandbox RecoverRollback left paused on its checkpoint up from
  // it (as a resume, on a new network) and clears the intent; on failure it
  // stays paused on the checkpoint (a resume retries; nothing is deleted).
  Status RedoRollback(const std::shared_ptr<Sandbox>& sb, const std::string& checkpoint_id);
  // Everything of a sandbox that was not taken over: row, VMM, network,
  // run dir, pause snapshot.
  void Forget(const AdoptRequest& r, const Status& why);
  // Run dirs and leases of dead owners that are this daemon's or no
  // daemon's, with their VMMs and netns; `adopted` are kept.
  void CleanupOrphans(const std::set<std::string>& adopted);

  Manager& m_;
};

}  // namespace airlock
