// Admission control for sandbox creates (docs/limits.md): per-API-key and
// global caps on live sandboxes, on creates per second (token buckets) and
// on creates in flight, plus host memory protection.
//
// A create that does not fit waits in a bounded queue, one FIFO per API key
// served round-robin (a key with a burst cannot starve another key). It is
// answered when it fits (granted), or after `queue_timeout` with 429 and a
// Retry-After (the E2B SDK retries those; the value estimates when a slot
// frees: waiting creates × average create time / creates in flight), or at once with 429 when the
// key's queue is full. A create whose memory would take the host's committed
// memory above ratio × physical memory is refused at once with 503 and a
// message giving the numbers (waiting would not make a long-lived sandbox go
// away; the client decides).
//
// Times come from the caller (Pump(now)), so the logic is testable with a
// fake clock. Thread-safe; callbacks run outside the lock, on the thread
// that called Request/Pump/CreateDone.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace airlock::server {

struct AdmissionConfig {
  int max_sandboxes = 100;         // live + being created, all keys; 0: no cap
  int max_sandboxes_per_key = 50;  // 0: no cap
  double creates_per_second = 10;  // global refill rate; 0: no cap
  double create_burst = 20;        // global bucket size
  double creates_per_second_per_key = 5;
  double create_burst_per_key = 10;
  int max_creates_in_flight = 2;  // boots at the same time; 0: no cap
  std::chrono::milliseconds queue_timeout{std::chrono::seconds(20)};
  size_t max_queue_per_key = 64;
  int64_t host_memory_mib = 0;           // 0: MemTotal of /proc/meminfo
  double memory_overcommit_ratio = 1.5;  // committed guest memory ≤ ratio × host; 0: no check
};

struct AdmissionDecision {
  bool granted = false;
  uint64_t ticket = 0;    // granted: pass to CreateDone
  int http_status = 0;    // refused: 429 or 503
  int retry_after_s = 0;  // 429: seconds for Retry-After
  std::string message;
};

struct AdmissionStats {
  int live = 0, in_flight = 0;
  size_t queued = 0;
  int64_t committed_memory_mib = 0;
  uint64_t granted = 0, rejected_rate = 0, rejected_memory = 0, queue_timeouts = 0;
};

class Admission {
 public:
  using Clock = std::chrono::steady_clock;
  using Callback = std::function<void(AdmissionDecision)>;

  explicit Admission(AdmissionConfig config);
  void Request(const std::string& key, int memory_mib, Clock::time_point now, Callback cb);
  // The create of `ticket` finished: with a sandbox id it keeps its slot and
  // memory until SandboxGone; with "" (failed) both are released.
  void CreateDone(uint64_t ticket, const std::string& sandbox_id, Clock::time_point now);
  void SandboxGone(const std::string& sandbox_id, Clock::time_point now);
  // A sandbox that exists without a create (adopted after a restart).
  void Adopt(const std::string& sandbox_id, const std::string& key, int memory_mib);
  // Grants what fits, expires what waited too long. Returns when to call
  // again for a time-based change (token refill, a queue deadline).
  std::optional<Clock::time_point> Pump(Clock::time_point now);
  AdmissionStats stats() const;
  const AdmissionConfig& config() const { return config_; }

 private:
  struct Waiter {
    uint64_t ticket;
    int memory_mib;
    Clock::time_point deadline;
    Callback cb;
  };
  struct Bucket {
    double tokens = 0;
    Clock::time_point last{};
    bool init = false;
  };
  struct Holder {
    std::string key;
    int memory_mib = 0;
    Clock::time_point granted_at{};
  };
  void Refill(Bucket& b, double rate, double burst, Clock::time_point now) const;
  std::string MemoryProblem(int memory_mib) const;  // "" when it fits
  std::optional<Clock::time_point> PumpLocked(Clock::time_point now,
                                              std::vector<std::pair<Callback, AdmissionDecision>>* out);
  int RetryAfter(size_t waiting) const;  // seconds, 1..60

  AdmissionConfig config_;
  int64_t host_memory_mib_ = 0;
  mutable std::mutex mu_;
  uint64_t next_ticket_ = 1;
  std::map<std::string, std::deque<Waiter>> queues_;
  std::map<std::string, uint64_t> last_served_;  // key → serve_clock_ at its last answer
  uint64_t serve_clock_ = 0;
  Bucket global_;
  std::map<std::string, Bucket> key_buckets_;
  std::map<uint64_t, Holder> in_flight_;  // ticket → holder
  std::map<std::string, Holder> live_;    // sandbox id → holder
  std::map<std::string, int> per_key_;    // live + in flight
  int64_t committed_mib_ = 0;
  double avg_create_s_ = 5.0;  // EWMA of create times
  AdmissionStats counters_;
};

// MemTotal from /proc/meminfo in MiB (0 if unreadable).
int64_t HostMemoryMib();

}  // namespace airlock::server
