// The in-process sandbox manager: the single owner of sandbox state. Every
// bring-up (create, start from a snapshot, resume) is one checklist of named
// steps, each undone if a later step fails (core/bring_up.h); destroy leaves
// nothing behind (VMM, netns, veth, tap, overlay, sockets, run dir).
//
// `airlock run` uses it directly; the daemon (src/server) wraps the same
// class, starting VMMs detached so they outlive a daemon restart and
// re-adopting them on start (Open's `adopt` list).
//
// Every sandbox gets an access token (64 hex chars, or the one given) and its
// sandbox-wide env vars through the agent's POST /init right after the agent
// answers /health; from then on the agent refuses requests without the token.
// Thread-safe: Create/Destroy/Get/List may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "core/bring_up.h"
#include "core/envd_client.h"
#include "core/registry.h"
#include "core/runtime_set.h"
#include "core/sandbox.h"
#include "core/sandbox_attributes.h"
#include "core/sandbox_egress.h"
#include "core/sandbox_state.h"
#include "core/snapshot_dirs.h"
#include "core/template_snapshots.h"
#include "core/warm_pool.h"
#include "egress/egress_service.h"
#include "egress/policy.h"
#include "image/image.h"
#include "runtime/options.h"
#include "runtime/runtime.h"

namespace airlock {

namespace net {
class AddressPool;
class SandboxNetwork;
}  // namespace net



// What the manager tells its owner (the daemon) about sandboxes. Each is
// optional and called on the thread doing the work (a worker, the reaper),
// never with a manager lock held.
struct SandboxEvents {
  // Its pause snapshot is committed and the registry says paused (the VMM
  // is being stopped).
  std::function<void(Sandbox&)> paused;
  // It runs again after a resume, and the registry says so.
  std::function<void(Sandbox&)> resumed;
  // Its end was decided (Sandbox::end() is set); teardown is about to begin.
  std::function<void(Sandbox&, const SandboxEnd&)> ending;
  // It is torn down, forgotten and out of the registry.
  std::function<void(const std::string& id, const SandboxEnd&)> ended;
};

struct ManagerConfig {
  std::string state_dir = "/var/lib/airlock";
  std::string address_pool = "198.18.0.0/15";
  // Host-wide lease directory root shared by every state directory (net::kHostLeaseRoot).
  std::string lease_root = "/run/airlock";
  // Path of the static airlock-agent installed into templates when an image
  // has to be built on first use; empty: next to the running binary.
  std::string agent_binary;
  bool build_image_if_missing = true;
  // Egress (docs/network.md): airlock's resolver + proxy for every sandbox.
  // Off, or when it cannot start: guests reach nothing at all.
  bool egress = true;
  std::string upstream_dns;                                      // "ip[:port]"; empty: the host's /etc/resolv.conf
  egress::AuditSink egress_audit_sink;                           // every egress decision (JSON)
  egress::EgressLimits egress_limits;                            // default per-sandbox limits
  std::shared_ptr<egress::RequestBroker> egress_request_broker;  // brokered secrets; null: none
  std::string egress_upstream_ca_file;                           // extra trust for intercepted HTTPS upstreams
  std::vector<std::string> egress_proxy_allow;                   // CIDRs a network.egressProxy may be in besides public ones
  // Create restores the template's snapshot when one exists for the image and
  // machine shape (TemplateSnapshots::Ensure makes it); else it cold boots.
  bool template_snapshots = false;
  // true: template snapshots keep their RAM in a file every sandbox created
  // from them maps copy-on-write (docs/snapshots.md "Shared-RAM templates",
  // directory suffix "-shm"); false: RAM in the migration stream, loaded by
  // every create (the way before; kept for comparison, bench/snapshot_bench).
  bool template_shared_memory = true;
  // Who owns the sandboxes this manager makes: the daemon's registry (its
  // canonical path), written into every run dir ("owner") and address lease,
  // so that start-up clean-up destroys only this owner's leftovers (and those
  // of dead in-process runs, which carry none). Empty: an in-process run.
  std::string owner;
  // The default runtime (runtime/registry.h AvailableRuntimes(); serve
  // --default-runtime): what a create that names none runs on. Opened by
  // Open (its failure fails it); the others on first use (core/runtime_set.h).
  std::string runtime = "qemu";
  // The VMM jail (docs/runtime-qemu.md "Jail"): each VMM as its own uid, no
  // capabilities, its own mount namespace. On by default; lease_root above
  // is used for its uid leases.
  VmmJailOptions vmm_jail;
  PortExposureLimits port_exposure;
  // The daemon's registry (core/registry.h): the manager writes a sandbox's
  // row on each transition (running, paused, running again, gone) and when
  // its TTL changes. nullptr: nothing is persisted (airlock run, tests).
  // Must outlive the manager.
  Registry* registry = nullptr;
  SandboxEvents events;
  // The warm pool (core/warm_pool.h): sandboxes restored from a template's
  // snapshot ahead of demand, per machine shape a create asked for (and
  // WarmPool::Warm's). size 0: none. Only detached creates (the daemon)
  // take from it. Its default_runtime is `runtime` above.
  WarmPoolConfig pool;
};

// The "owner" file of a run dir: the pid of the process that runs the
// sandbox (daemon or `airlock run`) and the registry of that daemon ("" for
// an in-process run, or a run dir written before owners were recorded).
struct RunDirOwner {
  int pid = 0;
  std::string registry;
};
RunDirOwner ReadRunDirOwner(const std::string& run_dir);
// Writes <run_dir>/owner: this process's pid and `registry` (a failure is logged).
void WriteRunDirOwner(const std::string& run_dir, const std::string& registry);
// The same record in a file of its own (a fork's <dir>.owner): the one
// writer and reader of the format ("<pid>\nregistry <path>\n").
void WriteOwnerFile(const std::string& path, const std::string& registry);
RunDirOwner ReadOwnerFile(const std::string& path);

struct CreateOptions {
  // A built-in template may name its runtime ("base-gvisor",
  // core/template_runtime.h) when `runtime` is empty.
  std::string template_name = "base";
  // What runs it (AvailableRuntimes()); empty: the template name's, else
  // ManagerConfig::runtime. A runtime that cannot run here is the create's
  // error, never a fallback to another.
  std::string runtime;
  int vcpus = 1;         // 1..64
  int memory_mib = 512;  // 128..65536
  // Bound on cold boot to agent-ready (TCG boots take seconds, KVM far less).
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(120)};
  // Sandbox-wide environment of every process (agent /init envVars).
  std::map<std::string, std::string> env_vars;
  // Empty: a random 32-byte token (64 hex chars) is generated.
  std::string access_token;
  // true: the VMM survives this process (daemon); false: it dies with the
  // thread that called Create (airlock run).
  bool detach = false;
  // What the sandbox may reach (default: nothing) and its limits.
  egress::EgressPolicy egress_policy;
  std::optional<egress::EgressLimits> egress_limits;
  SandboxAttributes attributes;
  // Its TTL, counted from when it runs; 0: none (the reaper never ends it
  // for time).
  std::chrono::milliseconds timeout{0};
  // The bring-up's last step before "running" (kStepHandover): the daemon
  // installs the sandbox's CA and records its owner here. An error fails
  // the create and undoes everything.
  std::function<Status(Sandbox&)> handover;
  // Start from this named snapshot (its directory, as SnapshotDirs::FindNamed
  // found it for the caller's team) instead of `template_name`. Create never
  // looks a snapshot up by itself: a name is a template unless the caller
  // resolved it, for its own team, to one of that team's snapshots.
  std::string named_snapshot_dir;
};

// A sandbox left running by a previous daemon, to be taken over by Open().
// record.state "paused": it is taken over as paused (its snapshot under
// snapshots/paused/<id>), and a VMM a crashed daemon left behind is stopped.
struct AdoptRequest {
  SandboxRecord record;                         // its registry row
  std::map<std::string, std::string> env_vars;  // re-sent to the agent after a cold resume (secrets' values included)
};

// Fork (fork.cc).
struct ForkOptions {
  std::chrono::milliseconds timeout{0};  // each child's TTL; 0: none
  // false: the children get the parent's filesystem only (its guest
  // filesystems synced first) and boot on it; a runtime that cannot drop a
  // snapshot's memory refuses (Unimplemented, as a pause without memory).
  bool keep_memory = true;
  // As CreateOptions::handover, for each child.
  std::function<Status(Sandbox&)> handover;
};

// Pause (snapshots.cc, docs/snapshots.md).
struct PauseOptions {
  // false: the filesystem only (memory is dropped; resume boots from the disk).
  bool keep_memory = true;
  // Called once the snapshot is committed and before the VMM is stopped
  // (the daemon records "paused" in its registry here). An error is logged.
  std::function<Status()> on_saved;
};

struct PauseResult {
  VmSnapshotInfo snapshot;
  double total_ms = 0;
};

struct ResumeResult {
  bool resumed = false;  // false: it was already running
  double total_ms = 0;
};



// A checkpoint of a running sandbox (checkpoints.cc, docs/snapshots.md
// "Checkpoints and rollback"): memory, devices and disk, kept until deleted
// or the sandbox is killed.
struct CheckpointInfo {
  std::string checkpoint_id;  // "ckpt-<16 hex>"
  std::string sandbox_id;
  int64_t created_at_ms = 0;  // Unix ms
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  double save_ms = 0;  // the sandbox was stopped this long (0 when listed)
  std::string dir;
};

struct RollbackResult {
  double total_ms = 0;  // request to agent answering again
  double stop_ms = 0;   // old VMM gone
  std::vector<StepTiming> steps;
};


// A running sandbox whose VMM has exited (Manager::DeadSandboxes).
struct DeadVm {
  std::string id;
  std::string detail;  // "console: <its last line>", or "" when it printed nothing
};

class Manager : private WarmPoolHost {
 public:
  // Prepares the state dir, opens the default runtime (QEMU: KVM if it
  // really works, else TCG; others on first use) and removes leftovers of
  // sandboxes whose owner died.
  // `adopt`: sandboxes of a previous daemon; each whose VMM still runs (pid
  // alive and its command line names the sandbox's run dir) and whose agent
  // answers is taken over (network via SandboxNetwork::Adopt); the others
  // are cleaned up fully (VMM, netns, run dir, lease). Get(id) tells which.
  static StatusOr<std::unique_ptr<Manager>> Open(ManagerConfig config, const std::vector<AdoptRequest>& adopt = {});
  ~Manager();  // destroys every sandbox it still owns (none after ReleaseAll)

  StatusOr<std::shared_ptr<Sandbox>> Create(const CreateOptions& options);
  // Decides the end of sandbox `id` (its outcome, set once) without tearing
  // it down: from then on it is no longer visible(). Never blocks. NotFound
  // when there is no such sandbox or its end is already decided.
  Status End(const std::string& id, SandboxOutcome outcome, std::string detail = "");
  // Tears sandbox `id` down (its end: as decided by End, else kKilled):
  // events.ending, VMM, network, run dir, private snapshots, registry row,
  // events.ended. Waits for a pause or resume in flight. NotFound.
  Status Destroy(const std::string& id);
  // Destroys every sandbox (outcome kDaemonStopped unless decided).
  void DestroyAll();
  // The end of a sandbox that ended lately (the newest kMaxEnded), else nullopt.
  static constexpr size_t kMaxEnded = 4096;
  std::optional<SandboxEnd> EndOf(const std::string& id) const;
  // The sandbox the API may show (visible()), or nullptr.
  std::shared_ptr<Sandbox> Visible(const std::string& id);
  std::vector<std::shared_ptr<Sandbox>> VisibleList();
  // Sets when sandbox `id`'s TTL ends (Unix ms); extend_only: only ever
  // later (connect). Writes the registry. Returns the end now in force.
  // NotFound unless visible.
  StatusOr<int64_t> SetEndsAt(const std::string& id, int64_t ends_at_ms, bool extend_only = false);

  // The warm pool (core/warm_pool.h). A parked sandbox is brought up to
  // "agent ready" from the template's snapshot (run dir, network with
  // egress denied, VMM, lease); a create of its shape takes it and runs only
  // egress (its policy), agent init (id, token, hostname, clock, entropy,
  // env) and handover. ReleaseAll, DestroyAll and the destructor stop it.
  WarmPool& warm_pool() { return *warm_pool_; }
  // The host's interface addresses changed (egress on_host_addresses_changed):
  // rewrites each sandbox netns's set of them (SandboxNetwork::SetEgressHostAddresses).
  void RefreshEgressHostAddresses(const std::vector<uint32_t>& host);
  // Forgets every sandbox without stopping it (a daemon shutting down for a
  // restart leaves detached VMMs for the next one to adopt).
  void ReleaseAll();
  std::shared_ptr<Sandbox> Get(const std::string& id);
  std::vector<std::shared_ptr<Sandbox>> List();
  // Running sandboxes whose VMM has exited (a guest panic, a crashed or killed
  // QEMU), with what is known of the death; a child VMM is reaped on the way.
  // Sandboxes in a pause, resume or destroy are skipped (their VMM changes).
  std::vector<DeadVm> DeadSandboxes();
  // Saves the sandbox (memory + device state + disk, or the disk only) under
  // <state_dir>/snapshots/paused/<id> (written as <id>.tmp, renamed when
  // committed), then stops its VMM and removes its network. NotFound;
  // AlreadyExists when already paused; FailedPrecondition in another state;
  // a failed save (e.g. ResourceExhausted: disk full) leaves it running.
  StatusOr<PauseResult> Pause(const std::string& id, const PauseOptions& options = {});
  // Restores a paused sandbox into a new network (same id, token, metadata),
  // sends the agent the current time and fresh entropy, and deletes the pause
  // snapshot. A running sandbox: OK with resumed=false. On failure it stays
  // paused (snapshot kept).
  // ends_at_ms > 0: the TTL's new end once resumed (a resumed sandbox's TTL
  // starts anew).
  StatusOr<ResumeResult> Resume(const std::string& id,
                                std::chrono::milliseconds ready_timeout = std::chrono::seconds(60),
                                int64_t ends_at_ms = 0);
  // The snapshot directories of its state dir (core/snapshot_dirs.h): where
  // each kind lives, reading and deleting them, what is layered on what,
  // disk layers and named snapshots as stored.
  const SnapshotDirs& snapshot_dirs() const { return *snapshot_dirs_; }
  // Template snapshots (core/template_snapshots.h): where each lives, making
  // one, sweeping old ones.
  TemplateSnapshots& template_snapshots() { return *template_snapshots_; }
  const TemplateSnapshots& template_snapshots() const { return *template_snapshots_; }
  // Fork (fork.cc): checkpoints the running sandbox `id` once (it keeps
  // running) under snapshots/forks/<id>-<n>, then starts `count` (1..16)
  // sandboxes from it in parallel, each in its own network namespace with
  // its own id, token, hostname, clock and entropy, sharing the unchanged
  // disk copy-on-write. One result per child (a child that failed is an
  // error; the others run). NotFound; FailedPrecondition unless running.
  // Each child carries the parent's attributes (a traffic token of its own)
  // and options.timeout as its TTL.
  StatusOr<std::vector<StatusOr<std::shared_ptr<Sandbox>>>> Fork(const std::string& id, int count,
                                                                 const ForkOptions& options = {});
  // Custom template builds (disk_layers.cc; src/templates, docs/templates.md):
  // layers are disk-only snapshots under snapshot_dirs().layers(), read,
  // exported and deleted through SnapshotDirs. SaveDiskLayer writes
  // running sandbox `id`'s disk (everything it wrote since it started, over
  // its backing) into `dir` (new; committed by rename, nothing left on
  // failure) and the sandbox runs on. CreateOnDiskLayer boots the image's
  // kernel on a private copy of a layer's disk (the layer's machine shape).
  StatusOr<VmSnapshotInfo> SaveDiskLayer(const std::string& id, const std::string& dir);
  StatusOr<std::shared_ptr<Sandbox>> CreateOnDiskLayer(const std::string& dir, const CreateOptions& options);
  // Named snapshots (named_snapshots.cc): a checkpoint of running sandbox
  // `id` (it keeps running) kept until deleted, owned by `team`. `name` is
  // optional and lives in the team's namespace: unique among the team's
  // snapshots (AlreadyExists), never a built-in template's name, runtime
  // form or alias (IsBuiltInTemplateName), nor "snap-..." (InvalidArgument).
  // Create(named_snapshot_dir = snapshot_dirs().FindNamed(...)) starts a
  // sandbox from it; snapshot_dirs().ListNamed() lists them.
  StatusOr<NamedSnapshotInfo> CreateNamedSnapshot(const std::string& id, const std::string& name,
                                                  const std::string& team = "");
  // The snapshot SnapshotDirs::FindNamed(ref, team, any_team) finds: NotFound;
  // FailedPrecondition while sandboxes are layered on it.
  Status DeleteNamedSnapshot(const std::string& ref, const std::string& team = "", bool any_team = false);
  // The default runtime (ManagerConfig::runtime).
  Runtime& runtime() { return runtimes_->default_runtime(); }
  // Runtime `name` ("" = the default), opened on first use
  // (RuntimeSet::Named: an unknown name, or a runtime that cannot run here).
  StatusOr<Runtime*> RuntimeNamed(std::string_view name) const { return runtimes_->Named(name); }
  // sync(1) as root in the guest (60 s): what its page cache holds reaches
  // the virtual disk (before a snapshot that keeps the filesystem only).
  static Status SyncGuestFilesystems(Sandbox& sb);
  // Before a save that keeps no memory (a pause or fork without it): a
  // guest whose files live in its memory exports them into `dir` (true: save
  // with SnapshotMemory::kNone); any other is synced once its runtime is
  // known to drop a snapshot's memory (false: save, then DropMemory).
  StatusOr<bool> PrepareSaveWithoutMemory(Sandbox& sb, const std::string& dir);
  // A guest whose files live in its memory (Runtime::guest_files_in_memory):
  // its agent's export of its root's changes into <dir>/kGuestRootChanges
  // (dir made, 0700), capped at what the guest could have written.
  static Status ExportGuestRoot(Sandbox& sb, const std::string& dir);
  // And back, to a guest booted from such a snapshot (`dir`), before anyone
  // else talks to it. A guest that cannot take it is the error.
  static Status ImportGuestRoot(Sandbox& sb, const std::string& dir);
  // nullptr when egress is off.
  egress::EgressService* egress() { return egress_.get(); }
  // Replaces a sandbox's egress policy live (nft + resolver/proxy).
  Status UpdateEgress(const std::string& id, const egress::EgressPolicy& policy);
  const ManagerConfig& config() const { return config_; }

  // Checkpoints and rollback (checkpoints.cc). Each sandbox has at most
  // kMaxCheckpoints (FailedPrecondition beyond). CreateCheckpoint saves the
  // running sandbox under snapshots/checkpoints/<id>-<checkpoint id> (it
  // keeps running; NotFound; FailedPrecondition unless running;
  // ResourceExhausted when the disk is full). Rollback stops its VMM and
  // restores the checkpoint into the same sandbox (id, token, network, run
  // dir kept; clock and entropy refreshed); NotFound for an unknown sandbox
  // or checkpoint; FailedPrecondition unless running. Checks that fail
  // before the VMM is stopped leave the sandbox running as it was; a restore
  // that fails after leaves it failed (the error says so; the caller kills
  // it). Checkpoints are deleted with their sandbox.
  static constexpr int kMaxCheckpoints = 16;
  StatusOr<CheckpointInfo> CreateCheckpoint(const std::string& id);
  StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& id);
  Status DeleteCheckpoint(const std::string& id, const std::string& checkpoint_id);
  // `on_running`: called once the sandbox runs from the checkpoint, before
  // its lock is released, so no pause or kill can come between (the daemon
  // records the new VMM and drops stale streams here).
  StatusOr<RollbackResult> Rollback(const std::string& id, const std::string& checkpoint_id,
                                    std::chrono::milliseconds ready_timeout = std::chrono::seconds(60),
                                    const std::function<void()>& on_running = {});

 private:
  // A starting daemon's take-over and clean-up (core/recovery.h): Open runs
  // it once, before the Manager is shared.
  friend class Recovery;
  Manager() = default;
  // A Sandbox object with `plan`'s identity and shape (nothing brought up yet).
  std::shared_ptr<Sandbox> SandboxFor(const BringUpPlan& plan) const;
  // The plan of an existing sandbox: its identity, shape, env, egress policy
  // (from its run dir) and detach; the source and `what` are the caller's
  // (resume, rollback; a fork child takes all but the identity).
  BringUpPlan PlanOf(const Sandbox& sb) const;
  // The warm pool's host (bring_up.cc): a parked sandbox is a bring-up
  // from the template's snapshot (BringUpPlan::park), warmed by one
  // login-shell command.
  StatusOr<PoolSource> PoolSourceFor(const PoolShape& shape) const override;
  StatusOr<std::shared_ptr<Sandbox>> Park(const PoolShape& shape, const PoolSource& source) override;
  void Discard(Sandbox& sb) override;
  // One bring-up (bring_up.cc): runs `plan`'s steps on `sb`. On failure
  // every step done is undone, newest first, and the error reads
  // "<plan.what>: <step>: <cause>"; sb's state is left to the caller.
  // *timings: what each step took.
  Status BringUp(Sandbox& sb, const BringUpPlan& plan, CreateTimings* timings);
  // A new sandbox from `plan` (any source but kPausedSandbox; empty id and
  // token: new ones), listed while it comes up. On failure it is destroyed
  // (failed → killed) and nothing is left behind.
  // `parked`: a sandbox of the warm pool to hand out (plan.source kParked;
  // it takes plan's identity but keeps its id).
  StatusOr<std::shared_ptr<Sandbox>> StartSandbox(
      BringUpPlan plan, std::chrono::steady_clock::time_point requested_at = std::chrono::steady_clock::now(),
      std::shared_ptr<Sandbox> parked = nullptr);
  std::set<std::string> forks_in_progress_;  // fork snapshot dirs (guarded by mu_)
  StatusOr<std::shared_ptr<Sandbox>> CreateFromNamedSnapshot(const std::string& dir, const CreateOptions& options);
  // Deletes a fork snapshot once no sandbox other than `except` uses it,
  // nor any disk or VMM (SnapshotDirs::DeleteForkIfUnused; fork.cc).
  void ReleaseSharedSnapshot(const std::string& dir, const Sandbox* except);
  // Deletes a sandbox's own snapshot data, never anything shared (snapshots.cc).
  Status DeletePrivateSnapshots(Sandbox& sb);
  // The registry row of `sb` (state "running" or "paused"); errors are logged.
  void Persist(const Sandbox& sb, std::string_view state);
  std::deque<std::pair<std::string, SandboxEnd>> ended_;  // newest last, bounded kMaxEnded (guarded by mu_)

  ManagerConfig config_;
  std::unique_ptr<RuntimeSet> runtimes_;
  std::unique_ptr<net::AddressPool> pool_;
  std::unique_ptr<egress::EgressService> egress_;  // before sandboxes_: outlives them
  HostAddressSet host_addresses_;  // the netns host_addrs set last written (RefreshEgressHostAddresses)
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::unique_ptr<SnapshotDirs> snapshot_dirs_;            // uses runtimes_
  std::unique_ptr<TemplateSnapshots> template_snapshots_;  // uses runtimes_ and pool_
  // Last: stopped (its parked sandboxes discarded) before anything above goes.
  std::unique_ptr<WarmPool> warm_pool_;
};

// A new random sandbox id: 20 lowercase alphanumerics (E2B's shape).
std::string NewSandboxId();

// The VMM request of a sandbox on `network` (bring_up.cc): run dir
// <run_dir>/vm, the machine shape, the netns and tap; the caller adds the
// image for a boot.
VmStartRequest VmStartRequestFor(const std::string& id, const std::string& run_dir, int vcpus, int memory_mib,
                                 const net::SandboxNetwork& network, bool detach);

}  // namespace airlock
