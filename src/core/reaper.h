// The reaper: a thread that ends sandboxes by time and notices dead ones.
// It also puts idle sandboxes to sleep: one whose idle interval passed
// since its last data-plane request (or since it last started running),
// with nothing keeping it awake, is paused with its memory; its autoResume
// wakes it on the next request. A failed idle pause is logged and tried
// again an interval later (the sandbox keeps running).
// Every `interval` it ends running sandboxes whose TTL passed (kTtlExpired;
// with autoPause on it pauses them instead, kAutoPauseFailed when that
// fails), that reached max_lifetime_s (kLifetimeCap), or whose VMM died
// (kVmmExited, with the console's last line). Paused sandboxes have no TTL
// until resumed, and one pausing, resuming or rolling back is decided on the
// next tick, after its operation.
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
#include <thread>

#include "core/sandbox_state.h"

namespace airlock {

class Manager;

struct ReaperConfig {
  std::chrono::milliseconds interval{1000};  // <= 0: Start does nothing
  int max_lifetime_s = 0;                    // serve --max-lifetime: seconds after create; 0: no cap
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
