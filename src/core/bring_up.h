// One bring-up: every way a sandbox comes up (Manager::Create from a cold
// boot or the template's snapshot, a start from a named or fork snapshot, a
// resume of a paused sandbox) is a BringUpPlan run by Manager::BringUp as the
// same named steps, each with its undo (common/checklist.h):
//
//   run dir ─▶ network ─▶ egress ─▶ volumes ─▶ vmm ─▶ lease ─▶ agent ready ─▶ agent init ─▶ [handover] ─▶ running
//
//   run dir      <state_dir>/run/<id> (0700) and its owner file; a paused
//                sandbox keeps its run dir (only its old vm/ goes)
//   network      netns, veth, tap, nftables, address lease (net::SandboxNetwork)
//   egress       the policy on nft + resolver/proxy (skipped when egress is off)
//   volumes      the NFS server of its volumes in its netns (qemu; none
//                without volumes; core/volumes.h)
//   vmm          the VMM started (cold boot) or restored (a snapshot)
//   lease        the address lease handed to the VMM's pid (it outlives a daemon)
//   agent ready  the agent answers /health (within ready_timeout)
//   agent init   POST /init: token, env, hostname, clock, entropy
//   handover     the caller's own step (plan.handover; the daemon: CA, owner)
//   running      the state machine's transition; the TTL starts, the
//                registry row is written
//
// A rollback (MachineSource::kCheckpoint) keeps the sandbox's network: it
// runs run dir, vmm, lease, agent ready, agent init, running.
//
// A failing step undoes the ones before it, newest first, and its error reads
// "<what>: <step>: <cause>" (plan.what gives the first part). The step names
// are what CreateTimings::steps, `airlock run --timings` and the logs use.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/sandbox_attributes.h"
#include "egress/egress_service.h"  // EgressLimits
#include "egress/policy.h"
#include "image/image.h"

namespace airlock {

class Sandbox;

// The steps, in the order they run.
inline constexpr char kStepRunDir[] = "run dir";
inline constexpr char kStepNetwork[] = "network";
inline constexpr char kStepEgress[] = "egress";
inline constexpr char kStepVolumes[] = "volumes";  // the NFS server of its volumes (core/volumes.h)
inline constexpr char kStepVmm[] = "vmm";
inline constexpr char kStepLease[] = "lease";
inline constexpr char kStepAgentReady[] = "agent ready";
inline constexpr char kStepAgentInit[] = "agent init";
inline constexpr char kStepHandover[] = "handover";  // only with a BringUpPlan::handover
inline constexpr char kStepRunning[] = "running";

// Where the machine comes from.
enum class MachineSource {
  kColdBoot,          // the image's kernel boots on a new overlay of its rootfs
  kTemplateSnapshot,  // the template's snapshot, restored (a cold boot when the restore fails)
  kNamedSnapshot,     // a named snapshot (its agent holds the source's token)
  kForkSnapshot,      // a fork checkpoint (its agent holds the parent's token)
  kPausedSandbox,     // the sandbox's own pause snapshot (same id, token, run dir)
  kParked,            // a sandbox of the warm pool (warm_pool.h): run dir, network, VMM and
                      // agent are up already; egress gets the create's policy, then agent init
  // One of the sandbox's own checkpoints (rollback, core/checkpoints.cc):
  // same id, token, run dir, and its network kept (the steps "network" and
  // "egress" are skipped; the old VMM is gone, the netns, IP and policy stay).
  kCheckpoint,
  // A disk-only snapshot (a custom template's build layer, disk_layers.cc):
  // the image's kernel boots on a private copy of its disk.
  kDiskLayer,
};
std::string_view MachineSourceName(MachineSource s);

struct BringUpPlan {
  // Identity. Empty id: a new one (NewSandboxId); empty access_token: a new
  // random one (64 hex chars). owner: written into the run dir's owner file
  // (ManagerConfig::owner; empty for an in-process run).
  std::string id;
  std::string access_token;
  std::string template_name;
  std::string owner;
  // The runtime the sandbox runs on (AvailableRuntimes(); "" = the
  // manager's default): its network's guest link, its VMM, its snapshots.
  std::string runtime;
  // Shape.
  int vcpus = 1;
  int memory_mib = 512;
  // What the sandbox may reach (default: nothing); limits: nullopt = the
  // egress service's defaults.
  egress::EgressPolicy egress_policy;
  std::optional<egress::EgressLimits> egress_limits;
  // Sandbox-wide environment of every process (agent /init envVars).
  std::map<std::string, std::string> env_vars;
  // true: the VMM survives this process (daemon).
  bool detach = false;
  // Bound on "agent ready".
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(120)};

  // Where the machine comes from.
  MachineSource source = MachineSource::kColdBoot;
  image::GuestImage image;   // kColdBoot, kTemplateSnapshot (its fallback boot)
  std::string snapshot_dir;  // every source but kColdBoot
  // The token the restored agent holds until /init rotates it (named and
  // fork snapshots); empty: none.
  std::string source_token;
  // kPausedSandbox, kForkSnapshot: false when the pause (or fork) kept the
  // disk only (the guest boots on it, and a fresh agent gets the token and
  // env in /init).
  bool snapshot_memory = true;
  // The snapshot the new sandbox's disk is layered on and shares with its
  // siblings (named and fork snapshots; Sandbox::shared_snapshot_).
  std::string shared_snapshot;
  // What the API shows of a new sandbox, and its TTL from when it runs (0:
  // none). A resume keeps the Sandbox's own.
  SandboxAttributes attributes;
  std::chrono::milliseconds timeout{0};
  // true: stop after "agent ready" (a sandbox parked in the warm pool; its
  // agent holds no token and has had no /init).
  bool park = false;
  // The caller's last step before "running" (the daemon: CA, owner), on
  // the sandbox as brought up so far. Empty: none.
  std::function<Status(Sandbox&)> handover;
  // Context of errors and logs: "sandbox <id>", "fork child 0 of <id>",
  // "resume <id>".
  std::string what;
};

// The time one step took, in milliseconds.
struct StepTiming {
  std::string step;
  double ms = 0;
};

}  // namespace airlock
