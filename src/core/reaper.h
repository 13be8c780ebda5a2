// The reaper: a thread that ends sandboxes by time and notices dead ones.
// It also puts idle sandboxes to sleep: one whose idle interval passed
// since its last data-plane request (or since it last started running),
// with nothing keeping it awake, is paused with its memory; its autoResume
// wakes it on the next request. A failed idle pause is logged and tried
// again an interval later (the sandbox keeps running).
// Every `interval` it ends running sandboxes whose TTL passed (kTtlExpired;
// with autoPause on it pauses them instead, kAutoPauseFailed when that
// fails), that reached their lifetime cap (LifetimeCaps: serve
// --max-lifetime, or --team-max-lifetime for their team; kLifetimeCap), or
// whose VMM died (kVmmExited, with the console's last line). Paused
// sandboxes have no TTL and meet no cap until resumed, and one pausing,
// resuming or rolling back is decided on the next tick, after its operation.
//
// The decisions are taken here, in core, through the Manager's public
// operations (VisibleList, End, Destroy, Pause, DeadSandboxes); the blocking
// work (a destroy, an autoPause, the dead-VMM scan) runs on
// ReaperConfig::run_blocking so one slow teardown never delays the next tick.
// The Manager must outlive the reaper and every piece of work it handed to
// run_blocking (the daemon joins its workers before the Manager goes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "core/sandbox.h"
#include "core/sandbox_state.h"

namespace airlock {

class Manager;

// How long after its create a sandbox may run, whatever its TTL (serve
// --max-lifetime, --team-max-lifetime; docs/limits.md). The cap is the
// reaper's alone: a TTL set or extended (POST /sandboxes/{id}/timeout,
// /refreshes, a connect) is clamped by --max-timeout only, and the reaper
// ends the sandbox at whichever of its TTL and its cap comes first, so no
// extension carries it past its cap.
struct LifetimeCaps {
  int default_s = 0;  // --max-lifetime, seconds; 0: no cap
  // --team-max-lifetime TEAM=S: replaces default_s for the sandboxes whose
  // owner_team is TEAM, shorter or longer; 0: no cap for them.
  std::map<std::string, int, std::less<>> per_team;

  // The cap of a sandbox of `team`, seconds; 0: none.
  int For(std::string_view team) const;
  // The longest any sandbox may run, seconds; 0: some may run without end.
  int Longest() const;
  // Unix ms at which a sandbox of `team` created at `created_at_ms`
  // reaches its cap; 0: never (no cap, or not created yet).
  int64_t EndMs(std::string_view team, int64_t created_at_ms) const;
};

// What the clock alone says of a sandbox at `now_ms` (idle sleep and dead
// VMMs are decided apart): for a running one, kTtlExpired when its TTL
// passed first (its autoPause applies), kLifetimeCap when its cap did; a
// paused one has no TTL running but its cap still counts from its create
// (kLifetimeCap: a sandbox asleep for ever would keep its snapshot for
// ever); kKeep otherwise, and for a sandbox in mid-operation.
enum class TimeVerdict { kKeep, kTtlExpired, kLifetimeCap };
TimeVerdict DecideByTime(const Sandbox::Clock& c, const LifetimeCaps& caps, int64_t now_ms);

struct ReaperConfig {
  std::chrono::milliseconds interval{1000};  // <= 0: Start does nothing
  LifetimeCaps lifetime;                     // no caps by default
  // Where blocking work runs; empty: a detached thread each.
  std::function<void(std::function<void()>)> run_blocking;
  // Idle sleep (Sandbox::Clock::idle_timeout_ms): when sandbox `id` last had
  // a data-plane request (Unix ms; 0: none), and whether something keeps it
  // awake now (an open stream; with `processes`, also a process started
  // through the API that still runs; may block: asked on run_blocking).
  // Either empty: no idle sleep.
  std::function<int64_t(const std::string& id)> last_active_ms;
  std::function<bool(const std::string& id, bool processes)> kept_awake;
};

class Reaper {
 public:
  Reaper(Manager& manager, ReaperConfig config);
  ~Reaper();  // Stop()
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  void Start();
  // Joins the thread; work already handed to run_blocking still runs.
  void Stop();
  // One pass, on the calling thread (its blocking work goes to run_blocking).
  void ReapOnce();

 private:
  // What a pass hands to blocking work: shared, so that work outliving the
  // Reaper object still finds it.
  struct Shared {
    Manager* manager = nullptr;
    ReaperConfig config;
    std::mutex mu;
    std::set<std::string> auto_pausing;  // guarded by mu
    std::set<std::string> idle_checking;  // guarded by mu: an idle check or pause in flight
    std::map<std::string, int64_t> idle_retry_at_ms;  // guarded by mu: after a failed idle pause
    std::atomic<bool> death_check_in_flight{false};
  };
  static void RunBlocking(const std::shared_ptr<Shared>& s, std::function<void()> work);
  static void EndAndDestroy(const std::shared_ptr<Shared>& s, const std::string& id, SandboxOutcome outcome,
                            std::string detail);
  static void AutoPause(const std::shared_ptr<Shared>& s, const std::string& id, bool keep_memory);
  static void IdlePause(const std::shared_ptr<Shared>& s, const std::string& id, int64_t idle_ms, bool processes);
  void Loop();

  std::shared_ptr<Shared> shared_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace airlock
