#include "core/volumes.h"
#include "core/sandbox.h"

#include <filesystem>

#include "common/agent_port.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/sandbox_egress.h"
#include "net/sandbox_network.h"

namespace airlock {

namespace fs = std::filesystem;

Status JoinErrors(const std::vector<Status>& errors) {
  std::string msg;
  StatusCode code = StatusCode::kOk;
  for (const auto& e : errors) {
    if (e.ok()) continue;
    if (code == StatusCode::kOk) code = e.code();
    msg += (msg.empty() ? "" : "; ") + e.message();
  }
  return code == StatusCode::kOk ? OkStatus() : Status(code, msg);
}

Sandbox::~Sandbox() {
  if (!released_) (void)TearDown();
}

std::string Sandbox::netns_ip() const {
  std::lock_guard<std::mutex> l(mu_);
  return network_ ? network_->netns_ip() : "";
}

Status Sandbox::ExposePort(uint16_t port, double* retry_after_s) {
  std::lock_guard<std::mutex> l(mu_);
  if (port == kAgentPort || exposed_ports_.count(port)) return OkStatus();
  if (!network_) return FailedPrecondition("sandbox " + id_ + " has no network");
  const PortExposureLimits& lim = port_limits_;
  if (static_cast<int>(exposed_ports_.size()) >= lim.max_ports) {
    return FailedPrecondition("sandbox " + id_ + " already has " + std::to_string(exposed_ports_.size()) +
                              " exposed ports, the most allowed (serve --max-exposed-ports)");
  }
  // Token bucket of new ports.
  auto now = std::chrono::steady_clock::now();
  if (port_tokens_ < 0) {
    port_tokens_ = lim.burst;
  } else {
    double dt = std::chrono::duration<double>(now - port_tokens_at_).count();
    port_tokens_ = std::min<double>(lim.burst, port_tokens_ + dt * lim.new_per_second);
  }
  port_tokens_at_ = now;
  if (port_tokens_ < 1) {
    double wait = lim.new_per_second > 0 ? (1 - port_tokens_) / lim.new_per_second : 1;
    if (retry_after_s) *retry_after_s = wait;
    return ResourceExhausted("sandbox " + id_ + ": new guest ports are exposed at most " +
                             std::to_string(lim.new_per_second) + " a second");
  }
  port_tokens_ -= 1;
  RETURN_IF_ERROR(network_->ExposeTcpPorts({port}));
  exposed_ports_.insert(port);
  return OkStatus();
}

size_t Sandbox::exposed_port_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return exposed_ports_.size();
}

SandboxAttributes Sandbox::attributes() const {
  std::lock_guard<std::mutex> l(mu_);
  return attrs_;
}

int64_t Sandbox::created_at_ms() const {
  std::lock_guard<std::mutex> l(mu_);
  return created_at_ms_;
}

int64_t Sandbox::ends_at_ms() const {
  std::lock_guard<std::mutex> l(mu_);
  return ends_at_ms_;
}

int Sandbox::disk_mib() const {
  std::lock_guard<std::mutex> l(mu_);
  return disk_mib_;
}

namespace {
// Sandbox::api_state with mu_ held. "paused" from the moment a pause starts,
// as E2B answers (a connect then waits for the pause and resumes; a pause
// that fails shows "running" again). The registry is written apart from
// this (Manager::Persist names the state): "paused" there only once the
// pause snapshot is committed.
std::string_view ApiStateOf(SandboxState state) {
  if (state == SandboxState::kPaused || state == SandboxState::kResuming || state == SandboxState::kPausing)
    return "paused";
  return "running";
}
}  // namespace

std::string_view Sandbox::api_state() const {
  std::lock_guard<std::mutex> l(mu_);
  return ApiStateOf(state_);
}

bool Sandbox::visible() const {
  std::lock_guard<std::mutex> l(mu_);
  return !end_ && state_ != SandboxState::kCreating && state_ != SandboxState::kFailed &&
         state_ != SandboxState::kKilling && state_ != SandboxState::kKilled;
}

SandboxRecord Sandbox::Record() const {
  std::lock_guard<std::mutex> l(mu_);
  SandboxRecord r;
  r.id = id_;
  r.template_id = template_;
  r.runtime = runtime_;
  r.state = std::string(ApiStateOf(state_));
  r.created_at_ms = created_at_ms_;
  r.ends_at_ms = ends_at_ms_;
  r.metadata = attrs_.metadata;
  r.env_vars = recorded_env_;
  r.access_token = access_token_;
  r.traffic_token = attrs_.traffic_token;
  r.mask_request_host = attrs_.mask_request_host;
  r.vcpus = vcpus_;
  r.memory_mib = memory_mib_;
  r.netns_ip = network_ ? network_->netns_ip() : "";
  r.vmm_pid = vm_ ? vm_->pid() : -1;
  r.run_dir = run_dir_;
  r.auto_pause = attrs_.auto_pause;
  r.auto_pause_memory = attrs_.auto_pause_memory;
  r.auto_resume = attrs_.auto_resume;
  r.https_ports = attrs_.https_ports;
  r.volume_mounts = attrs_.volume_mounts;
  r.idle_timeout_s = attrs_.idle_timeout_s;
  r.idle_keeps_processes = attrs_.idle_keeps_processes;
  r.owner = attrs_.owner_team;
  return r;
}

std::optional<SandboxEnd> Sandbox::end() const {
  std::lock_guard<std::mutex> l(mu_);
  return end_;
}

void Sandbox::AddLog(std::string level, std::string message) {
  std::lock_guard<std::mutex> l(mu_);
  if (logs_.size() >= kMaxLogEvents) logs_.pop_front();
  logs_.push_back({NowUnixMs(), std::move(level), std::move(message)});
}

std::vector<SandboxLogEvent> Sandbox::Logs() const {
  std::lock_guard<std::mutex> l(mu_);
  return {logs_.begin(), logs_.end()};
}

SandboxState Sandbox::state() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

pid_t Sandbox::vmm_pid() const {
  std::lock_guard<std::mutex> l(mu_);
  return vm_ ? vm_->pid() : -1;
}

Sandbox::Clock Sandbox::clock() const {
  std::lock_guard<std::mutex> l(mu_);
  return {state_,
          created_at_ms_,
          ends_at_ms_,
          attrs_.auto_pause,
          attrs_.auto_pause_memory,
          int64_t{attrs_.idle_timeout_s} * 1000,
          attrs_.idle_keeps_processes,
          running_since_ms_,
          attrs_.owner_team};
}

bool Sandbox::vmm_alive() const {
  std::lock_guard<std::mutex> l(mu_);
  return vm_ && vm_->alive();
}

Status Sandbox::Transition(SandboxState to) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(CheckTransition(state_, to));
  LOG_DEBUG("sandbox={} state {} -> {}", id_, SandboxStateName(state_), SandboxStateName(to));
  state_ = to;
  if (to == SandboxState::kRunning) running_since_ms_ = NowUnixMs();
  return OkStatus();
}

Status Sandbox::DestroyVm() {
  std::unique_ptr<VmInstance> vm;
  {
    std::lock_guard<std::mutex> l(mu_);
    vm = std::move(vm_);
    // The lease named the VMM as its owner: once it is gone, another
    // process's start-up clean-up would take the network for a dead
    // owner's while it is still ours (torn down next, or a rollback's).
    if (vm && network_) {
      if (Status st = network_->HoldLease(); !st.ok()) LOG_WARN("sandbox={} lease: {}", id_, st.message());
    }
  }
  return vm ? vm->Destroy().WithContext("destroy VMM") : OkStatus();
}

Status Sandbox::DestroyNetwork() {
  std::unique_ptr<net::SandboxNetwork> network;
  {
    std::lock_guard<std::mutex> l(mu_);
    network = std::move(network_);
    exposed_ports_.clear();
  }
  // The volumes' NFS server listens in the netns (core/volumes.h): it goes first.
  if (network && !run_dir_.empty()) (void)StopVolumeServer(run_dir_);
  return network ? network->Destroy().WithContext("destroy network") : OkStatus();
}

void Sandbox::DetachEgress() {
  // Once: a second TearDown (the destructor after Destroy) may outlive the
  // Manager and its egress service.
  egress::EgressService* egress = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    egress = std::exchange(egress_, nullptr);
  }
  if (egress) egress->RemoveSandbox(id_);
}

Status Sandbox::RemoveRunDir() {
  if (run_dir_.empty()) return OkStatus();
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  return ec ? Internal("remove " + run_dir_ + ": " + ec.message()) : OkStatus();
}

Status Sandbox::TearDown() { return JoinErrors({StopRuntime(), RemoveRunDir()}); }

std::string Sandbox::snapshot_dir() const {
  std::lock_guard<std::mutex> l(mu_);
  return snapshot_dir_;
}

Status Sandbox::StopRuntime() {
  // Wake whoever is blocked on the agent: once the netns is gone its TCP
  // connections would never see a reset.
  if (agent_) agent_->CancelAll();
  // The policy stays in <run_dir>/egress.json; Resume registers it again.
  DetachEgress();
  // Order matters: the VMM holds the tap inside the netns.
  return JoinErrors({DestroyVm(), DestroyNetwork()});
}

// ---- the changes its owners make (sandbox.h: the one file writing these fields) ----

std::shared_ptr<Sandbox> Sandbox::Make(const BringUpPlan& plan, const std::string& run_dir,
                                       const std::string& runtime, const PortExposureLimits& port_limits,
                                       int disk_mib) {
  std::shared_ptr<Sandbox> sb(new Sandbox());
  sb->id_ = plan.id;
  sb->run_dir_ = run_dir;
  sb->template_ = plan.template_name;
  sb->runtime_ = plan.runtime.empty() ? runtime : plan.runtime;
  sb->port_limits_ = port_limits;
  sb->vcpus_ = plan.vcpus;
  sb->memory_mib_ = plan.memory_mib;
  sb->shared_snapshot_ = plan.shared_snapshot;
  sb->disk_mib_ = disk_mib;
  sb->TakeIdentity(plan);
  return sb;
}

void Sandbox::TakeIdentity(const BringUpPlan& plan) {
  std::lock_guard<std::mutex> l(mu_);
  access_token_ = plan.access_token;
  detach_ = plan.detach;
  env_vars_ = plan.env_vars;
  attrs_ = plan.attributes;
  recorded_env_ = plan.attributes.recorded_env_vars.value_or(plan.env_vars);
  attrs_.recorded_env_vars.reset();
  timeout_ms_ = plan.timeout.count();
}

void Sandbox::AttachNetwork(std::unique_ptr<net::SandboxNetwork> network) {
  std::lock_guard<std::mutex> l(mu_);
  network_ = std::move(network);
}

void Sandbox::AttachEgress(egress::EgressService* egress) {
  std::lock_guard<std::mutex> l(mu_);
  egress_ = egress;
}

void Sandbox::AttachVm(std::unique_ptr<VmInstance> vm) {
  std::lock_guard<std::mutex> l(mu_);
  vm_ = std::move(vm);
}

void Sandbox::AttachAgent(std::unique_ptr<EnvdClient> agent) { agent_ = std::move(agent); }

void Sandbox::SetTimings(const CreateTimings& timings) { timings_ = timings; }

void Sandbox::StartClock() {
  std::lock_guard<std::mutex> l(mu_);
  created_at_ms_ = NowUnixMs();
  ends_at_ms_ = timeout_ms_ > 0 ? created_at_ms_ + timeout_ms_ : 0;
}

void Sandbox::ForgetPauseSnapshot() {
  std::lock_guard<std::mutex> l(mu_);
  snapshot_dir_.clear();
}

void Sandbox::SetPauseSnapshot(const std::string& dir, bool memory) {
  std::lock_guard<std::mutex> l(mu_);
  snapshot_dir_ = dir;
  memory_snapshot_ = memory;
}

void Sandbox::SetAdopted(int64_t created_at_ms, int64_t ends_at_ms) {
  std::lock_guard<std::mutex> l(mu_);
  created_at_ms_ = created_at_ms;
  ends_at_ms_ = ends_at_ms;
  running_since_ms_ = NowUnixMs();  // its idle interval counts from the adoption
}

void Sandbox::SetStateForAdoption(SandboxState state) {
  std::lock_guard<std::mutex> l(mu_);
  state_ = state;
}

void Sandbox::SetSharedSnapshot(const std::string& dir) { shared_snapshot_ = dir; }

Status Sandbox::DecideEnd(SandboxOutcome outcome, std::string detail) {
  std::lock_guard<std::mutex> l(mu_);
  if (end_) return NotFound("sandbox " + id_ + " not found (it is ending: " + end_->Describe() + ")");
  end_ = SandboxEnd{outcome, std::move(detail), NowUnixMs()};
  return OkStatus();
}

int64_t Sandbox::SetEndsAt(int64_t ends_at_ms, bool extend_only) {
  std::lock_guard<std::mutex> l(mu_);
  if (!extend_only || ends_at_ms > ends_at_ms_) ends_at_ms_ = ends_at_ms;
  return ends_at_ms_;
}

void Sandbox::SetReleased(bool released) { released_ = released; }

void Sandbox::ReleaseForRestart() {
  std::lock_guard<std::mutex> l(mu_);
  if (vm_) vm_->Release();
  if (network_) network_->Release();
  released_ = true;
}

}  // namespace airlock
