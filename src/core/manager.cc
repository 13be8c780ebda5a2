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
#include "core/recovery.h"
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
  // SnapshotDirs::LayeredOn compares those with paths under the state dir.
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
  m->snapshot_dirs_ =
      std::make_unique<SnapshotDirs>(m->config_.state_dir, m->config_.owner, *m->runtimes_, m->config_.registry);
  m->config_.pool.default_runtime = m->config_.runtime;
  m->warm_pool_ = std::make_unique<WarmPool>(m->config_.pool, static_cast<WarmPoolHost&>(*m));
  if (m->config_.egress) {
    EgressSetup setup{m->config_.address_pool,           m->config_.upstream_dns,  m->config_.state_dir,
                      m->config_.egress_audit_sink,      m->config_.egress_limits, m->config_.egress_request_broker,
                      m->config_.egress_upstream_ca_file};
    setup.proxy_allow = m->config_.egress_proxy_allow;
    // The host's addresses changed: every sandbox's netns set of them too.
    setup.on_host_addresses_changed = [raw = m.get()](const std::vector<uint32_t>& host) {
      raw->RefreshEgressHostAddresses(host);
    };
    auto eg = StartEgress(setup);
    if (eg.ok()) {
      m->egress_ = std::move(eg).value();
      m->host_addresses_.Replace(NftHostAddresses(m->egress_->HostAddressList(), m->config_.address_pool));
    } else {
      LOG_WARN("egress disabled (guests reach nothing): {}", eg.status().message());
    }
  }
  Recovery(*m).Run(adopt);
  return m;
}

Manager::~Manager() {
  // No host-address callback once members start going away.
  if (egress_) egress_->StopHostAddressNotifications();
  DestroyAll();
}

void Manager::RefreshEgressHostAddresses(const std::vector<uint32_t>& host) {
  const auto elements = NftHostAddresses(host, config_.address_pool);
  // A sandbox's veth (in the pool) changes the host's addresses but not
  // the set: no nft run per sandbox for every sandbox created.
  if (!host_addresses_.Replace(elements)) return;
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
  if (std::string doc = image::QemuOnlyTemplate(template_name); !doc.empty() && runtime != "qemu") {
    return InvalidArgument("template " + template_name + " runs on the qemu runtime only, not " + runtime + " (" + doc +
                           ")");
  }
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
  // (Not for volumes on a runtime that mounts them at its start, gVisor:
  // a parked guest has none.)
  const bool mounts_at_start = !options.attributes.volume_mounts.empty() && rt->guest_link() != GuestLink::kTap;
  if (plan.source == MachineSource::kTemplateSnapshot && options.detach && warm_pool_->enabled() && !mounts_at_start) {
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
  RETURN_IF_ERROR(sb->DecideEnd(outcome, std::move(detail)));
  LOG_INFO("sandbox={} ending: {}", id, sb->end()->Describe());
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
  const int64_t now_ends = sb->SetEndsAt(ends_at_ms, extend_only);
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

std::vector<DeadVm> Manager::DeadSandboxes() {
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
    sb->ReleaseForRestart();
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
