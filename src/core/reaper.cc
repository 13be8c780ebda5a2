// The reaper (Manager::StartReaper, manager.h): one thread of the manager
// that ends sandboxes by time (TTL, lifetime cap), pauses them at TTL when
// they asked for autoPause, and notices VMMs that died. The decisions are
// taken here, in core; the blocking work (destroy, pause, the dead-VMM
// scan) runs on ManagerConfig::run_blocking so one slow teardown never
// delays the next tick.
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "core/manager.h"

namespace airlock {

void Manager::StartReaper() {
  std::lock_guard<std::mutex> l(reaper_mu_);
  if (reaper_.joinable() || config_.reaper_interval.count() <= 0) return;
  reaper_stop_ = false;
  reaper_ = std::thread([this] { ReaperLoop(); });
}

void Manager::StopReaper() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(reaper_mu_);
    reaper_stop_ = true;
    t = std::move(reaper_);
  }
  reaper_cv_.notify_all();
  if (t.joinable()) t.join();
}

void Manager::ReaperLoop() {
  std::unique_lock<std::mutex> l(reaper_mu_);
  while (!reaper_stop_) {
    if (reaper_cv_.wait_for(l, config_.reaper_interval, [this] { return reaper_stop_; })) break;
    l.unlock();
    ReapOnce();
    l.lock();
  }
}

void Manager::RunBlocking(std::function<void()> work) {
  if (config_.run_blocking) return config_.run_blocking(std::move(work));
  std::thread(std::move(work)).detach();
}

void Manager::EndAndDestroy(const std::string& id, SandboxOutcome outcome, std::string detail) {
  if (!End(id, outcome, std::move(detail)).ok()) return;  // gone, or its end is already decided
  RunBlocking([this, id] {
    Status st = Destroy(id);
    if (!st.ok() && st.code() != StatusCode::kNotFound) LOG_WARN("sandbox={} destroy: {}", id, st.message());
  });
}

void Manager::AutoPause(const std::string& id, bool keep_memory) {
  LOG_INFO("sandbox={} TTL expired: pausing (autoPause)", id);
  RunBlocking([this, id, keep_memory] {
    PauseOptions opts;
    opts.keep_memory = keep_memory;
    auto r = Pause(id, opts);
    {
      std::lock_guard<std::mutex> l(mu_);
      auto_pausing_.erase(id);
    }
    if (r.ok()) {
      if (auto sb = Get(id)) sb->AddLog("info", "paused at TTL (autoPause)");
      return;
    }
    // A sandbox that cannot be paused is not kept past its TTL.
    LOG_WARN("sandbox={} autoPause failed, killing: {}", id, r.status().message());
    EndAndDestroy(id, SandboxOutcome::kAutoPauseFailed, r.status().message());
  });
}

void Manager::ReapOnce() {
  const int64_t now = NowUnixMs();
  struct Due {
    std::string id;
    SandboxOutcome outcome;
    bool auto_pause = false;
    bool keep_memory = true;
  };
  std::vector<Due> due;
  for (const auto& sb : VisibleList()) {
    SandboxState state;
    int64_t ends = 0, created = 0;
    bool auto_pause = false, keep_memory = true;
    {
      std::lock_guard<std::mutex> l(sb->mu_);
      state = sb->state_;
      ends = sb->ends_at_ms_;
      created = sb->created_at_ms_;
      auto_pause = sb->attrs_.auto_pause;
      keep_memory = sb->attrs_.auto_pause_memory;
    }
    // Only a running sandbox's clock runs: a paused one has no TTL until
    // resumed, and one pausing, resuming or rolling back is decided on the
    // next tick, after its operation (a resume sets the new TTL first).
    if (state != SandboxState::kRunning) continue;
    if (ends > 0 && ends <= now) {
      due.push_back({sb->id(), SandboxOutcome::kTtlExpired, auto_pause, keep_memory});
    } else if (config_.max_lifetime_s > 0 && created > 0 && now >= created + int64_t{config_.max_lifetime_s} * 1000) {
      due.push_back({sb->id(), SandboxOutcome::kLifetimeCap});
    }
  }
  for (auto& d : due) {
    if (d.auto_pause) {
      bool first = false;
      {
        std::lock_guard<std::mutex> l(mu_);
        first = auto_pausing_.insert(d.id).second;
      }
      if (first) AutoPause(d.id, d.keep_memory);
      continue;
    }
    EndAndDestroy(d.id, d.outcome, "");
  }
  // A guest that died (panic, QEMU crash, OOM kill) is noticed within a
  // tick: ended with its outcome and torn down, instead of staying
  // "running" until its TTL. One scan at a time.
  if (!death_check_in_flight_.exchange(true)) {
    RunBlocking([this] {
      auto dead = DeadSandboxes();
      death_check_in_flight_ = false;
      for (auto& d : dead) {
        LOG_WARN("sandbox={} died: vmm exited {}", d.id, d.detail);
        EndAndDestroy(d.id, SandboxOutcome::kVmmExited, d.detail);
      }
    });
  }
}

}  // namespace airlock
