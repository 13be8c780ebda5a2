// Admission control for sandbox creates (docs/limits.md): per-API-key and
// global caps on live sandboxes, on creates per second (token buckets) and
// on creates in flight, plus host memory protection.
//
// A create that does not fit waits in a bounded queue, one FIFO per API key
// served round-robin (a key with a burst cannot starve another key). It is
// answered when it fits (granted), or after `queue_timeout` with 429 and a
// Retry-After (the E2B SDK retries those; the value estimates when a slot
// frees: waiting creates × average create time / creates in flight), or at once with 429 when the
// key's queue is full.
//
// Host memory (docs/limits.md "Host memory"): a create is refused at once
// with 503 and the numbers (waiting would not make a long-lived sandbox go
// away; the client decides) when
//  - held: Σ charge(sandbox) + asked > host memory − host reserve, where a
//    sandbox measured by the sampler is charged max(what its VMM holds,
//    growth × its memoryMB) and one not measured yet (booting, or admitted
//    since the last reading) its whole memoryMB; the new one asks its
//    memoryMB;
//  - pressure: the pressure policy says the host is short (memory_pressure.h),
//    or MemAvailable − memoryMB of the unmeasured − asked < pressure level;
//  - nominal (off by default): Σ memoryMB + asked > ratio × host memory.
// UpdateMemory hands in each reading (O(live sandboxes), on the sampler's
// thread); the create path only compares running sums: O(1).
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

namespace airlock::control {

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
  int64_t host_memory_mib = 0;         // 0: MemTotal of /proc/meminfo
  double memory_overcommit_ratio = 0;  // nominal cap: Σ memoryMB ≤ ratio × host; 0: no check
  // The held-memory rule (see above); false: off (the pressure rules stay;
  // memory_pressure_mib 0 turns them off).
  bool held_memory = true;
  int64_t memory_host_reserve_mib = 2048;  // never promised to sandboxes
  double memory_growth_reserve = 0.25;     // a measured sandbox counts at least this × its memoryMB
  int64_t memory_pressure_mib = 2048;      // MemAvailable kept free (with what unmeasured creates may take)
};

// One reading of the sampler (control/memory_governor.h).
struct MemoryReading {
  // What the VMM of each measured live sandbox holds (host_memory.h), MiB.
  // A live sandbox missing here keeps its previous figure (or none).
  std::map<std::string, int64_t> held_mib;
  int64_t available_mib = -1;  // MemAvailable; -1 unknown (no check)
  bool pressure = false;       // the pressure policy's verdict
};

struct AdmissionDecision {
  bool granted = false;
  uint64_t ticket = 0;    // granted: pass to CreateDone
  int http_status = 0;    // refused: 429 or 503
  int retry_after_s = 0;  // 429: seconds for Retry-After
  std::string message;
  // refused: "limit" (429), "held_memory", "pressure", "memory" (nominal cap) (503)
  std::string reason;
};

struct AdmissionStats {
  int live = 0, in_flight = 0;
  size_t queued = 0;
  int64_t committed_memory_mib = 0;  // Σ memoryMB (nominal)
  // What held-memory admission sees (MiB): held by measured sandboxes, their
  // growth reserve, memoryMB of the unmeasured ones (and how many), the
  // budget (host memory − host reserve), MemAvailable at the last reading.
  int64_t held_mib = 0, growth_reserve_mib = 0, unmeasured_mib = 0, budget_mib = 0, available_mib = -1;
  int unmeasured = 0;
  bool pressure = false;
  uint64_t granted = 0, rejected_rate = 0, rejected_memory = 0, queue_timeouts = 0;
  uint64_t rejected_held = 0, rejected_pressure = 0;
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
  // A sandbox that exists without a create (adopted after a restart, a
  // fork child).
  void Adopt(const std::string& sandbox_id, const std::string& key, int memory_mib);
  // The memory rules alone, for sandboxes that do not queue (fork
  // children): "" when `memory_mib` more fits; else the refusal message and
  // *reason (counted as a refusal).
  std::string CheckMemory(int memory_mib, std::string* reason);
  // Grants what fits, expires what waited too long. Returns when to call
  // again for a time-based change (token refill, a queue deadline).
  std::optional<Clock::time_point> Pump(Clock::time_point now);
  // A new reading of what sandboxes hold and of the host (see above).
  void UpdateMemory(const MemoryReading& reading);
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
    int64_t held_mib = -1;  // what its VMM holds at the last reading; -1: not measured
  };
  void Refill(Bucket& b, double rate, double burst, Clock::time_point now) const;
  // "" when it fits; else the message, and *reason.
  std::string MemoryProblem(int memory_mib, std::string* reason) const;
  int64_t Charge(const Holder& h) const;        // what held-memory admission counts for h
  void Account(const Holder& h, int64_t sign);  // adds (1) or removes (-1) h from the sums
  void CountMemoryRefusal(const std::string& reason);
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
  // Held-memory sums over live_ and in_flight_ (Account).
  int64_t charged_mib_ = 0, held_sum_mib_ = 0, unmeasured_mib_ = 0;
  int unmeasured_ = 0;
  int64_t available_mib_ = -1;
  bool pressure_ = false;
  double avg_create_s_ = 5.0;  // EWMA of create times
  AdmissionStats counters_;
};

// MemTotal from /proc/meminfo in MiB (0 if unreadable).
int64_t HostMemoryMib();

}  // namespace airlock::control
