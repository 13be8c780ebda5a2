// The daemon's memory governor (docs/limits.md "Host memory", "Memory
// pressure"): one reading of the host's memory at a time, every `interval`,
// feeding Admission (whose create path then only compares sums), the warm
// pool (memory_short) and the pressure policy (memory_pressure.h), whose
// pause it carries out.
//
// A reading: MemAvailable, and each running sandbox's and each parked VMM's
// smaps_rollup through MemoryProbe; the same sweep sets each VMM's
// oom_score_adj once (kVmmOomScoreAdj, kPooledVmmOomScoreAdj).
//
// Threads: the timer runs on the io_context it is given; each reading and
// each pressure pause runs through Hooks::run_blocking (the daemon's
// workers), never two readings at once (a slow sweep delays the next) and
// never two pauses at once. Start() takes the first reading on the caller's
// thread. NoteActivity and the accessors are thread-safe. Stop() must run
// on the io thread; the owner joins its workers before destroying this.
// Errors: a VMM that cannot be read is skipped (logged at debug); a failed
// pause is logged and the next reading decides again.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "control/admission.h"
#include "control/host_memory.h"
#include "control/memory_pressure.h"

namespace airlock {
class Manager;
}

namespace airlock::control {

struct MemoryGovernorConfig {
  std::chrono::milliseconds interval{2000};  // 0: never read (no pressure, no held figures)
  PressureConfig pressure;
};

class MemoryGovernor {
 public:
  struct Hooks {
    // Runs blocking work on a worker thread.
    std::function<void(std::function<void()>)> run_blocking;
    // The sandboxes with a live data-plane exchange now (in use now).
    std::function<std::set<std::string>()> streaming;
    // A pressure pause of sandbox `id` succeeded (`why`: the numbers); on a worker.
    std::function<void(const std::string& id, const std::string& why)> paused;
  };

  MemoryGovernor(Manager& manager, Admission& admission, boost::asio::io_context& io, MemoryGovernorConfig config,
                 std::unique_ptr<MemoryProbe> probe, Hooks hooks);

  // A first reading now, on this thread (before the warm pool starts and
  // before any create), then one every interval; nothing when interval is 0.
  void Start();
  void Stop();  // io thread: no further reading starts

  // A data-plane request reached sandbox `id` (the pressure policy pauses
  // the longest idle first).
  void NoteActivity(const std::string& id);
  // When `id` last had one (Unix ms; 0: never since this daemon started).
  int64_t LastActive(const std::string& id);
  // The last reading's verdict: short of memory (creates refused, pool shrinks).
  bool under() const { return under_.load(); }
  // What the parked VMMs held at the last reading, MiB.
  int64_t pool_held_mib() const { return pool_held_mib_.load(); }
  // How long the last reading took, seconds.
  double last_reading_seconds() const { return static_cast<double>(reading_us_.load()) / 1e6; }

 private:
  void Schedule();
  void Read();  // worker thread (or Start's)
  void PauseForPressure(const std::string& id, const std::string& why);

  Manager& manager_;
  Admission& admission_;
  MemoryGovernorConfig config_;
  std::unique_ptr<MemoryProbe> probe_;
  Hooks hooks_;
  boost::asio::steady_timer timer_;
  std::atomic<bool> reading_{false};
  std::atomic<bool> under_{false};
  std::atomic<bool> pause_in_flight_{false};
  std::atomic<int64_t> pool_held_mib_{0};
  std::atomic<int64_t> reading_us_{0};
  std::set<pid_t> oom_adjusted_;  // VMM pids whose oom_score_adj is set (Read only)
  std::mutex activity_mu_;
  std::map<std::string, int64_t> last_active_ms_;  // sandbox id → last data-plane request (guarded by activity_mu_)
};

}  // namespace airlock::control
