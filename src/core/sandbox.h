// One sandbox as the Manager (manager.h) owns it: its identity, machine
// (VMM, network, agent), what the API shows of it (attributes, times,
// state, log, end) and its data-plane ports. Its public surface reads; every
// change of state is its owners' (the Manager, and Recovery at a daemon's
// start: the two friends), through the named private methods below, which
// sandbox.cc alone defines, under the sandbox's own locks: `mu_` for what
// the API reads, `op_mu_` serialising pause, resume, rollback and destroy.
//
// Threads: every public method is thread-safe. Errors are Status values.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/bring_up.h"
#include "core/envd_client.h"
#include "core/registry.h"
#include "core/sandbox_attributes.h"
#include "core/sandbox_state.h"
#include "egress/egress_service.h"
#include "runtime/runtime.h"

namespace airlock {

namespace net {
class SandboxNetwork;
}  // namespace net

// The errors of several steps as one: the first error's code, every
// message joined by "; "; OK when all are.
Status JoinErrors(const std::vector<Status>& errors);

// Bounds on exposing guest ports (other than the agent's) to the data plane,
// per sandbox (docs/server.md "Other guest ports"): at most `max_ports`
// distinct ports for the life of its network, and new ones at most
// `new_per_second` a second after a burst of `burst`. Ports already exposed
// cost nothing.
struct PortExposureLimits {
  int max_ports = 32;
  double new_per_second = 4;
  int burst = 16;
};

// Where the time of a create went, in milliseconds: every bring-up step that
// ran, in order (bring_up.h), and the sums the CLI prints.
struct CreateTimings {
  double network_ms = 0;       // step "network"
  double vmm_start_ms = 0;     // step "vmm"
  double agent_ready_ms = 0;   // steps "agent ready" + "agent init"
  double total_ms = 0;         // from the request (image look-up included)
  bool from_snapshot = false;  // restored from a snapshot (else cold boot)
  std::vector<StepTiming> steps;
};

class Sandbox {
 public:
  ~Sandbox();
  const std::string& id() const { return id_; }
  SandboxState state() const;
  const EnvdClient& agent() const { return *agent_; }
  const CreateTimings& timings() const { return timings_; }
  pid_t vmm_pid() const;
  // Its VMM runs (a parked sandbox of the warm pool is handed out only then).
  bool vmm_alive() const;
  const std::string& template_name() const { return template_; }
  // The runtime it runs on (AvailableRuntimes()); fixed for its life, kept
  // by its pauses, forks and resumes.
  const std::string& runtime() const { return runtime_; }
  const std::string& access_token() const { return access_token_; }
  const std::string& run_dir() const { return run_dir_; }
  int vcpus() const { return vcpus_; }
  int memory_mib() const { return memory_mib_; }
  // The host-reachable address of the sandbox (veth, netns side).
  std::string netns_ip() const;
  // Makes guest TCP `port` reachable at netns_ip():port (idempotent; one
  // netlink batch for a new port, nothing for a known one). The agent port
  // (kAgentPort) is always reachable. Errors: FailedPrecondition when the
  // sandbox already has PortExposureLimits::max_ports ports (or no network);
  // ResourceExhausted when new ports come faster than the limit allows
  // (*retry_after_s, if given, says when one is allowed again); Internal
  // from nft.
  Status ExposePort(uint16_t port, double* retry_after_s = nullptr);
  size_t exposed_port_count() const;
  // The committed snapshot of a paused sandbox ("" when not paused).
  std::string snapshot_dir() const;

  // ---- what the API shows (one owner of sandbox state) ----
  SandboxAttributes attributes() const;
  // What the reaper (core/reaper.h) decides on, read at one moment.
  struct Clock {
    SandboxState state = SandboxState::kCreating;
    int64_t created_at_ms = 0;  // 0 while creating
    int64_t ends_at_ms = 0;     // 0: no TTL
    bool auto_pause = false;    // pause at TTL instead of ending
    bool auto_pause_memory = true;
    int64_t idle_timeout_ms = 0;   // 0: no idle sleep
    bool idle_keeps_processes = false;
    int64_t running_since_ms = 0;  // Unix ms it last became running (create, resume, rollback)
    std::string owner_team;        // whose lifetime cap applies (serve --team-max-lifetime)
  };
  Clock clock() const;
  int64_t created_at_ms() const;  // Unix ms it first ran (0 while creating)
  int64_t ends_at_ms() const;     // Unix ms its TTL ends (0: none)
  int disk_mib() const;           // its template's disk size (GET /sandboxes/{id} diskSizeMB)
  // "running" or "paused", as the API and the registry say it: paused from
  // the commit of its pause snapshot until it runs again.
  std::string_view api_state() const;
  // Handed out and not ended: the API lists it.
  bool visible() const;
  // Its registry row as it is now.
  SandboxRecord Record() const;
  // Its end, once decided (nullopt while it lives).
  std::optional<SandboxEnd> end() const;
  // Its lifecycle log (bounded: the newest kMaxLogEvents), oldest first.
  static constexpr size_t kMaxLogEvents = 1000;
  void AddLog(std::string level, std::string message);
  std::vector<SandboxLogEvent> Logs() const;

 private:
  friend class Manager;
  friend class Recovery;
  Sandbox() = default;

  // ---- the changes its owners make (Manager, Recovery) ----
  // sandbox.cc is the one file that writes the fields below; each of these
  // takes `mu_` itself where the field is guarded by it (never call one with
  // `mu_` held).
  //
  // A new Sandbox with `plan`'s identity and shape (nothing brought up):
  // `runtime` when the plan names none; `disk_mib`: its template's disk.
  static std::shared_ptr<Sandbox> Make(const BringUpPlan& plan, const std::string& run_dir,
                                       const std::string& runtime, const PortExposureLimits& port_limits,
                                       int disk_mib);
  // The identity a plan gives it (Make; a parked sandbox at hand-out):
  // token, env, attributes (recorded env apart), TTL, detach.
  void TakeIdentity(const BringUpPlan& plan);
  void AttachNetwork(std::unique_ptr<net::SandboxNetwork> network);
  void AttachEgress(egress::EgressService* egress);
  void AttachVm(std::unique_ptr<VmInstance> vm);
  void AttachAgent(std::unique_ptr<EnvdClient> agent);  // before it is shared, or under op_mu_
  void SetTimings(const CreateTimings& timings);
  // It runs for the first time: created now, its TTL counted from now.
  void StartClock();
  // It runs again after a resume: no pause snapshot any more.
  void ForgetPauseSnapshot();
  // Its committed pause snapshot (or the checkpoint it is paused on), and
  // whether it holds memory.
  void SetPauseSnapshot(const std::string& dir, bool memory);
  // A previous daemon's sandbox: its times, and the state it is taken over
  // in (running, paused), set without a transition.
  void SetAdopted(int64_t created_at_ms, int64_t ends_at_ms);
  void SetStateForAdoption(SandboxState state);
  void SetSharedSnapshot(const std::string& dir);
  // Decides its end (once): NotFound naming the end already decided.
  Status DecideEnd(SandboxOutcome outcome, std::string detail);
  // Its TTL's end (Unix ms); extend_only: only ever later. Returns the end in force.
  int64_t SetEndsAt(int64_t ends_at_ms, bool extend_only);
  // true: its destructor tears nothing down (not yet its own, or torn down).
  void SetReleased(bool released);
  // The daemon stops for a restart: its VMM and network are left running
  // for the next daemon, and nothing is torn down.
  void ReleaseForRestart();
  Status Transition(SandboxState to);
  Status TearDown();  // StopRuntime, then the run dir; collects every error
  // Pause/resume (snapshots.cc), and TearDown's first half: stops the VMM and
  // removes the network, keeping identity, token, run dir and snapshot;
  // collects every error.
  Status StopRuntime();
  // The pieces of TearDown and StopRuntime, also the bring-up's undos; each
  // is idempotent (nothing to do: OK).
  Status DestroyVm();
  Status DestroyNetwork();  // and forgets the exposed ports
  void DetachEgress();      // the egress service forgets the sandbox
  Status RemoveRunDir();

  std::string id_;
  std::string run_dir_;
  std::string template_;
  std::string runtime_;
  std::string access_token_;
  int vcpus_ = 1;
  int memory_mib_ = 512;
  std::set<uint16_t> exposed_ports_;  // guarded by mu_, as the two below
  PortExposureLimits port_limits_;
  double port_tokens_ = -1;  // < 0: full (set on first use)
  std::chrono::steady_clock::time_point port_tokens_at_;
  bool detach_ = false;
  std::map<std::string, std::string> env_vars_;
  // The fork snapshot whose disk this sandbox's disk is layered on (shared
  // with its siblings; deleted with the last of them). Empty otherwise.
  std::string shared_snapshot_;
  bool memory_snapshot_ = true;  // the pause snapshot has memory (false: reboot on resume)
  std::string snapshot_dir_;     // committed pause snapshot while paused
  // Serialises pause, resume and destroy of this sandbox.
  std::mutex op_mu_;
  bool released_ = false;
  egress::EgressService* egress_ = nullptr;  // the Manager's; outlives the sandbox
  mutable std::mutex mu_;
  SandboxState state_ = SandboxState::kCreating;
  // What the API shows; guarded by mu_.
  SandboxAttributes attrs_;
  std::map<std::string, std::string> recorded_env_;
  int64_t created_at_ms_ = 0;
  int64_t running_since_ms_ = 0;  // Clock::running_since_ms
  int64_t ends_at_ms_ = 0;
  int64_t timeout_ms_ = 0;  // the create's TTL, applied when it first runs
  int disk_mib_ = 0;
  std::deque<SandboxLogEvent> logs_;
  std::optional<SandboxEnd> end_;
  std::unique_ptr<net::SandboxNetwork> network_;
  std::unique_ptr<VmInstance> vm_;
  std::unique_ptr<EnvdClient> agent_;
  CreateTimings timings_;
};

}  // namespace airlock
