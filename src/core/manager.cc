#include "core/manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include "common/agent_port.h"
#include "common/log.h"
#include "core/adopted_vm.h"
#include "core/agent_init.h"
#include "core/http_client.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"
#include "core/template_runtime.h"
#include "image/image.h"
#include "net/address_pool.h"
#include "net/names.h"
#include "net/sandbox_network.h"
#include "runtime/registry.h"

namespace airlock {

namespace fs = std::filesystem;

void WriteOwnerFile(const std::string& path, const std::string& registry) {
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fprintf(f, "%d\n", ::getpid());
    if (!registry.empty()) std::fprintf(f, "registry %s\n", registry.c_str());
    std::fclose(f);
  } else {
    LOG_WARN("write {}: {}", path, std::strerror(errno));
  }
}

void WriteRunDirOwner(const std::string& run_dir, const std::string& registry) {
  WriteOwnerFile(run_dir + "/owner", registry);
}

RunDirOwner ReadRunDirOwner(const std::string& run_dir) { return ReadOwnerFile(run_dir + "/owner"); }

RunDirOwner ReadOwnerFile(const std::string& path) {
  RunDirOwner o;
  std::ifstream f(path);
  std::string line;
  if (std::getline(f, line)) o.pid = std::atoi(line.c_str());
  while (std::getline(f, line)) {
    if (line.rfind("registry ", 0) == 0) o.registry = line.substr(9);
  }
  return o;
}

std::string NewSandboxId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string id;
  for (int i = 0; i < 20; ++i) id.push_back(kAlphabet[pick(rd)]);
  return id;
}

// ---- Manager ----

StatusOr<std::unique_ptr<Manager>> Manager::Open(ManagerConfig config, const std::vector<AdoptRequest>& adopt) {
  std::unique_ptr<Manager> m(new Manager());
  m->config_ = std::move(config);
  std::error_code ec;
  // Canonical (absolute, no symlinks; the image code resolves it the same
  // way): VMM records and manifests name files by path, and
  // SnapshotDirsLayeredOn compares those with paths under the state dir.
  if (!m->config_.state_dir.empty()) m->config_.state_dir = fs::weakly_canonical(m->config_.state_dir, ec).string();
  if (ec) return Internal("state directory " + m->config_.state_dir + ": " + ec.message());
  while (m->config_.state_dir.size() > 1 && m->config_.state_dir.back() == '/') m->config_.state_dir.pop_back();
  fs::create_directories(m->config_.state_dir + "/run", ec);
  // Root's only: no other uid (a VMM's included) lists or enters sandboxes' run dirs.
  if (!ec) ::chmod((m->config_.state_dir + "/run").c_str(), 0700);
  if (ec) {
    return Status(StatusCode::kFailedPrecondition, "cannot create state directory " + m->config_.state_dir + ": " +
                                                       ec.message() +
                                                       " (run as root, or pass --state-dir / AIRLOCK_STATE_DIR)");
  }
  ASSIGN_OR_RETURN(auto pool,
                   net::AddressPool::Create(m->config_.lease_root, m->config_.address_pool, m->config_.owner));
  m->pool_ = std::make_unique<net::AddressPool>(std::move(pool));
  RuntimeOptions ro;
  ro.state_dir = m->config_.state_dir;
  ro.jail = m->config_.vmm_jail;
  ro.jail.lease_root = m->config_.lease_root;
  ASSIGN_OR_RETURN(m->runtimes_, RuntimeSet::Open(m->config_.runtime, ro));
  m->config_.runtime = m->runtimes_->default_name();
  m->template_snapshots_ = std::make_unique<TemplateSnapshots>(
      TemplateSnapshotsConfig{m->config_.state_dir, m->config_.owner, m->config_.template_shared_memory},
      *m->runtimes_, *m->pool_);
  m->config_.pool.default_runtime = m->config_.runtime;
  m->warm_pool_ = std::make_unique<WarmPool>(m->config_.pool, static_cast<WarmPoolHost&>(*m));
  if (m->config_.egress) {
    EgressSetup setup{m->config_.address_pool,           m->config_.upstream_dns,  m->config_.state_dir,
                      m->config_.egress_audit_sink,      m->config_.egress_limits, m->config_.egress_request_broker,
                      m->config_.egress_upstream_ca_file};
    // The host's addresses changed: every sandbox's netns set of them too.
    setup.on_host_addresses_changed = [raw = m.get()](const std::vector<uint32_t>& host) {
      raw->RefreshEgressHostAddresses(host);
    };
    auto eg = StartEgress(setup);
    if (eg.ok()) {
      m->egress_ = std::move(eg).value();
      std::lock_guard<std::mutex> l(m->host_elements_mu_);
      m->host_elements_ = NftHostAddresses(m->egress_->HostAddressList(), m->config_.address_pool);
    } else {
      LOG_WARN("egress disabled (guests reach nothing): {}", eg.status().message());
    }
  }
  // Rollbacks a killed daemon left in flight (checkpoints.cc): completed
  // below, never taken for dead sandboxes.
  std::map<std::string, RollbackIntent> intents;
  std::vector<std::pair<std::string, std::string>> redo;  // (sandbox, checkpoint)
  if (m->config_.registry) {
    auto listed = m->config_.registry->ListRollbackIntents();
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
      sb = m->RecoverRollback(r, it->second, &needs_redo);
      if (sb.ok() && needs_redo) redo.emplace_back(r.record.id, it->second.checkpoint_id);
      intents.erase(it);
    } else {
      sb = paused ? m->AdoptPausedOne(r) : m->AdoptOne(r);
      if (!sb.ok() && !paused && m->RecoverPaused(r)) {
        // Killed after a pause committed but before the registry said so.
        sb = m->AdoptPausedOne(r);
      }
    }
    if (sb.ok()) {
      {
        std::lock_guard<std::mutex> l(m->mu_);
        (*sb)->shared_snapshot_ = m->ForkSnapshotOf(r.record.id);
        m->sandboxes_[r.record.id] = *sb;
      }
      (*sb)->AddLog("info", "sandbox adopted by a restarted daemon");
      // Its row as it is now (a pause that committed as the daemon died; a new netns address).
      m->Persist(**sb, (*sb)->api_state());
      LOG_INFO("sandbox={} adopted vmm_pid={}", r.record.id, r.record.vmm_pid);
      continue;
    }
    if (m->config_.registry) (void)m->config_.registry->DeleteSandbox(r.record.id);
    LOG_WARN("sandbox={} not adopted, cleaning up: {}", r.record.id, sb.status().message());
    std::string run_dir = m->config_.state_dir + "/run/" + r.record.id;
    AdoptedVm(r.record.id, r.record.vmm_pid, run_dir).Destroy().ok();  // kills it only if the pid is still that VMM
    // A VMM the registry does not know (a daemon killed mid-rollback started
    // it) names the run dir too: it goes before the run dir does.
    m->ReapStaleGuest(r.record.id, run_dir, r.record.vmm_pid);
    if (auto st = net::TeardownByName(r.record.id); !st.ok())
      LOG_WARN("sandbox={} network teardown: {}", r.record.id, st.message());
    fs::remove_all(run_dir, ec);
    fs::remove_all(m->paused_dir() + "/" + r.record.id, ec);
  }
  {
    std::set<std::string> own_ids;
    for (const auto& r : adopt) own_ids.insert(r.record.id);
    m->SweepSnapshots(own_ids);
  }
  std::set<std::string> adopted;
  {
    std::lock_guard<std::mutex> l(m->mu_);
    for (const auto& [id, sb] : m->sandboxes_) adopted.insert(id);
  }
  m->CleanupOrphans(adopted);
  m->SweepForkSnapshots();  // after CleanupOrphans: fork children a dead daemon never registered are gone
  m->SweepCheckpoints();    // after CleanupOrphans: a checkpoint whose sandbox's run dir is gone goes
  // Intents of sandboxes the registry no longer has: nothing to complete.
  for (const auto& [id, _] : intents) (void)m->config_.registry->ClearRollbackIntent(id);
  for (const auto& [id, checkpoint] : redo) {
    if (auto sb = m->Get(id)) (void)m->RedoRollback(sb, checkpoint);
  }
  return m;
}

// Kills every process whose command line names `run_dir` (a VMM left by a
// daemon killed -9), then tears down the sandbox's network and its lease.
void Manager::ReapStaleGuest(const std::string& id, const std::string& run_dir, pid_t owner_pid) {
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
    if (auto lease = pool_->Find(id); lease.ok() && *lease) {
      if (Status st = net::TeardownByName(id); !st.ok()) {
        LOG_WARN("sandbox={} orphan network: {}", id, st.message());
      } else {
        (void)pool_->Release(**lease);
      }
    }
  }
}

void Manager::CleanupOrphans(const std::set<std::string>& adopted) {
  // 1. Run dirs: a sandbox of a dead owner that is ours (or a dead in-process
  // run's) and was not adopted, e.g. a daemon killed mid-create. Its VMM may
  // still run: every process whose command line names the run dir is killed.
  std::error_code ec;
  for (auto& e : fs::directory_iterator(config_.state_dir + "/run", ec)) {
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
    if (!o.registry.empty() && o.registry != config_.owner && fs::exists(o.registry, ec)) continue;
    ReapStaleGuest(id, run_dir, o.pid);
    std::error_code rm;
    fs::remove_all(run_dir, rm);
    LOG_INFO("sandbox={} orphan cleaned up (run dir, VMM, network)", id);
  }
  // 2. Leases of dead owners that are ours or no daemon's, and their netns.
  if (auto cleaned = net::CleanupLeftovers(config_.lease_root, config_.owner); !cleaned.ok()) {
    LOG_WARN("cleanup of leftover networks: {}", cleaned.status().message());
  } else {
    for (const auto& what : *cleaned) LOG_INFO("cleanup: removed {}", what);
  }
}

std::shared_ptr<Sandbox> Manager::AdoptedSandbox(const AdoptRequest& r) {
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
  plan.attributes.recorded_env_vars = rec.env_vars;
  std::shared_ptr<Sandbox> sb = SandboxFor(plan);
  sb->created_at_ms_ = rec.created_at_ms;
  sb->ends_at_ms_ = rec.ends_at_ms;
  return sb;
}

StatusOr<std::shared_ptr<Sandbox>> Manager::AdoptOne(const AdoptRequest& r) {
  RETURN_IF_ERROR(net::ValidateSandboxId(r.record.id));
  std::shared_ptr<Sandbox> sb = AdoptedSandbox(r);
  // Until every check passes, the Sandbox must not tear anything down.
  sb->released_ = true;
  if (!ProcessMatches(r.record.vmm_pid, sb->run_dir_)) {
    return Unavailable("VMM pid " + std::to_string(r.record.vmm_pid) + " is gone");
  }
  ASSIGN_OR_RETURN(auto network, net::SandboxNetwork::Adopt(r.record.id, *pool_));
  sb->network_ = std::move(network);
  // The VMM owns the lease, so it stays live while no daemon runs.
  RETURN_IF_ERROR(pool_->Adopt(sb->network_->lease(), r.record.vmm_pid));
  // Full control (pause, fork) when its runtime opens here and can
  // reattach; else pid only.
  StatusOr<std::unique_ptr<VmInstance>> vm = Unavailable("no VMM");
  if (auto runtime = RuntimeNamed(sb->runtime_); runtime.ok()) {
    ContinueIfStopped(**runtime, sb->run_dir_ + "/vm");  // a daemon killed mid-pause leaves it stopped
    vm = (*runtime)->Adopt(sb->run_dir_ + "/vm", r.record.vmm_pid);
  } else {
    vm = runtime.status();
  }
  if (vm.ok()) {
    sb->vm_ = std::move(vm).value();
  } else {
    LOG_WARN("sandbox={} VMM adopted by pid only (no pause/fork): {}", r.record.id, vm.status().message());
    sb->vm_ = std::make_unique<AdoptedVm>(r.record.id, r.record.vmm_pid, sb->run_dir_);
  }
  sb->agent_ = std::make_unique<EnvdClient>(AgentEndpoint{sb->network_->netns_ip(), kAgentPort}, r.record.access_token);
  sb->released_ = false;  // from here on, a failure tears it all down
  Status health =
      sb->agent_->WaitReady(std::chrono::steady_clock::now() + std::chrono::seconds(5), [] { return OkStatus(); });
  if (!health.ok()) return health.WithContext("agent");
  WriteRunDirOwner(sb->run_dir_, config_.owner);
  if (egress_) {
    // The policy kept in the run dir (deny-all without it).
    Status st = ApplyEgressPolicy(*sb->network_, *egress_, r.record.id, LoadEgressPolicy(sb->run_dir_), "", true);
    if (st.ok())
      sb->egress_ = egress_.get();
    else
      LOG_WARN("sandbox={} egress not restored (guest reaches nothing): {}", r.record.id, st.message());
  }
  sb->state_ = SandboxState::kRunning;
  return sb;
}

Manager::~Manager() {
  // No host-address callback once members start going away.
  if (egress_) egress_->StopHostAddressNotifications();
  DestroyAll();
}

void Manager::RefreshEgressHostAddresses(const std::vector<uint32_t>& host) {
  const auto elements = NftHostAddresses(host, config_.address_pool);
  {
    // A sandbox's veth (in the pool) changes the host's addresses but not
    // the set: no nft run per sandbox for every sandbox created.
    std::lock_guard<std::mutex> l(host_elements_mu_);
    if (elements == host_elements_) return;
    host_elements_ = elements;
  }
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, sb] : sandboxes_) all.push_back(sb);
  }
  for (const auto& sb : all) {
    std::lock_guard<std::mutex> l(sb->mu_);
    if (!sb->network_ || !sb->egress_) continue;
    Status st = sb->network_->SetEgressHostAddresses(elements);
    if (!st.ok()) LOG_WARN("sandbox={} host addresses not updated in its netns: {}", sb->id_, st.message());
  }
  LOG_INFO("egress: host addresses changed ({} outside the forbidden ranges); {} sandbox netns updated",
           elements.size(), all.size());
}

Status Manager::UpdateEgress(const std::string& id, const egress::EgressPolicy& policy) {
  if (!egress_) return FailedPrecondition("egress is off in this airlock (see the daemon's log)");
  auto sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::lock_guard<std::mutex> l(sb->mu_);
  if (!sb->network_ || !sb->egress_) return FailedPrecondition("sandbox " + id + " has no egress");
  return ApplyEgressPolicy(*sb->network_, *egress_, id, policy, sb->run_dir_, false);
}

StatusOr<std::shared_ptr<Sandbox>> Manager::Create(const CreateOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  if (options.vcpus < 1 || options.vcpus > 64) return InvalidArgument("vcpus must be 1..64");
  if (options.memory_mib < 128 || options.memory_mib > 65536) return InvalidArgument("memory must be 128..65536 MiB");

  // A named snapshot the caller found for its team (named_snapshots.cc):
  // its runtime. A template name is never looked up as a snapshot here.
  if (!options.named_snapshot_dir.empty()) return CreateFromNamedSnapshot(options.named_snapshot_dir, options);
  // The runtime: asked for, else the template name's ("base-gvisor"), else
  // the default; one that cannot run here fails the create before anything
  // is made.
  const TemplateRef ref = ParseTemplateRuntime(options.template_name, config_.runtime);
  const std::string template_name = ref.image_template;
  const std::string runtime = options.runtime.empty() ? ref.runtime : options.runtime;
  ASSIGN_OR_RETURN(Runtime * rt, RuntimeNamed(runtime));
  // The image: found, or built on first use.
  auto img = image::FindImage(config_.state_dir, template_name);
  if (!img.ok() && img.status().code() == StatusCode::kNotFound && config_.build_image_if_missing &&
      template_name == "base") {
    image::ImageOptions io;
    io.state_dir = config_.state_dir;
    io.template_name = template_name;
    io.agent_binary = config_.agent_binary;
    io.progress = [](std::string_view step) { std::fprintf(stderr, "==> %.*s\n", (int)step.size(), step.data()); };
    img = image::EnsureImage(io);
  }
  if (!img.ok()) return img.status();

  BringUpPlan plan;
  plan.access_token = options.access_token;
  plan.template_name = template_name;
  plan.runtime = runtime;
  plan.vcpus = options.vcpus;
  plan.memory_mib = options.memory_mib;
  plan.egress_policy = options.egress_policy;
  plan.egress_limits = options.egress_limits;
  plan.env_vars = options.env_vars;
  plan.detach = options.detach;
  plan.ready_timeout = options.ready_timeout;
  plan.attributes = options.attributes;
  plan.timeout = options.timeout;
  plan.handover = options.handover;
  plan.image = *img;
  // From the template's snapshot when there is one, else a cold boot.
  plan.source = MachineSource::kColdBoot;
  if (config_.template_snapshots && template_snapshots_->Pays(*rt, template_name)) {
    if (auto tdir = template_snapshots_->Find(*img, options.vcpus, options.memory_mib, runtime); tdir.ok()) {
      plan.source = MachineSource::kTemplateSnapshot;
      plan.snapshot_dir = *tdir;
    }
  }
  // A parked sandbox of the warm pool when there is one (core/warm_pool.h).
  if (plan.source == MachineSource::kTemplateSnapshot && options.detach && warm_pool_->enabled()) {
    warm_pool_->Warm(template_name, options.vcpus, options.memory_mib, runtime);
    if (auto parked = warm_pool_->Take(plan.snapshot_dir)) {
      BringUpPlan handout = plan;
      handout.source = MachineSource::kParked;
      auto sb = StartSandbox(std::move(handout), t0, parked);
      if (sb.ok()) {
        warm_pool_->Count(/*hit=*/true);
        return sb;
      }
      LOG_WARN("warm pool: hand-out failed, restoring afresh: {}", sb.status().message());
    }
    warm_pool_->Count(/*hit=*/false);
  }
  return StartSandbox(std::move(plan), t0);
}

Status Manager::End(const std::string& id, SandboxOutcome outcome, std::string detail) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::lock_guard<std::mutex> l(sb->mu_);
  if (sb->end_) return NotFound("sandbox " + id + " not found (it is ending: " + sb->end_->Describe() + ")");
  sb->end_ = SandboxEnd{outcome, std::move(detail), NowUnixMs()};
  LOG_INFO("sandbox={} ending: {}", id, sb->end_->Describe());
  return OkStatus();
}

Status Manager::Destroy(const std::string& id) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  (void)End(id, SandboxOutcome::kKilled);  // unless its end was decided already
  const SandboxEnd end = *sb->end();
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sandboxes_.find(id);
    // Another Destroy got there first.
    if (it == sandboxes_.end() || it->second != sb) return NotFound("sandbox " + id + " not found");
    sandboxes_.erase(it);
    ended_.emplace_back(id, end);
    if (ended_.size() > kMaxEnded) ended_.pop_front();
  }
  if (config_.events.ending) config_.events.ending(*sb, end);
  std::lock_guard<std::mutex> op(sb->op_mu_);  // waits for a pause/resume in flight
  (void)sb->Transition(SandboxState::kKilling);
  Status s = sb->TearDown();
  s = JoinErrors({s, DeletePrivateSnapshots(*sb)});
  if (!sb->shared_snapshot_.empty()) ReleaseSharedSnapshot(sb->shared_snapshot_, sb.get());
  (void)sb->Transition(SandboxState::kKilled);
  if (config_.registry) {
    if (Status r = config_.registry->DeleteSandbox(id); !r.ok()) LOG_WARN("sandbox={} registry: {}", id, r.message());
  }
  if (!s.ok()) LOG_WARN("sandbox={} destroy: {}", id, s.message());
  if (config_.events.ended) config_.events.ended(id, end);
  return s;
}

std::optional<SandboxEnd> Manager::EndOf(const std::string& id) const {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = ended_.rbegin(); it != ended_.rend(); ++it) {
    if (it->first == id) return it->second;
  }
  auto it = sandboxes_.find(id);
  if (it != sandboxes_.end()) return it->second->end();
  return std::nullopt;
}

std::shared_ptr<Sandbox> Manager::Get(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::shared_ptr<Sandbox> Manager::Visible(const std::string& id) {
  auto sb = Get(id);
  return sb && sb->visible() ? sb : nullptr;
}

std::vector<std::shared_ptr<Sandbox>> Manager::VisibleList() {
  std::vector<std::shared_ptr<Sandbox>> out;
  for (auto& sb : List()) {
    if (sb->visible()) out.push_back(std::move(sb));
  }
  return out;
}

StatusOr<int64_t> Manager::SetEndsAt(const std::string& id, int64_t ends_at_ms, bool extend_only) {
  auto sb = Visible(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  int64_t now_ends = 0;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    if (!extend_only || ends_at_ms > sb->ends_at_ms_) sb->ends_at_ms_ = ends_at_ms;
    now_ends = sb->ends_at_ms_;
  }
  if (config_.registry) {
    if (Status st = config_.registry->SetEndsAt(id, now_ends); !st.ok())
      LOG_WARN("sandbox={} registry: {}", id, st.message());
  }
  return now_ends;
}

void Manager::Persist(const Sandbox& sb, std::string_view state) {
  if (!config_.registry) return;
  SandboxRecord r = sb.Record();
  r.state = std::string(state);
  if (Status st = config_.registry->PutSandbox(r); !st.ok()) LOG_WARN("sandbox={} registry: {}", r.id, st.message());
}

std::vector<Manager::DeadVm> Manager::DeadSandboxes() {
  std::vector<DeadVm> out;
  for (auto& sb : List()) {
    std::unique_lock<std::mutex> op(sb->op_mu_, std::try_to_lock);
    if (!op.owns_lock() || sb->state() != SandboxState::kRunning || !sb->vm_ || sb->vm_->alive()) continue;
    std::string tail = sb->vm_->ConsoleTail();
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    if (auto nl = tail.rfind('\n'); nl != std::string::npos) tail = tail.substr(nl + 1);
    if (tail.size() > 200) tail = tail.substr(tail.size() - 200);
    out.push_back({sb->id(), tail.empty() ? std::string() : "console: " + tail});
  }
  return out;
}

std::vector<std::shared_ptr<Sandbox>> Manager::List() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::shared_ptr<Sandbox>> out;
  for (auto& [_, sb] : sandboxes_) out.push_back(sb);
  return out;
}

void Manager::ReleaseAll() {
  if (warm_pool_) warm_pool_->Stop();  // parked sandboxes are no one's to adopt
  std::map<std::string, std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    all.swap(sandboxes_);
  }
  for (auto& [id, sb] : all) {
    std::lock_guard<std::mutex> l(sb->mu_);
    if (sb->vm_) sb->vm_->Release();
    if (sb->network_) sb->network_->Release();
    sb->released_ = true;
    LOG_INFO("sandbox={} released (VMM keeps running)", id);
  }
}

void Manager::DestroyAll() {
  if (warm_pool_) warm_pool_->Stop();
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, _] : sandboxes_) ids.push_back(id);
  }
  for (auto& id : ids) {
    (void)End(id, SandboxOutcome::kDaemonStopped);
    (void)Destroy(id);
  }
}

}  // namespace airlock
