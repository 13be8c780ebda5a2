// Resource-use history per sandbox for GET /sandboxes/{id}/metrics (spec
// §1.4 #8, §1.5.4), as E2B serves it from its metrics store. airlock keeps
// it itself: every `interval` (5 s, E2B's export period) one sweep asks each
// running sandbox's agent for /metrics and appends one sample to the
// sandbox's history (bounded: the newest kMaxSamples, an hour at 5 s; gone
// with the sandbox, Forget). A request whose interval reaches the present
// takes a fresh sample first (SampleNow), so a sandbox created a moment ago
// already has a point.
//
// Threads: the timer runs on the io_context it is given; sweeps run through
// run_blocking (the daemon's workers), one at a time (a slow agent delays
// the next sweep, never stacks them). Everything else is thread-safe.
// Stop() runs on the io thread. Errors: an agent that does not answer is
// skipped by a sweep (logged at debug) and is SampleNow's Unavailable.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace airlock {
class Manager;
struct SandboxRecord;
}  // namespace airlock

namespace airlock::control {

// One sample of a sandbox's resource use, taken by the daemon from the
// agent's /metrics; ts_s is the daemon's clock (Unix seconds), never the guest's.
struct MetricSample {
  int64_t ts_s = 0;
  int cpu_count = 0;
  double cpu_used_pct = 0;
  int64_t mem_used = 0, mem_total = 0, mem_cache = 0, disk_used = 0, disk_total = 0;
};
// The interval of GET /sandboxes/{id}/metrics?start=&end= (Unix seconds,
// both inclusive). Omitted start: the sandbox's start; omitted end: now
// (E2B's defaults). InvalidArgument naming the parameter when one is not a
// non-negative integer, or when start is after end (E2B answers 400 too).
struct MetricsRange {
  int64_t start_s = 0;
  int64_t end_s = 0;
};
StatusOr<MetricsRange> ParseMetricsRange(const std::optional<std::string>& start, const std::optional<std::string>& end,
                                         int64_t sandbox_start_s, int64_t now_s);
// E2B's step for a range (clickhouse utils CalculateStep: < 1 h: 5 s, < 6 h:
// 30 s, < 12 h: 1 min, < 24 h: 2 min, < 7 d: 5 min, else 15 min), which
// keeps an answer under 1000 points.
int64_t MetricsStep(int64_t range_s);
// The samples of `history` (oldest first) inside `range`, at most one per
// step (the newest sample of each step-wide bucket counted from start).
std::vector<MetricSample> SelectMetrics(const std::deque<MetricSample>& history, const MetricsRange& range);
// E2B's SandboxMetric JSON of one sample.
nlohmann::json MetricJson(const MetricSample& m);

class MetricsSampler {
 public:
  static constexpr size_t kMaxSamples = 720;  // one hour at the default 5 s

  // interval 0: no sweeps (SampleNow still records).
  MetricsSampler(Manager& manager, boost::asio::io_context& io, std::chrono::milliseconds interval,
                 std::function<void(std::function<void()>)> run_blocking);

  void Start();
  void Stop();  // io thread

  // A fresh sample of `rec`'s agent, recorded; blocks up to `timeout`.
  // Unavailable when the agent does not answer.
  StatusOr<MetricSample> SampleNow(const SandboxRecord& rec, std::chrono::seconds timeout);
  // The samples of sandbox `id` inside `range` (SelectMetrics); nullopt
  // when the API no longer shows the sandbox.
  std::optional<std::vector<MetricSample>> Points(const std::string& id, const MetricsRange& range);
  // The newest sample of sandbox `id`, if any.
  std::optional<MetricSample> Latest(const std::string& id);
  // The sandbox ended: its history goes.
  void Forget(const std::string& id);

 private:
  void Schedule();
  void SweepAll();  // worker thread
  void Record(const std::string& id, const MetricSample& m);

  Manager& manager_;
  std::chrono::milliseconds interval_;
  std::function<void(std::function<void()>)> run_blocking_;
  boost::asio::steady_timer timer_;
  std::atomic<bool> sweeping_{false};
  std::mutex mu_;
  std::map<std::string, std::deque<MetricSample>> history_;  // oldest first; guarded by mu_
};

}  // namespace airlock::control
