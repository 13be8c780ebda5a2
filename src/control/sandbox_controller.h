// The sandbox actions of the control plane, without HTTP (docs/architecture.md
// "Control plane"): one method per action, each holding the whole sequence
// of its action, so that a create, say, reads top to bottom in one place:
//
//   Create   disk check → admission (queued, fair per key) → secrets attach →
//            Manager::Create with the handover (sandbox CA, owners row, the
//            cluster's record) → spawn count → secrets commit → Record
//   Kill     End (from now nothing shows or reaches it) → Destroy
//   SetTimeout, Connect (a paused sandbox resumes; a running one's TTL is
//            only ever extended, spec §1.5.6)
//   Pause    the team's disk budget → Manager::Pause → log
//   Fork     memory admission of all children at once → Manager::Fork with
//            each child's handover (the parent's secrets with a CA of its
//            own, its owners row, the cluster's record) → admission counts it
//   Checkpoint  the team's disk budget → free disk for the guest's memory →
//            Manager::CreateCheckpoint → Record
//   Rollback Manager::Rollback → Record; a sandbox lost by a failed restore
//            is recorded and destroyed
//
// The HTTP side (server/) parses the request, calls the action on a worker
// and writes the answer from what the action returns (views for the JSON).
// Record writes the one record of an outcome: the audit trail, the daemon's
// counters and the sandbox's log.
//
// Threads: Create may be called on any thread and calls `done` once, on a
// worker (or on the calling thread, or the admission timer's, for a
// refusal). Kill and AdmitFork are non-blocking; every other action
// blocks (the VMM, the registry, the guest): call it on a worker.
// Errors: Status values (NotFound for a sandbox the API does not show; the
// Manager's codes otherwise), and for a create the refusal's HTTP status and
// Retry-After that admission chose.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "control/admission.h"
#include "control/caller.h"
#include "control/metrics.h"
#include "control/secrets_service.h"
#include "control/ticker.h"
#include "core/manager.h"
#include "secrets/secret_store.h"

namespace airlock {
class Registry;
namespace templates {
class TemplateStore;
}  // namespace templates
}  // namespace airlock

namespace airlock::control {

// A create, parsed and its template resolved: what Manager::Create gets
// (detached, with the caller's team as owner), the secrets to bind, and the
// custom template shown for it ("" for a built-in one).
struct CreateAction {
  Caller caller;
  CreateOptions options;
  std::vector<secrets::Binding> secrets;
  std::string template_id;
  // A cluster front holds this create's slot: the token its header carried
  // and the digest of its body (gateway/reservation.h); empty token: none.
  std::string reservation_token, reservation_digest;
};

// What a create ended with: the sandbox, or why not. A refusal by
// admission or the disk check carries the HTTP status it chose (429, 503,
// 507) and, for 429, when to retry; 0: from `status`.
struct CreateOutcome {
  std::shared_ptr<Sandbox> sandbox;
  Status status;
  int http_status = 0;
  int retry_after_s = 0;
};
// E2B's machine-readable error_code of a failed create (its API's Error
// schema; E2B's orchestrator placement_errors.go): the host has no room
// (memory admission 503, the disk 507, a full address or uid pool) →
// "sandbox_capacity_unavailable"; the sandbox did not come up (VMM, guest,
// network) → "sandbox_create_failed"; any other 5xx →
// "internal_server_error"; "" for the caller's own errors (4xx: a bad
// template, a key's quota or rate, which E2B answers without one).
std::string CreateErrorCode(const CreateOutcome& out, int http_status);

// What a connect ended with. sandbox null and status OK: the sandbox is not
// (or no longer) shown (answered like any unknown sandbox).
struct ConnectOutcome {
  std::shared_ptr<Sandbox> sandbox;
  bool resumed = false;  // it was paused and runs again
  Status status;
};

class SandboxController {
 public:
  struct Deps {
    Manager& manager;
    Admission& admission;
    SecretsService& secrets;
    Registry& registry;
    DaemonMetrics& metrics;
    templates::TemplateStore* template_store = nullptr;  // spawn counts of custom templates
    std::string state_dir;  // where checkpoints are written (their free-disk check)
    int64_t disk_reserve_mib = 0;  // kept free for the registry and audit trail (serve --disk-reserve)
    std::string db_dir;            // the registry's directory (its filesystem is checked too)
    int64_t disk_per_create_mib = 256;  // a create's overlay and snapshots (serve --disk-per-create)
    bool template_snapshots = true;  // false: every create cold boots (serve --no-template-snapshot)
  };
  // record_in_cluster's `reservation` for a fork child (the cluster
  // registry's kWithinCapacity: no front reserved its slot).
  static constexpr int64_t kForkChild = -1;
  struct Hooks {
    // Runs blocking work on a worker thread.
    std::function<void(std::function<void()>)> run_blocking;
    // Appends one record to the audit trail.
    std::function<void(nlohmann::json)> audit;
    // The handover's last step on a cluster node (the registry learns the
    // sandbox; `reservation`: the claimed one, 0: none, kForkChild: a fork
    // child, which needs a free slot of the node's); null on a single node.
    std::function<Status(const std::string& id, int64_t reservation)> record_in_cluster;
    // A cluster node's check of a create's reservation before anything is
    // started (ClusterRegistry::ClaimReservation): its row id, or
    // PermissionDenied (the create is refused with 403); null on a single node.
    std::function<StatusOr<int64_t>(const std::string& token, const std::string& digest)> claim_reservation;
    // A claimed reservation whose create failed here: its slot goes back at
    // once (ClusterRegistry::Release), whether or not its front is there.
    std::function<void(int64_t reservation)> release_reservation;
    // OK when `team` may write more to disk; else ResourceExhausted (507).
    std::function<Status(const std::string& team)> check_team_disk;
    // Something a team holds on disk was written or removed.
    std::function<void()> disk_changed;
  };

  // `io`: the thread of admission's tick (its queue's timeouts and rate
  // limits are served every 100 ms between Start and Stop).
  SandboxController(Deps deps, Hooks hooks, boost::asio::io_context& io);
  void Start() { admission_tick_.Start(); }
  void Stop() { admission_tick_.Stop(); }  // io thread

  void Create(CreateAction action, std::function<void(CreateOutcome)> done);
  // Ends sandbox `id` now (it is no longer shown nor reached); NotFound when
  // it was not shown. DestroyKilled then tears it down (blocking).
  Status Kill(const std::string& id);
  void DestroyKilled(const std::string& id);
  // The sandbox's TTL now ends at `ends_at_ms`; NotFound when not shown.
  Status SetTimeout(const std::string& id, int64_t ends_at_ms, int64_t timeout_s);
  // E2B's refresh: a running sandbox's TTL ends no earlier than
  // `ends_at_ms` (never shortened); NotFound when not shown or paused (E2B
  // refreshes only a running one).
  Status Refresh(const std::string& id, int64_t ends_at_ms, int64_t duration_s);
  ConnectOutcome Connect(const std::string& id, int64_t ends_at_ms);
  // Pauses `id` (of `team`); ResourceExhausted when the team's disk budget
  // is spent, else the Manager's error (the sandbox keeps running).
  StatusOr<PauseResult> Pause(const std::string& id, const std::string& team, const PauseOptions& options);
  // Admission of `count` children of `parent` (memory, all at once):
  // Unavailable with the numbers when refused (503).
  Status AdmitFork(const Sandbox& parent, int count);
  // `count` children of `id`, each living `ttl_s`, counted against `key_id`.
  StatusOr<std::vector<StatusOr<std::shared_ptr<Sandbox>>>> Fork(const std::string& id, int count, int ttl_s, bool memory,
                                                                   const std::string& key_id);
  StatusOr<CheckpointInfo> Checkpoint(const std::string& id);
  Status DeleteCheckpoint(const std::string& id, const std::string& checkpoint_id);
  // `on_running`: under the sandbox's lock once the checkpoint's VMM runs.
  StatusOr<RollbackResult> Rollback(const std::string& id, const std::string& checkpoint_id,
                                    std::function<void()> on_running);
  // Makes the template snapshot for (template, shape, runtime; "" = the
  // default) on a worker, once; nothing for a runtime without snapshots
  // (a cold-booted create asks, so the next one restores it).
  void EnsureTemplateSnapshot(const std::string& template_name, int vcpus, int memory_mib,
                              const std::string& runtime = "");
  // A sandbox that ended: admission counts it no more.
  void Released(const std::string& id);

  // The one record of an action's outcome: `record` to the audit trail
  // (with "action"), and `log` (when not empty) to sandbox `id`'s log.
  void Record(const std::string& action, const std::string& id, nlohmann::json record, const std::string& log = "");

 private:
  // The create once admitted (worker thread): `ticket` is admission's.
  CreateOutcome CreateAdmitted(const CreateAction& action, uint64_t ticket);
  void AdmissionDone(uint64_t ticket, const std::string& sandbox_id, double seconds);
  // OK when the disks of the state dir and of the registry can take another
  // sandbox; else ResourceExhausted with the numbers (answered 507).
  Status CheckDisk() const;

  Deps d_;
  Hooks hooks_;
  Ticker admission_tick_;
};

}  // namespace airlock::control
