// The reaper (core/reaper.h).
#include "core/reaper.h"

#include <algorithm>
#include <optional>

#include "common/clock.h"
#include "common/log.h"
#include "core/manager.h"

namespace airlock {

int LifetimeCaps::For(std::string_view team) const {
  auto it = per_team.find(team);
  return it != per_team.end() ? it->second : default_s;
}

int LifetimeCaps::Longest() const {
  int longest = default_s;
  if (longest <= 0) return 0;
  for (const auto& [team, s] : per_team) {
    if (s <= 0) return 0;
    longest = std::max(longest, s);
  }
  return longest;
}

int64_t LifetimeCaps::EndMs(std::string_view team, int64_t created_at_ms) const {
  const int cap_s = For(team);
  if (cap_s <= 0 || created_at_ms <= 0) return 0;
  return created_at_ms + int64_t{cap_s} * 1000;
}

TimeVerdict DecideByTime(const Sandbox::Clock& c, const LifetimeCaps& caps, int64_t now_ms) {
  const int64_t cap_at = caps.EndMs(c.owner_team, c.created_at_ms);
  if (c.state == SandboxState::kPaused) return cap_at > 0 && cap_at <= now_ms ? TimeVerdict::kLifetimeCap : TimeVerdict::kKeep;
  if (c.state != SandboxState::kRunning) return TimeVerdict::kKeep;
  const bool ttl_due = c.ends_at_ms > 0 && c.ends_at_ms <= now_ms;
  const bool cap_due = cap_at > 0 && cap_at <= now_ms;
  // Both passed between two ticks: the one that came first decides (a TTL
  // first still pauses an autoPause sandbox).
  if (ttl_due && (!cap_due || c.ends_at_ms <= cap_at)) return TimeVerdict::kTtlExpired;
  if (cap_due) return TimeVerdict::kLifetimeCap;
  return TimeVerdict::kKeep;
}

Reaper::Reaper(Manager& manager, ReaperConfig config) : shared_(std::make_shared<Shared>()) {
  shared_->manager = &manager;
  shared_->config = std::move(config);
}

Reaper::~Reaper() { Stop(); }

void Reaper::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable() || shared_->config.interval.count() <= 0) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void Reaper::Stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  cv_.notify_all();
  if (t.joinable()) t.join();
}

void Reaper::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (cv_.wait_for(l, shared_->config.interval, [this] { return stop_; })) break;
    l.unlock();
    ReapOnce();
    l.lock();
  }
}

void Reaper::RunBlocking(const std::shared_ptr<Shared>& s, std::function<void()> work) {
  if (s->config.run_blocking) return s->config.run_blocking(std::move(work));
  std::thread(std::move(work)).detach();
}

void Reaper::EndAndDestroy(const std::shared_ptr<Shared>& s, const std::string& id, SandboxOutcome outcome,
                           std::string detail) {
  if (!s->manager->End(id, outcome, std::move(detail)).ok()) return;  // gone, or its end is already decided
  RunBlocking(s, [m = s->manager, id] {
    Status st = m->Destroy(id);
    if (!st.ok() && st.code() != StatusCode::kNotFound) LOG_WARN("sandbox={} destroy: {}", id, st.message());
  });
}

void Reaper::AutoPause(const std::shared_ptr<Shared>& s, const std::string& id, bool keep_memory) {
  LOG_INFO("sandbox={} TTL expired: pausing (autoPause)", id);
  RunBlocking(s, [s, id, keep_memory] {
    PauseOptions opts;
    opts.keep_memory = keep_memory;
    auto r = s->manager->Pause(id, opts);
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->auto_pausing.erase(id);
    }
    if (r.ok()) {
      if (auto sb = s->manager->Get(id)) sb->AddLog("info", "paused at TTL (autoPause)");
      return;
    }
    // A sandbox that cannot be paused is not kept past its TTL.
    LOG_WARN("sandbox={} autoPause failed, killing: {}", id, r.status().message());
    EndAndDestroy(s, id, SandboxOutcome::kAutoPauseFailed, r.status().message());
  });
}

void Reaper::IdlePause(const std::shared_ptr<Shared>& s, const std::string& id, int64_t idle_ms, bool processes) {
  RunBlocking(s, [s, id, idle_ms, processes] {
    auto done = [&](std::optional<int64_t> retry_at) {
      std::lock_guard<std::mutex> l(s->mu);
      s->idle_checking.erase(id);
      if (retry_at) {
        s->idle_retry_at_ms[id] = *retry_at;
      } else {
        s->idle_retry_at_ms.erase(id);
      }
    };
    // Asked here, off the reaper's thread: with `processes` it asks the guest.
    if (s->config.kept_awake(id, processes)) return done(std::nullopt);
    LOG_INFO("sandbox={} idle for {} s: pausing (idle sleep)", id, idle_ms / 1000);
    PauseOptions opts;
    opts.keep_memory = true;
    auto r = s->manager->Pause(id, opts);
    if (r.ok()) {
      if (auto sb = s->manager->Get(id)) {
        sb->AddLog("info", "paused after " + std::to_string(idle_ms / 1000) + " s idle (idle sleep)");
      }
      return done(std::nullopt);
    }
    LOG_WARN("sandbox={} idle sleep: pause failed, it keeps running: {}", id, r.status().message());
    done(NowUnixMs() + std::max<int64_t>(s->config.interval.count(), 1000) * 10);
  });
}

void Reaper::ReapOnce() {
  const std::shared_ptr<Shared>& s = shared_;
  const int64_t now = NowUnixMs();
  struct Due {
    std::string id;
    SandboxOutcome outcome;
    bool auto_pause = false;
    bool keep_memory = true;
  };
  std::vector<Due> due;
  const auto visible = s->manager->VisibleList();
  for (const auto& sb : visible) {
    const Sandbox::Clock c = sb->clock();
    // Only a running sandbox's clock runs: a paused one has no TTL until
    // resumed, and one pausing, resuming or rolling back is decided on the
    // next tick, after its operation (a resume sets the new TTL first).
    // A paused one only meets its lifetime cap.
    if (c.state != SandboxState::kRunning && c.state != SandboxState::kPaused) continue;
    const TimeVerdict verdict = DecideByTime(c, s->config.lifetime, now);
    if (c.state == SandboxState::kPaused) {
      if (verdict == TimeVerdict::kLifetimeCap) due.push_back({sb->id(), SandboxOutcome::kLifetimeCap});
      continue;
    }
    if (verdict == TimeVerdict::kTtlExpired) {
      due.push_back({sb->id(), SandboxOutcome::kTtlExpired, c.auto_pause, c.auto_pause_memory});
    } else if (verdict == TimeVerdict::kLifetimeCap) {
      due.push_back({sb->id(), SandboxOutcome::kLifetimeCap});
    } else if (c.idle_timeout_ms > 0 && s->config.last_active_ms && s->config.kept_awake) {
      const int64_t since = std::max(s->config.last_active_ms(sb->id()), c.running_since_ms);
      if (since > 0 && now - since >= c.idle_timeout_ms) {
        std::lock_guard<std::mutex> l(s->mu);
        auto retry = s->idle_retry_at_ms.find(sb->id());
        if ((retry == s->idle_retry_at_ms.end() || now >= retry->second) && s->idle_checking.insert(sb->id()).second) {
          IdlePause(s, sb->id(), now - since, c.idle_keeps_processes);
        }
      }
    }
  }
  // A failed idle pause's retry time outlives no sandbox: without this, the
  // map would keep one entry per such sandbox for the daemon's life.
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (!s->idle_retry_at_ms.empty()) {
      std::set<std::string_view> ids;
      for (const auto& sb : visible) ids.insert(sb->id());
      std::erase_if(s->idle_retry_at_ms, [&](const auto& kv) { return !ids.count(kv.first); });
    }
  }
  for (auto& d : due) {
    if (d.auto_pause) {
      bool first = false;
      {
        std::lock_guard<std::mutex> l(s->mu);
        first = s->auto_pausing.insert(d.id).second;
      }
      if (first) AutoPause(s, d.id, d.keep_memory);
      continue;
    }
    EndAndDestroy(s, d.id, d.outcome, "");
  }
  // A guest that died (panic, QEMU crash, OOM kill) is noticed within a
  // tick: ended with its outcome and torn down, instead of staying
  // "running" until its TTL. One scan at a time.
  if (!s->death_check_in_flight.exchange(true)) {
    RunBlocking(s, [s] {
      auto dead = s->manager->DeadSandboxes();
      s->death_check_in_flight = false;
      for (auto& d : dead) {
        LOG_WARN("sandbox={} died: vmm exited {}", d.id, d.detail);
        EndAndDestroy(s, d.id, SandboxOutcome::kVmmExited, d.detail);
      }
    });
  }
}

}  // namespace airlock
