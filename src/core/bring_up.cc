// The one bring-up (bring_up.h): Manager::BringUp runs a plan's steps on a
// sandbox, Manager::StartSandbox makes a new sandbox from a plan.
#include "core/bring_up.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <thread>

#include "common/agent_port.h"
#include "common/checklist.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/agent_init.h"
#include "core/guest_seed.h"
#include "core/recovery.h"
#include "core/http_client.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"
#include "core/volumes.h"
#include "image/image.h"
#include "net/address_pool.h"
#include "net/sandbox_network.h"

namespace airlock {
namespace fs = std::filesystem;
namespace {

// The token the agent of the machine holds before /init: a snapshot's agent
// holds the one of the sandbox it was taken of; a booted agent none.
std::string TokenHeld(const BringUpPlan& plan) {
  switch (plan.source) {
    case MachineSource::kColdBoot:
    case MachineSource::kTemplateSnapshot:
    case MachineSource::kParked:
    case MachineSource::kDiskLayer:
      return "";
    case MachineSource::kNamedSnapshot:
      return plan.source_token;
    case MachineSource::kForkSnapshot:
      return plan.snapshot_memory ? plan.source_token : "";  // a booted child's agent holds none
    case MachineSource::kPausedSandbox:
      return plan.snapshot_memory ? plan.access_token : "";
    case MachineSource::kCheckpoint:
      return plan.access_token;
  }
  return "";
}

// What /init tells the agent. A guest restored from a snapshot shares the
// source's RNG state and hostname until told otherwise (docs/snapshots.md);
// a resumed one gets the clock and entropy, and after a cold resume the
// token and env a fresh agent does not have yet.
AgentInitRequest InitRequest(const BringUpPlan& plan, const std::string& ip) {
  switch (plan.source) {
    case MachineSource::kColdBoot:
    case MachineSource::kTemplateSnapshot:
    case MachineSource::kParked:
    case MachineSource::kDiskLayer:
      return {ip, "", plan.access_token, plan.env_vars, plan.id};
    case MachineSource::kNamedSnapshot:
    case MachineSource::kForkSnapshot: {
      // A fork without memory boots: its agent is fresh, as a cold boot's.
      if (plan.source == MachineSource::kForkSnapshot && !plan.snapshot_memory)
        return {ip, "", plan.access_token, plan.env_vars, plan.id};
      std::optional<std::map<std::string, std::string>> envs;
      if (!plan.env_vars.empty()) envs = plan.env_vars;
      return {ip, plan.source_token, plan.access_token, envs, plan.id};
    }
    case MachineSource::kCheckpoint:
      // The sandbox's own memory: clock and entropy only.
      return {ip, plan.access_token, std::nullopt, std::nullopt, ""};
    case MachineSource::kPausedSandbox: {
      AgentInitRequest r{ip, plan.access_token, std::nullopt, std::nullopt, ""};
      if (!plan.snapshot_memory) {
        r.access_token = plan.access_token;
        r.env_vars = plan.env_vars;
      }
      return r;
    }
  }
  return {ip, "", std::nullopt, std::nullopt, ""};
}

// The seed before "agent ready" probes /health (guest_seed.h). An agent that
// does not answer on its console within kSeedAnswerTimeout (an agent older
// than the console seed, in a snapshot made before it) is warned about and
// brought up anyway: /init reseeds it, after its first TCP handshake.
constexpr auto kSeedAnswerTimeout = std::chrono::seconds(10);

Status SeedBeforeNetwork(VmInstance& vm, const BringUpPlan& plan, bool booted,
                         std::chrono::steady_clock::time_point ready_deadline) {
  GuestSeedOptions o;
  o.booted = booted;
  // A booting kernel takes its time before the agent runs; the answer then does not.
  o.ready_deadline = ready_deadline;
  o.answer_timeout = kSeedAnswerTimeout;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = SeedGuestBeforeNetwork(vm, o);
  LOG_DEBUG("sandbox={} console seed: {} ms={:.1f}", plan.id, st.ToString(), MsSince(t0));
  if (st.code() == StatusCode::kUnimplemented) return OkStatus();  // a runtime without console input
  if (st.code() == StatusCode::kDeadlineExceeded && vm.alive()) {
    if (!booted || vm.ConsoleContains(kAgentReadyMarker)) {  // else: a boot that never got to the agent
      LOG_WARN(
          "sandbox={} the agent did not answer the entropy seed on its console in {} s (an older agent?): "
          "its TCP secrets may be drawn before /init reseeds it",
          plan.id, std::chrono::duration_cast<std::chrono::seconds>(kSeedAnswerTimeout).count());
      return OkStatus();
    }
  }
  return st;
}

}  // namespace

std::string_view MachineSourceName(MachineSource s) {
  switch (s) {
    case MachineSource::kColdBoot:
      return "cold boot";
    case MachineSource::kTemplateSnapshot:
      return "template snapshot";
    case MachineSource::kNamedSnapshot:
      return "named snapshot";
    case MachineSource::kForkSnapshot:
      return "fork snapshot";
    case MachineSource::kPausedSandbox:
      return "paused sandbox";
    case MachineSource::kParked:
      return "warm pool";
    case MachineSource::kCheckpoint:
      return "checkpoint";
    case MachineSource::kDiskLayer:
      return "disk layer";
  }
  return "unknown";
}

VmStartRequest VmStartRequestFor(const std::string& id, const std::string& run_dir, int vcpus, int memory_mib,
                                 const net::SandboxNetwork& network, bool detach) {
  VmStartRequest req;
  req.sandbox_id = id;
  req.run_dir = run_dir + "/vm";
  req.vcpus = vcpus;
  req.memory_mib = memory_mib;
  req.netns_fd = network.netns_fd();
  req.tap = network.tap_name();
  req.guest_netns = network.guest_netns_path();  // GuestLink::kVethNetns only
  req.netns_ip = network.netns_ip();
  req.sandbox_netns = network.netns_path();
  req.guest_cidr = net::SandboxNetwork::guest_cidr();
  req.guest_gateway = net::SandboxNetwork::gateway_ip();
  req.detach = detach;
  return req;
}

std::shared_ptr<Sandbox> Manager::SandboxFor(const BringUpPlan& plan) const {
  // The template's disk size; the plan's image when it has one (no second look-up).
  int disk_mib = 0;
  std::string rootfs = plan.image.rootfs;
  if (rootfs.empty()) {
    if (auto img = image::FindImage(config_.state_dir, plan.template_name); img.ok()) rootfs = img->rootfs;
  }
  if (!rootfs.empty()) {
    std::error_code ec;
    auto size = fs::file_size(rootfs, ec);
    if (!ec) disk_mib = static_cast<int>(size >> 20);
  }
  return Sandbox::Make(plan, config_.state_dir + "/run/" + plan.id, config_.runtime, config_.port_exposure, disk_mib);
}

BringUpPlan Manager::PlanOf(const Sandbox& sb) const {
  BringUpPlan plan;
  plan.id = sb.id_;
  plan.access_token = sb.access_token_;
  plan.template_name = sb.template_;
  plan.runtime = sb.runtime_;
  plan.owner = config_.owner;
  plan.vcpus = sb.vcpus_;
  plan.memory_mib = sb.memory_mib_;
  plan.egress_policy = LoadEgressPolicy(sb.run_dir_);
  plan.env_vars = sb.env_vars_;
  plan.detach = sb.detach_;
  return plan;
}

StatusOr<std::shared_ptr<Sandbox>> Manager::StartSandbox(BringUpPlan plan,
                                                         std::chrono::steady_clock::time_point requested_at,
                                                         std::shared_ptr<Sandbox> parked) {
  if (parked) plan.id = parked->id_;
  if (plan.id.empty()) plan.id = NewSandboxId();
  if (plan.access_token.empty()) plan.access_token = RandomHex(32);
  if (plan.what.empty()) plan.what = "sandbox " + plan.id;
  if (plan.runtime.empty()) plan.runtime = config_.runtime;
  plan.owner = config_.owner;
  std::shared_ptr<Sandbox> sb = parked;
  if (sb) {
    // The parked machine takes the create's identity (its own id stays).
    sb->TakeIdentity(plan);
  } else {
    sb = SandboxFor(plan);
  }
  {
    // Listed while it comes up: a fork checkpoint or named snapshot counts it
    // as a user (ReleaseSharedSnapshot, DeleteNamedSnapshot).
    std::lock_guard<std::mutex> l(mu_);
    sandboxes_[sb->id_] = sb;
  }
  CreateTimings timings;
  Status st = BringUp(*sb, plan, &timings);
  timings.total_ms = MsSince(requested_at);
  sb->SetTimings(timings);
  if (!st.ok()) {
    // Everything the steps made is undone; Destroy forgets the sandbox
    // (failed → killing → killed) and releases its shared snapshot.
    (void)sb->Transition(SandboxState::kFailed);
    (void)End(sb->id_, SandboxOutcome::kCreateFailed, st.message());
    (void)Destroy(sb->id_);
    return st;
  }
  Persist(*sb, "running");
  sb->AddLog("info", fmt::format("sandbox running in {:.0f} ms ({})", timings.total_ms,
                                 timings.from_snapshot ? "restored from a snapshot" : "cold boot"));
  return sb;
}

Status Manager::BringUp(Sandbox& sb, const BringUpPlan& plan, CreateTimings* timings) {
  const auto t0 = std::chrono::steady_clock::now();
  // A paused sandbox or a rollback: the sandbox's own run dir (kept).
  const bool rollback = plan.source == MachineSource::kCheckpoint;
  const bool paused = plan.source == MachineSource::kPausedSandbox || rollback;
  Checklist steps;
  std::vector<StepTiming> done;
  auto step = [&](const char* name, const Checklist::Step& run, Checklist::Step undo) -> Status {
    const auto t = std::chrono::steady_clock::now();
    Status st = steps.Do(name, run, std::move(undo));
    if (st.ok()) {
      done.push_back({name, MsSince(t)});
      LOG_DEBUG("sandbox={} step={} ms={:.1f}", plan.id, name, done.back().ms);
    }
    return st;
  };
  // The runtime the sandbox was made on: its guest link and its VMM.
  auto opened = RuntimeNamed(sb.runtime_);
  if (!opened.ok()) return opened.status().WithContext(plan.what);
  Runtime& runtime = **opened;
  VmInstance* vm = nullptr;  // the VMM, once the vmm step made it (owned by sb.vm_)
  bool from_snapshot = false;
  bool booted = false;  // the vmm step booted a kernel (no memory restored)

  auto run_dir = [&]() -> Status {
    if (paused) {
      // The paused sandbox's run dir (egress.json) stays; its old VMM's goes.
      std::error_code ec;
      fs::create_directories(sb.run_dir_, ec);
      WriteRunDirOwner(sb.run_dir_, plan.owner);
      fs::remove_all(sb.run_dir_ + "/vm", ec);
      return OkStatus();
    }
    if (::mkdir(sb.run_dir_.c_str(), 0700) != 0) return ErrnoError("mkdir " + sb.run_dir_);
    WriteRunDirOwner(sb.run_dir_, plan.owner);
    return OkStatus();
  };
  auto network = [&]() -> Status {
    net::NetworkOptions options;
    options.guest_link = runtime.guest_link();
    options.max_exposed_ports = config_.port_exposure.max_ports;
    if (egress_) options.egress = EgressPorts(*egress_);
    auto n = net::SandboxNetwork::Create(plan.id, *pool_, options);
    if (paused && !n.ok() && n.status().code() == StatusCode::kAlreadyExists) {
      // A daemon killed -9 after committing the pause but before stopping the
      // guest leaves its VMM and network behind; the snapshot is complete, so
      // they go, and the resume starts afresh.
      LOG_WARN("sandbox={} resume: a stale guest of the paused sandbox is still up ({}): reaping it", plan.id,
               n.status().message());
      ReapStaleGuest(plan.id, sb.run_dir_, -1, *pool_);
      n = net::SandboxNetwork::Create(plan.id, *pool_, options);
    }
    if (!n.ok()) return n.status();
    sb.AttachNetwork(std::move(n).value());
    return OkStatus();
  };
  auto egress = [&]() -> Status {
    RETURN_IF_ERROR(
        ApplyEgressPolicy(*sb.network_, *egress_, plan.id, plan.egress_policy, sb.run_dir_, true, plan.egress_limits));
    sb.AttachEgress(egress_.get());
    return OkStatus();
  };
  // Volumes (core/volumes.h): a guest that mounts them over NFS (a tap
  // runtime, qemu) gets its NFS server in its netns before its VMM runs, so
  // a restored guest's mounts find it; a gVisor guest gets bind mounts.
  const std::vector<SandboxVolumeMount> volume_mounts = sb.attributes().volume_mounts;
  const bool nfs_volumes = runtime.guest_link() == GuestLink::kTap;
  auto volumes = [&]() -> Status {
    // Never a plain host directory in a volume's place (one deleted meanwhile).
    for (const auto& m : volume_mounts) {
      if (!IsVolumeMounted(m.host_dir)) return FailedPrecondition("volume " + m.name + " is not mounted on the host");
    }
    if (volume_mounts.empty() || !nfs_volumes) return OkStatus();
    std::vector<VolumeExport> exports;
    for (const auto& m : volume_mounts) exports.push_back({m.volume_id, m.host_dir});
    // A rollback's guest comes back with its TCP state of the checkpoint,
    // which the running server's connection has moved past (the two would
    // never agree again): a new server resets it, and the guest reconnects.
    if (rollback) RETURN_IF_ERROR(StopVolumeServer(sb.run_dir_, sb.network_->netns_fd()));
    return StartVolumeServer(sb.run_dir_, sb.network_->netns_fd(), exports, config_.state_dir + "/nfs-programs");
  };
  auto vmm = [&]() -> Status {
    VmStartRequest req =
        VmStartRequestFor(plan.id, sb.run_dir_, plan.vcpus, plan.memory_mib, *sb.network_, plan.detach);
    if (!nfs_volumes) {
      for (const auto& m : volume_mounts) req.host_mounts.push_back({m.host_dir, m.path});  // checked by "volumes"
    }
    if (plan.source == MachineSource::kColdBoot || plan.source == MachineSource::kTemplateSnapshot) {
      req.kernel = plan.image.kernel;
      req.initrd = plan.image.initrd;
      req.rootfs = plan.image.rootfs;
    }
    StatusOr<std::unique_ptr<VmInstance>> v = Unavailable("no VMM");
    switch (plan.source) {
      case MachineSource::kColdBoot:
        v = runtime.Start(req);
        booted = true;
        break;
      case MachineSource::kTemplateSnapshot:
        // A restore takes ~0.3-0.7 s under TCG; a failed one falls back to the boot.
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kShared);
        if (v.ok()) {
          from_snapshot = true;
        } else {
          LOG_WARN("sandbox={} restore of template snapshot failed, cold boot: {}", plan.id, v.status().message());
          v = runtime.Start(req);
          booted = true;
        }
        break;
      case MachineSource::kNamedSnapshot:
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kShared);
        from_snapshot = true;
        break;
      case MachineSource::kForkSnapshot:
        // Without memory (ForkOptions::keep_memory false) the kernel boots
        // on a new overlay of the fork's disk.
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kShared, plan.snapshot_memory);
        from_snapshot = plan.snapshot_memory;
        booted = !plan.snapshot_memory;
        break;
      case MachineSource::kPausedSandbox:
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kPrivateCopy, plan.snapshot_memory);
        booted = !plan.snapshot_memory;
        break;
      case MachineSource::kParked:
        return Internal("a parked sandbox has its VMM already");
      case MachineSource::kCheckpoint:
        // A private copy: the checkpoint stays deletable, and rollbacks never
        // lengthen the disk's backing chain.
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kPrivateCopy);
        from_snapshot = true;
        break;
      case MachineSource::kDiskLayer:
        v = runtime.Restore(req, plan.snapshot_dir, SnapshotDisk::kPrivateCopy, /*memory=*/false);
        booted = true;
        break;
    }
    if (!v.ok()) return v.status();
    vm = v->get();
    sb.AttachVm(std::move(v).value());
    return OkStatus();
  };
  // The VMM owns the lease from now on: it outlives a daemon killed with -9,
  // and while it lives no other airlock process reclaims the sandbox's network.
  auto lease = [&]() -> Status { return pool_->Adopt(sb.network_->lease(), vm->pid()); };
  auto agent_ready = [&]() -> Status {
    // Fresh entropy over the console before the first TCP packet to the guest
    // (guest_seed.h): the guest's TCP secrets are drawn after this reseed.
    const auto deadline = std::chrono::steady_clock::now() + plan.ready_timeout;
    RETURN_IF_ERROR(SeedBeforeNetwork(*vm, plan, booted, deadline));
    sb.AttachAgent(std::make_unique<EnvdClient>(AgentEndpoint{sb.network_->netns_ip(), kAgentPort}, TokenHeld(plan)));
    Status ready = sb.agent_->WaitReady(deadline, [vm]() -> Status {
      if (!vm->alive()) return Unavailable("the VMM exited before its agent was ready; console:\n" + vm->ConsoleTail());
      return OkStatus();
    });
    if (ready.code() == StatusCode::kDeadlineExceeded) {
      if (std::string tail = vm->ConsoleTail(); !tail.empty()) {
        ready = Status(ready.code(), ready.message() + "; console:\n" + tail);
      }
    }
    RETURN_IF_ERROR(ready);
    // A cold boot of a template with services (the code interpreter): they
    // are up before the sandbox is handed out, as in one restored from the
    // template snapshot, where they were running when it was taken.
    if (booted) {
      if (auto marker = image::ReadinessOf(plan.template_name, config_.state_dir).console_marker; !marker.empty()) {
        while (!vm->ConsoleContains(marker)) {
          if (!vm->alive()) return Unavailable("the VMM exited before \"" + marker + "\"; console:\n" + vm->ConsoleTail());
          if (std::chrono::steady_clock::now() > deadline) {
            return DeadlineExceeded("no \"" + marker + "\" on the console in time; console:\n" + vm->ConsoleTail());
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
      }
    }
    return OkStatus();
  };
  // From /init on, the agent wants the sandbox's token.
  auto agent_init = [&]() -> Status {
    const std::string ip = sb.network_->netns_ip();
    AgentInitRequest init = InitRequest(plan, ip);
    // Every /init of an NFS guest names its whole set of mounts (none
    // included: a snapshot may carry another sandbox's).
    if (nfs_volumes) init.volume_mounts = volume_mounts;
    RETURN_IF_ERROR(PostAgentInit(init));
    sb.AttachAgent(std::make_unique<EnvdClient>(AgentEndpoint{ip, kAgentPort}, plan.access_token));
    // A guest whose files live in its memory, booted from a disk-only
    // snapshot (a pause or fork without memory): the files it exported then
    // go back before the sandbox is anyone's.
    const bool disk_only = booted && !plan.snapshot_memory &&
                           (plan.source == MachineSource::kPausedSandbox || plan.source == MachineSource::kForkSnapshot);
    if (disk_only && runtime.guest_files_in_memory()) RETURN_IF_ERROR(ImportGuestRoot(sb, plan.snapshot_dir));
    return OkStatus();
  };
  auto running = [&]() -> Status {
    RETURN_IF_ERROR(sb.Transition(SandboxState::kRunning));
    if (rollback) {
      // Same sandbox, same TTL.
    } else if (paused) {
      sb.ForgetPauseSnapshot();
    } else {
      sb.StartClock();  // its TTL counts from here
    }
    return OkStatus();
  };

  // A parked sandbox (warm pool) is up to "agent ready": the create's policy
  // replaces the pool's deny-all, then /init gives it its identity.
  auto parked_egress = [&]() -> Status {
    return ApplyEgressPolicy(*sb.network_, *egress_, plan.id, plan.egress_policy, sb.run_dir_, false,
                             plan.egress_limits);
  };
  if (plan.source == MachineSource::kParked) {
    Status st = [&]() -> Status {
      if (!sb.vm_ || !sb.vm_->alive()) return Unavailable("the parked VMM is gone");
      if (egress_ && sb.egress_) RETURN_IF_ERROR(step(kStepEgress, parked_egress, nullptr));
      RETURN_IF_ERROR(step(kStepVolumes, volumes, [&sb] { return StopVolumeServer(sb.run_dir_); }));
      RETURN_IF_ERROR(step(kStepAgentInit, agent_init, nullptr));
      if (plan.handover)
        RETURN_IF_ERROR(step(
            kStepHandover, [&] { return plan.handover(sb); }, nullptr));
      return step(kStepRunning, running, nullptr);
    }();
    timings->steps = done;
    timings->from_snapshot = true;
    for (const auto& s : done) {
      if (s.step == kStepAgentInit) timings->agent_ready_ms += s.ms;
    }
    timings->total_ms = MsSince(t0);
    if (!st.ok()) {
      st = st.WithContext(plan.what);
      LOG_WARN("sandbox={} hand-out from the warm pool failed: {}", plan.id, st.message());
    }
    return st;
  }

  Status st = [&]() -> Status {
    // A paused sandbox's run dir is not the bring-up's to remove.
    Checklist::Step remove_run_dir;
    if (!paused) remove_run_dir = [&sb] { return sb.RemoveRunDir(); };
    RETURN_IF_ERROR(step(kStepRunDir, run_dir, remove_run_dir));
    // A rollback keeps the network (and its egress) of the sandbox.
    if (!rollback) RETURN_IF_ERROR(step(kStepNetwork, network, [&sb] { return sb.DestroyNetwork(); }));
    if (egress_ && !rollback) {
      RETURN_IF_ERROR(step(kStepEgress, egress, [&sb] {
        sb.DetachEgress();
        return OkStatus();
      }));
    }
    // A rollback keeps the server of the sandbox's network (it runs on).
    RETURN_IF_ERROR(step(kStepVolumes, volumes, rollback ? Checklist::Step() : Checklist::Step([&sb] {
      return StopVolumeServer(sb.run_dir_);
    })));
    RETURN_IF_ERROR(step(kStepVmm, vmm, [&sb] { return sb.DestroyVm(); }));
    RETURN_IF_ERROR(step(kStepLease, lease, nullptr));
    // Undo: whoever waits on the agent is woken before the netns goes.
    RETURN_IF_ERROR(step(kStepAgentReady, agent_ready, [&sb] {
      if (sb.agent_) sb.agent_->CancelAll();
      return OkStatus();
    }));
    if (plan.park) {
      return OkStatus();  // parked: what is up is the Sandbox's to tear down (warm_pool.h)
    }
    RETURN_IF_ERROR(step(kStepAgentInit, agent_init, nullptr));
    if (plan.handover)
      RETURN_IF_ERROR(step(
          kStepHandover, [&] { return plan.handover(sb); }, nullptr));
    return step(kStepRunning, running, nullptr);
  }();

  timings->steps = done;
  timings->from_snapshot = from_snapshot;
  for (const auto& s : done) {
    if (s.step == kStepNetwork) timings->network_ms = s.ms;
    if (s.step == kStepVmm) timings->vmm_start_ms = s.ms;
    if (s.step == kStepAgentReady || s.step == kStepAgentInit) timings->agent_ready_ms += s.ms;
  }
  timings->total_ms = MsSince(t0);
  if (!st.ok()) {
    st = st.WithContext(plan.what);
    LOG_WARN("sandbox={} bring-up from {} failed: {}", plan.id, MachineSourceName(plan.source), st.message());
    return st;
  }
  std::string summary;
  for (const auto& s : done) summary += fmt::format("{}{}:{:.1f}", summary.empty() ? "" : ", ", s.step, s.ms);
  LOG_INFO("sandbox={} running from=\"{}\" steps_ms=\"{}\" total_ms={:.1f} ({})", plan.id,
           MachineSourceName(plan.source), summary, timings->total_ms, plan.what);
  return OkStatus();
}

// ---- The warm pool's host (core/warm_pool.h): a parked sandbox is this bring-up ----

StatusOr<PoolSource> Manager::PoolSourceFor(const PoolShape& shape) const {
  PoolSource source;
  ASSIGN_OR_RETURN(source.image, image::FindImage(config_.state_dir, shape.template_name));
  ASSIGN_OR_RETURN(source.snapshot_dir,
                   template_snapshots_->Find(source.image, shape.vcpus, shape.memory_mib, shape.runtime));
  return source;
}

StatusOr<std::shared_ptr<Sandbox>> Manager::Park(const PoolShape& shape, const PoolSource& source) {
  const std::string& snapshot_dir = source.snapshot_dir;
  BringUpPlan plan;
  plan.id = NewSandboxId();
  plan.template_name = shape.template_name;
  plan.runtime = shape.runtime;
  plan.vcpus = shape.vcpus;
  plan.memory_mib = shape.memory_mib;
  plan.detach = true;
  plan.owner = config_.owner;
  plan.source = MachineSource::kTemplateSnapshot;
  plan.image = source.image;
  plan.snapshot_dir = snapshot_dir;
  plan.park = true;
  plan.ready_timeout = std::chrono::seconds(60);
  plan.what = "warm pool " + shape.template_name + " (" + shape.runtime + ")";
  std::shared_ptr<Sandbox> sb = SandboxFor(plan);
  CreateTimings timings;
  RETURN_IF_ERROR(BringUp(*sb, plan, &timings));  // a failed step undid the ones before it
  if (!timings.from_snapshot) {
    // The restore failed and it booted instead: not what a pool is for.
    (void)sb->TearDown();
    sb->SetReleased(true);
    return FailedPrecondition("warm pool: the template snapshot " + snapshot_dir + " did not restore");
  }
  // Past its first steps: the guest runs what a create's first command runs
  // (a login shell as the default user, as the SDK's commands.run does), so
  // its kernel, the agent's exec path and, under TCG, QEMU's translation of
  // that code are warm when the user's first command arrives. It leaves no
  // file or process (the e2e pool test looks for both).
  ExecRequest warm;
  warm.cmd = "/bin/bash";
  warm.args = {"-l", "-c", "true"};
  warm.timeout = std::chrono::seconds(30);
  if (auto r = sb->agent_->Exec(warm, {}); !r.ok() || r->exit_code != 0)
    LOG_WARN("warm pool: sandbox={} warm-up command: {}", sb->id(), r.ok() ? r->status : r.status().message());
  // The same for a first runCode: the code interpreter's kernel runs one
  // silent execution (POST /airlock/warm-up, src/interpreter), leaving nothing
  // in the user's namespace; the claim's /init then gives it the sandbox's
  // env vars and seeds on a translated path.
  if (image::TemplateHasInterpreter(shape.template_name)) {
    Status st = sb->ExposePort(image::kInterpreterPort);
    if (st.ok()) {
      HttpCall call;
      call.host = sb->netns_ip();
      call.port = image::kInterpreterPort;
      call.method = "POST";
      call.target = "/airlock/warm-up";
      call.timeout = std::chrono::seconds(60);
      call.max_body = 4096;
      auto r = HttpDo(call);
      if (!r.ok()) st = r.status();
      else if (r->status != 204) st = Internal("HTTP " + std::to_string(r->status) + ": " + r->body);
    }
    if (!st.ok()) LOG_WARN("warm pool: sandbox={} code interpreter warm-up: {}", sb->id(), st.message());
  }
  sb->SetTimings(timings);
  return sb;
}

void Manager::Discard(Sandbox& sb) {
  if (Status st = sb.TearDown(); !st.ok()) LOG_WARN("warm pool: sandbox={} teardown: {}", sb.id(), st.message());
  sb.SetReleased(true);  // torn down already
}

}  // namespace airlock
