#include "control/memory_governor.h"

#include "common/clock.h"
#include "common/log.h"
#include "core/manager.h"

namespace airlock::control {

MemoryGovernor::MemoryGovernor(Manager& manager, Admission& admission, boost::asio::io_context& io,
                               MemoryGovernorConfig config, std::unique_ptr<MemoryProbe> probe, Hooks hooks)
    : manager_(manager),
      admission_(admission),
      config_(std::move(config)),
      probe_(std::move(probe)),
      hooks_(std::move(hooks)),
      timer_(io) {}

void MemoryGovernor::Start() {
  if (config_.interval.count() <= 0) return;
  reading_ = true;
  Read();
  Schedule();
}

void MemoryGovernor::Stop() { timer_.cancel(); }

void MemoryGovernor::NoteActivity(const std::string& id) {
  std::lock_guard<std::mutex> l(activity_mu_);
  last_active_ms_[id] = NowUnixMs();
}

int64_t MemoryGovernor::LastActive(const std::string& id) {
  std::lock_guard<std::mutex> l(activity_mu_);
  auto it = last_active_ms_.find(id);
  return it == last_active_ms_.end() ? 0 : it->second;
}

void MemoryGovernor::Schedule() {
  timer_.expires_after(config_.interval);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    if (!reading_.exchange(true)) hooks_.run_blocking([this] { Read(); });
    Schedule();
  });
}

void MemoryGovernor::Read() {
  const auto t0 = std::chrono::steady_clock::now();
  MemoryReading reading;
  PressureInput in;
  const HostMemInfo mi = probe_->ReadMemInfo();
  reading.available_mib = in.available_mib = mi.available_mib;
  std::set<pid_t> seen;
  auto adjust_oom = [&](pid_t pid, int adj) {
    seen.insert(pid);
    if (oom_adjusted_.count(pid)) return;
    if (Status st = probe_->SetOomScoreAdj(pid, adj); !st.ok()) {
      LOG_DEBUG("vmm pid={} oom_score_adj: {}", pid, st.message());
      return;
    }
    oom_adjusted_.insert(pid);
  };
  std::map<std::string, int64_t> active;
  {
    std::lock_guard<std::mutex> l(activity_mu_);
    active = last_active_ms_;
  }
  const std::set<std::string> streaming = hooks_.streaming ? hooks_.streaming() : std::set<std::string>{};
  const int64_t now_ms = NowUnixMs();
  for (const auto& sb : manager_.VisibleList()) {
    if (sb->state() != SandboxState::kRunning) continue;
    const pid_t pid = sb->vmm_pid();
    if (pid <= 0) continue;
    auto v = probe_->ReadVmm(pid);
    if (!v.ok()) {
      LOG_DEBUG("sandbox={} smaps_rollup: {}", sb->id(), v.status().message());
      continue;
    }
    reading.held_mib[sb->id()] = v->held_mib();
    adjust_oom(pid, kVmmOomScoreAdj);
    int64_t last = streaming.count(sb->id()) ? now_ms : sb->created_at_ms();
    if (auto it = active.find(sb->id()); it != active.end()) last = std::max(last, it->second);
    in.running.push_back({sb->id(), last, v->held_mib()});
  }
  int64_t pool_held = 0;
  const auto parked = manager_.warm_pool().VmmPids();
  for (pid_t pid : parked) {
    auto v = probe_->ReadVmm(pid);
    if (!v.ok()) continue;
    pool_held += v->held_mib();
    adjust_oom(pid, kPooledVmmOomScoreAdj);
  }
  std::erase_if(oom_adjusted_, [&](pid_t p) { return !seen.count(p); });
  pool_held_mib_ = pool_held;
  in.now_ms = now_ms;
  in.was_under = under_.load();
  in.pool_parked = static_cast<int>(parked.size());
  in.pause_in_flight = pause_in_flight_.load();
  PressurePlan plan = PlanPressure(config_.pressure, in);
  reading.pressure = plan.under;
  if (plan.under != in.was_under) {
    if (plan.under)
      LOG_WARN("memory pressure: {}: refusing creates, shrinking the warm pool", plan.why);
    else
      LOG_WARN("memory pressure over: MemAvailable {} MiB", mi.available_mib);
  }
  under_ = plan.under;
  admission_.UpdateMemory(reading);
  {
    // Forget the activity of sandboxes that are gone.
    std::lock_guard<std::mutex> l(activity_mu_);
    std::erase_if(last_active_ms_, [this](const auto& kv) { return !manager_.Get(kv.first); });
  }
  reading_us_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!plan.pause_id.empty() && !pause_in_flight_.exchange(true)) {
    hooks_.run_blocking([this, id = plan.pause_id, why = plan.why] { PauseForPressure(id, why); });
  }
  reading_ = false;
}

void MemoryGovernor::PauseForPressure(const std::string& id, const std::string& why) {
  LOG_WARN("sandbox={} memory pressure: {}", id, why);
  PauseOptions opts;
  opts.keep_memory = true;
  auto r = manager_.Pause(id, opts);
  if (r.ok()) {
    if (hooks_.paused) hooks_.paused(id, why);
  } else {
    LOG_WARN("sandbox={} memory-pressure pause failed: {}", id, r.status().message());
  }
  pause_in_flight_ = false;
}

}  // namespace airlock::control
