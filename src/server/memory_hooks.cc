// Memory admission and pressure in the daemon (docs/limits.md "Host
// memory", "Memory pressure"): a timer on the io thread posts one reading
// at a time to a worker (never two at once: a slow sweep delays the next);
// the reading (MemAvailable, each running sandbox's and each parked VMM's
// smaps_rollup through MemoryProbe) goes to Admission, whose create path
// then only compares sums, and to the pressure policy, whose pause runs on
// another worker. The same sweep sets each VMM's oom_score_adj once.
#include <boost/asio/post.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "server/server.h"

namespace airlock::server {

void Server::NoteActivity(const std::string& id) {
  std::lock_guard<std::mutex> l(activity_mu_);
  last_active_ms_[id] = NowUnixMs();
}

void Server::ScheduleMemorySampler() {
  if (config_.memory_sample_interval.count() <= 0) return;
  memory_timer_->expires_after(config_.memory_sample_interval);
  memory_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    if (!memory_sampling_.exchange(true)) asio::post(*workers_, [this] { SampleMemory(); });
    ScheduleMemorySampler();
  });
}

void Server::SampleMemory() {
  const auto t0 = std::chrono::steady_clock::now();
  MemoryReading reading;
  PressureInput in;
  const HostMemInfo mi = memory_probe_->ReadMemInfo();
  reading.available_mib = in.available_mib = mi.available_mib;
  std::set<pid_t> seen;
  auto adjust_oom = [&](pid_t pid, int adj) {
    seen.insert(pid);
    if (oom_adjusted_.count(pid)) return;
    if (Status st = memory_probe_->SetOomScoreAdj(pid, adj); !st.ok()) {
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
  std::set<std::string> streaming;
  {
    std::lock_guard<std::mutex> l(streams_mu_);
    for (const auto& [id, v] : streams_) {
      for (const auto& w : v) {
        if (!w.expired()) {
          streaming.insert(id);
          break;
        }
      }
    }
  }
  const int64_t now_ms = NowUnixMs();
  for (const auto& sb : manager_->VisibleList()) {
    if (sb->state() != SandboxState::kRunning) continue;
    const pid_t pid = sb->vmm_pid();
    if (pid <= 0) continue;
    auto v = memory_probe_->ReadVmm(pid);
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
  const auto parked = manager_->warm_pool().VmmPids();
  for (pid_t pid : parked) {
    auto v = memory_probe_->ReadVmm(pid);
    if (!v.ok()) continue;
    pool_held += v->held_mib();
    adjust_oom(pid, kPooledVmmOomScoreAdj);
  }
  std::erase_if(oom_adjusted_, [&](pid_t p) { return !seen.count(p); });
  pool_held_mib_ = pool_held;
  in.now_ms = now_ms;
  in.was_under = memory_under_.load();
  in.pool_parked = static_cast<int>(parked.size());
  in.pause_in_flight = pressure_pause_in_flight_.load();
  PressurePlan plan = PlanPressure(config_.pressure, in);
  reading.pressure = plan.under;
  if (plan.under != in.was_under) {
    if (plan.under)
      LOG_WARN("memory pressure: {}: refusing creates, shrinking the warm pool", plan.why);
    else
      LOG_WARN("memory pressure over: MemAvailable {} MiB", mi.available_mib);
  }
  memory_under_ = plan.under;
  admission_->UpdateMemory(reading);
  {
    // Forget the activity of sandboxes that are gone.
    std::lock_guard<std::mutex> l(activity_mu_);
    std::erase_if(last_active_ms_, [this](const auto& kv) { return !manager_->Get(kv.first); });
  }
  memory_sample_us_ =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  if (!plan.pause_id.empty() && !pressure_pause_in_flight_.exchange(true)) {
    asio::post(*workers_, [this, id = plan.pause_id, why = plan.why] { PauseForPressure(id, why); });
  }
  memory_sampling_ = false;
}

void Server::PauseForPressure(const std::string& id, const std::string& why) {
  LOG_WARN("sandbox={} memory pressure: {}", id, why);
  PauseOptions opts;
  opts.keep_memory = true;
  auto r = manager_->Pause(id, opts);
  if (r.ok()) {
    metrics_.PressurePause();
    AddLog(id, "warn", "paused by the host's memory-pressure policy (" + why + "); it resumes on connect");
    Audit({{"action", "sandbox.pressure_pause"}, {"sandbox", id}, {"reason", why}});
  } else {
    LOG_WARN("sandbox={} memory-pressure pause failed: {}", id, r.status().message());
  }
  pressure_pause_in_flight_ = false;
}

}  // namespace airlock::server
