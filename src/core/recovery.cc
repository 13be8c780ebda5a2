// Recovery (recovery.h): a starting daemon takes over, completes or cleans up
// what the previous one left.
#include "core/recovery.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "common/agent_port.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/adopted_vm.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"
#include "core/snapshot_dirs.h"
#include "net/address_pool.h"
#include "net/names.h"
#include "net/sandbox_network.h"
#include "runtime/registry.h"

namespace airlock {
namespace fs = std::filesystem;

// Kills every process whose command line names `run_dir` (a VMM left by a
// daemon killed -9), then tears down the sandbox's network and its lease.
void ReapStaleGuest(const std::string& id, const std::string& run_dir, pid_t owner_pid, net::AddressPool& pool) {
  std::vector<pid_t> vmms;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* p = ::readdir(d)) {
      pid_t pid = static_cast<pid_t>(std::atoi(p->d_name));
      if (pid > 0 && pid != ::getpid() && ProcessMatches(pid, run_dir + "/")) vmms.push_back(pid);
    }
    ::closedir(d);
  }
  for (pid_t pid : vmms) {
    LOG_WARN("sandbox={} orphaned VMM pid={} (owner {} gone, not in the registry): killing it", id, pid, owner_pid);
    if (Status st = AdoptedVm(id, pid, run_dir).Destroy(); !st.ok()) {
      LOG_WARN("sandbox={} orphan VMM: {}", id, st.message());
    }
  }
  if (net::ValidateSandboxId(id).ok()) {
    if (auto lease = pool.Find(id); lease.ok() && *lease) {
      if (Status st = net::TeardownByName(id); !st.ok()) {
        LOG_WARN("sandbox={} orphan network: {}", id, st.message());
      } else {
        (void)pool.Release(**lease);
      }
    }
  }
}

void Recovery::Run(const std::vector<AdoptRequest>& adopt) {
  // Rollbacks a killed daemon left in flight (checkpoints.cc): completed
  // below, never taken for dead sandboxes.
  std::map<std::string, RollbackIntent> intents;
  std::vector<std::pair<std::string, std::string>> redo;  // (sandbox, checkpoint)
  if (m_.config_.registry) {
    auto listed = m_.config_.registry->ListRollbackIntents();
    if (!listed.ok()) LOG_WARN("registry: {}", listed.status().message());
    for (auto& i : listed.ok() ? *listed : std::vector<RollbackIntent>{}) intents[i.sandbox_id] = i;
  }
  // A previous daemon's sandboxes: take over the live ones first, so the
  // cleanup below sees us as the owner of their leases and run dirs.
  for (const auto& r : adopt) {
    const bool paused = r.record.state == "paused";
    StatusOr<std::shared_ptr<Sandbox>> sb = Unavailable("not adopted");
    if (auto it = intents.find(r.record.id); it != intents.end()) {
      bool needs_redo = false;
      sb = RecoverRollback(r, it->second, &needs_redo);
      if (sb.ok() && needs_redo) redo.emplace_back(r.record.id, it->second.checkpoint_id);
      intents.erase(it);
    } else {
      sb = paused ? AdoptPausedOne(r) : AdoptOne(r);
      if (!sb.ok() && !paused && RecoverPaused(r)) {
        // Killed after a pause committed but before the registry said so.
        sb = AdoptPausedOne(r);
      }
    }
    if (!sb.ok()) {
      Forget(r, sb.status());
      continue;
    }
    (*sb)->SetSharedSnapshot(m_.snapshot_dirs_->SharedSnapshotOf(r.record.id));
    {
      std::lock_guard<std::mutex> l(m_.mu_);
      m_.sandboxes_[r.record.id] = *sb;
    }
    (*sb)->AddLog("info", "sandbox adopted by a restarted daemon");
    // Its row as it is now (a pause that committed as the daemon died; a new netns address).
    m_.Persist(**sb, (*sb)->api_state());
    LOG_INFO("sandbox={} adopted vmm_pid={}", r.record.id, r.record.vmm_pid);
  }
  std::set<std::string> own_ids;
  for (const auto& r : adopt) own_ids.insert(r.record.id);
  m_.snapshot_dirs_->SweepUncommitted(own_ids);
  m_.template_snapshots_->Sweep(m_.snapshot_dirs_->LayeredOn());
  std::set<std::string> adopted;
  for (const auto& sb : m_.List()) adopted.insert(sb->id());
  CleanupOrphans(adopted);
  // After CleanupOrphans: fork children a dead daemon never registered are
  // gone, and so is the run dir of a checkpoint's sandbox that is gone.
  m_.snapshot_dirs_->SweepForks();
  m_.snapshot_dirs_->SweepCheckpoints(adopted);
  // Intents of sandboxes the registry no longer has: nothing to complete.
  for (const auto& [id, _] : intents) (void)m_.config_.registry->ClearRollbackIntent(id);
  for (const auto& [id, checkpoint] : redo) {
    if (auto sb = m_.Get(id)) (void)RedoRollback(sb, checkpoint);
  }
}

void Recovery::Forget(const AdoptRequest& r, const Status& why) {
  if (m_.config_.registry) (void)m_.config_.registry->DeleteSandbox(r.record.id);
  LOG_WARN("sandbox={} not adopted, cleaning up: {}", r.record.id, why.message());
  std::string run_dir = m_.config_.state_dir + "/run/" + r.record.id;
  AdoptedVm(r.record.id, r.record.vmm_pid, run_dir).Destroy().ok();  // kills it only if the pid is still that VMM
  // A VMM the registry does not know (a daemon killed mid-rollback started
  // it) names the run dir too: it goes before the run dir does.
  ReapStaleGuest(r.record.id, run_dir, r.record.vmm_pid, *m_.pool_);
  if (auto st = net::TeardownByName(r.record.id); !st.ok())
    LOG_WARN("sandbox={} network teardown: {}", r.record.id, st.message());
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  fs::remove_all(m_.snapshot_dirs_->paused() + "/" + r.record.id, ec);
}

std::shared_ptr<Sandbox> Recovery::AdoptedSandbox(const AdoptRequest& r) {
  // The identity and shape of a plan, without its bring-up (the caller
  // attaches what is still running).
  BringUpPlan plan;
  plan.id = r.record.id;
  plan.template_name = r.record.template_id;
  // Rows written before runtimes were recorded are qemu's (registry v6).
  plan.runtime = r.record.runtime.empty() ? std::string(kDefaultRuntime) : r.record.runtime;
  plan.access_token = r.record.access_token;
  plan.vcpus = r.record.vcpus;
  plan.memory_mib = r.record.memory_mib;
  plan.detach = true;
  plan.env_vars = r.env_vars;
  const SandboxRecord& rec = r.record;
  plan.attributes.metadata = rec.metadata;
  plan.attributes.traffic_token = rec.traffic_token;
  plan.attributes.mask_request_host = rec.mask_request_host;
  plan.attributes.owner_team = rec.owner;
  plan.attributes.auto_pause = rec.auto_pause;
  plan.attributes.auto_pause_memory = rec.auto_pause_memory;
  plan.attributes.auto_resume = rec.auto_resume;
  plan.attributes.https_ports = rec.https_ports;
  plan.attributes.volume_mounts = rec.volume_mounts;
  plan.attributes.idle_timeout_s = rec.idle_timeout_s;
  plan.attributes.idle_keeps_processes = rec.idle_keeps_processes;
  plan.attributes.recorded_env_vars = rec.env_vars;
  std::shared_ptr<Sandbox> sb = m_.SandboxFor(plan);
  sb->SetAdopted(rec.created_at_ms, rec.ends_at_ms);
  return sb;
}

StatusOr<std::shared_ptr<Sandbox>> Recovery::AdoptOne(const AdoptRequest& r) {
  RETURN_IF_ERROR(net::ValidateSandboxId(r.record.id));
  std::shared_ptr<Sandbox> sb = AdoptedSandbox(r);
  // Until every check passes, the Sandbox must not tear anything down.
  sb->SetReleased(true);
  if (!ProcessMatches(r.record.vmm_pid, sb->run_dir_)) {
    return Unavailable("VMM pid " + std::to_string(r.record.vmm_pid) + " is gone");
  }
  ASSIGN_OR_RETURN(auto network, net::SandboxNetwork::Adopt(r.record.id, *m_.pool_));
  net::SandboxNetwork& adopted_net = *network;
  sb->AttachNetwork(std::move(network));
  // The VMM owns the lease, so it stays live while no daemon runs.
  RETURN_IF_ERROR(m_.pool_->Adopt(adopted_net.lease(), r.record.vmm_pid));
  // Full control (pause, fork) when its runtime opens here and can
  // reattach; else pid only.
  StatusOr<std::unique_ptr<VmInstance>> vm = Unavailable("no VMM");
  if (auto runtime = m_.RuntimeNamed(sb->runtime_); runtime.ok()) {
    // A daemon killed mid-pause leaves it stopped.
    if (Status s = (*runtime)->ContinueIfStopped(sb->run_dir_ + "/vm"); !s.ok()) LOG_WARN("{}", s.message());
    vm = (*runtime)->Adopt(sb->run_dir_ + "/vm", r.record.vmm_pid);
  } else {
    vm = runtime.status();
  }
  if (vm.ok()) {
    sb->AttachVm(std::move(vm).value());
  } else {
    LOG_WARN("sandbox={} VMM adopted by pid only (no pause/fork): {}", r.record.id, vm.status().message());
    sb->AttachVm(std::make_unique<AdoptedVm>(r.record.id, r.record.vmm_pid, sb->run_dir_));
  }
  sb->AttachAgent(std::make_unique<EnvdClient>(AgentEndpoint{adopted_net.netns_ip(), kAgentPort}, r.record.access_token));
  sb->SetReleased(false);  // from here on, a failure tears it all down
  Status health =
      sb->agent_->WaitReady(std::chrono::steady_clock::now() + std::chrono::seconds(5), [] { return OkStatus(); });
  if (!health.ok()) return health.WithContext("agent");
  WriteRunDirOwner(sb->run_dir_, m_.config_.owner);
  if (egress::EgressService* egress = m_.egress()) {
    // The policy kept in the run dir (deny-all without it).
    Status st = ApplyEgressPolicy(adopted_net, *egress, r.record.id, LoadEgressPolicy(sb->run_dir_), "", true);
    if (st.ok())
      sb->AttachEgress(egress);
    else
      LOG_WARN("sandbox={} egress not restored (guest reaches nothing): {}", r.record.id, st.message());
  }
  sb->SetStateForAdoption(SandboxState::kRunning);
  return sb;
}

StatusOr<std::shared_ptr<Sandbox>> Recovery::AdoptPausedOne(const AdoptRequest& r) {
  RETURN_IF_ERROR(net::ValidateSandboxId(r.record.id));
  const std::string dir = m_.snapshot_dirs_->paused() + "/" + r.record.id;
  const std::string run_dir = m_.config_.state_dir + "/run/" + r.record.id;
  // A daemon killed between "registry: paused" and stopping the VMM left it
  // running (stopped): stop it for good; the snapshot is the sandbox now.
  if (r.record.vmm_pid > 0 && ProcessMatches(r.record.vmm_pid, run_dir)) {
    (void)AdoptedVm(r.record.id, r.record.vmm_pid, run_dir).Destroy();
    if (Status st = net::TeardownByName(r.record.id); !st.ok())
      LOG_WARN("sandbox={} network teardown: {}", r.record.id, st.message());
  }
  ASSIGN_OR_RETURN(auto m, m_.snapshot_dirs_->Read(dir, r.record.runtime));
  std::shared_ptr<Sandbox> sb = AdoptedSandbox(r);
  sb->SetPauseSnapshot(dir, m.memory_bytes > 0);  // 0: a keepMemory=false pause
  sb->SetStateForAdoption(SandboxState::kPaused);
  return sb;
}

bool Recovery::RecoverPaused(const AdoptRequest& r) {
  if (net::ValidateSandboxId(r.record.id).ok() == false) return false;
  const std::string run_dir = m_.config_.state_dir + "/run/" + r.record.id;
  if (r.record.vmm_pid > 0 && ProcessMatches(r.record.vmm_pid, run_dir)) return false;
  return m_.snapshot_dirs_->Read(m_.snapshot_dirs_->paused() + "/" + r.record.id, r.record.runtime).ok();
}

StatusOr<std::shared_ptr<Sandbox>> Recovery::RecoverRollback(const AdoptRequest& r, const RollbackIntent& intent,
                                                             bool* redo) {
  *redo = false;
  const std::string& id = r.record.id;
  RETURN_IF_ERROR(net::ValidateSandboxId(id));
  if (!ValidCheckpointId(intent.checkpoint_id)) {
    return InvalidArgument("rollback intent of sandbox " + id + " names no checkpoint: '" + intent.checkpoint_id + "'");
  }
  const std::string run_dir = m_.config_.state_dir + "/run/" + id;
  const std::string dir = m_.snapshot_dirs_->checkpoints() + "/" + id + "-" + intent.checkpoint_id;
  LOG_WARN(
      "sandbox={} a rollback to {} was in flight when the last daemon stopped (phase {}, vmm_pid {}): completing it",
      id, intent.checkpoint_id, intent.phase, intent.vmm_pid);
  // 1. The new VMM came up from the checkpoint and was recorded: adopt it
  // when it still runs and its agent answers.
  if (intent.phase == kRollbackRestored && r.record.state != "paused" && ProcessMatches(intent.vmm_pid, run_dir)) {
    AdoptRequest a = r;
    a.record.vmm_pid = intent.vmm_pid;
    // AdoptOne's failure tears down what it took over, run dir included:
    // the egress policy kept there is put back for the restore below.
    std::string egress_json;
    {
      std::ifstream f(run_dir + "/egress.json");
      std::stringstream ss;
      ss << f.rdbuf();
      egress_json = ss.str();
    }
    auto sb = AdoptOne(a);
    if (sb.ok()) {
      if (m_.config_.registry) {
        if (Status s = m_.config_.registry->ClearRollbackIntent(id); !s.ok()) LOG_WARN("sandbox={} {}", id, s.message());
      }
      (*sb)->AddLog("info",
                    "rollback to " + intent.checkpoint_id + " completed: its new VMM was adopted after a restart");
      LOG_INFO("sandbox={} rollback to {} completed: new VMM pid {} adopted", id, intent.checkpoint_id, intent.vmm_pid);
      return sb;
    }
    LOG_WARN("sandbox={} the rollback's new VMM (pid {}) cannot be adopted ({}): restoring {} again", id,
             intent.vmm_pid, sb.status().message(), intent.checkpoint_id);
    std::error_code ec;
    if (!fs::exists(run_dir, ec)) {
      fs::create_directories(run_dir, ec);
      ::chmod(run_dir.c_str(), 0700);
      if (!egress_json.empty()) std::ofstream(run_dir + "/egress.json") << egress_json;
    }
  }
  // 2. Anything else: whatever VMM names the run dir (the old one, when the
  // daemon died before stopping it; a new one never recorded, perhaps half
  // restored) goes with the network, and the sandbox is taken over paused
  // on the checkpoint; RedoRollback then brings it up from there.
  ReapStaleGuest(id, run_dir, r.record.vmm_pid, *m_.pool_);
  if (Status st = net::TeardownByName(id); !st.ok()) LOG_WARN("sandbox={} network teardown: {}", id, st.message());
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  std::shared_ptr<Sandbox> sb = AdoptedSandbox(r);
  sb->SetPauseSnapshot(dir, /*memory=*/true);
  sb->SetStateForAdoption(SandboxState::kPaused);
  *redo = true;
  return sb;
}

Status Recovery::RedoRollback(const std::shared_ptr<Sandbox>& sb, const std::string& checkpoint_id) {
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> op(sb->op_mu_);
  const std::string& id = sb->id_;
  if (sb->state() != SandboxState::kPaused) return OkStatus();
  RETURN_IF_ERROR(sb->Transition(SandboxState::kResuming));
  // As a resume does (the network is new: the old one went with its VMM;
  // the egress policy is the run dir's), from the checkpoint, which stays.
  BringUpPlan plan = m_.PlanOf(*sb);
  plan.source = MachineSource::kPausedSandbox;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    plan.snapshot_dir = sb->snapshot_dir_;
  }
  plan.snapshot_memory = true;
  plan.ready_timeout = std::chrono::seconds(60);
  plan.what = "rollback " + id + " to " + checkpoint_id + " (completed after a restart)";
  CreateTimings timings;
  Status st = m_.BringUp(*sb, plan, &timings);
  if (!st.ok()) {
    (void)sb->Transition(SandboxState::kPaused);
    LOG_ERROR(
        "sandbox={} the rollback to {} could not be completed; the sandbox stays paused on that checkpoint "
        "(a resume tries again; its checkpoints are kept): {}",
        id, checkpoint_id, st.message());
    sb->AddLog("error", "rollback to " + checkpoint_id + " interrupted by a daemon restart could not be completed; " +
                            "paused on that checkpoint: " + st.message());
    m_.Persist(*sb, "paused");
    return st;
  }
  m_.Persist(*sb, "running");
  if (m_.config_.registry) {
    if (Status s = m_.config_.registry->ClearRollbackIntent(id); !s.ok()) LOG_WARN("sandbox={} {}", id, s.message());
  }
  sb->AddLog("info", "rollback to " + checkpoint_id + " completed after a daemon restart");
  LOG_INFO("sandbox={} rollback to {} completed after a restart total_ms={:.0f}", id, checkpoint_id, MsSince(t0));
  return OkStatus();
}

void Recovery::CleanupOrphans(const std::set<std::string>& adopted) {
  // 1. Run dirs: a sandbox of a dead owner that is ours (or a dead in-process
  // run's) and was not adopted, e.g. a daemon killed mid-create. Its VMM may
  // still run: every process whose command line names the run dir is killed.
  std::error_code ec;
  for (auto& e : fs::directory_iterator(m_.config_.state_dir + "/run", ec)) {
    const std::string id = e.path().filename().string();
    const std::string run_dir = e.path().string();
    if (adopted.count(id)) continue;
    RunDirOwner o = ReadRunDirOwner(run_dir);
    if (o.pid > 0 && ::kill(o.pid, 0) == 0) continue;  // its owner still runs
    // No owner yet: a run dir another process made a moment ago (its owner
    // file is written right after the mkdir). One that stays without an
    // owner is a crash's: swept once it is a minute old.
    if (o.pid <= 0 && o.registry.empty()) {
      std::error_code age_ec;
      const auto age = fs::file_time_type::clock::now() - fs::last_write_time(run_dir, age_ec);
      if (age_ec || age < std::chrono::seconds(60)) continue;
    }
    // Another daemon's, unless its registry is gone: then no daemon can ever
    // adopt or sweep it (a test daemon's temporary registry, a deleted one).
    if (!o.registry.empty() && o.registry != m_.config_.owner && fs::exists(o.registry, ec)) continue;
    ReapStaleGuest(id, run_dir, o.pid, *m_.pool_);
    std::error_code rm;
    fs::remove_all(run_dir, rm);
    LOG_INFO("sandbox={} orphan cleaned up (run dir, VMM, network)", id);
  }
  // 2. Leases of dead owners that are ours or no daemon's, and their netns.
  if (auto cleaned = net::CleanupLeftovers(m_.config_.lease_root, m_.config_.owner); !cleaned.ok()) {
    LOG_WARN("cleanup of leftover networks: {}", cleaned.status().message());
  } else {
    for (const auto& what : *cleaned) LOG_INFO("cleanup: removed {}", what);
  }
}

}  // namespace airlock
