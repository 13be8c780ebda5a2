// Daemon metrics in the Prometheus text exposition format (GET /metrics,
// docs/limits.md#metrics). Counters are atomics, so any thread (the HTTP
// loop, workers, the egress proxy) may bump them without a lock. Label
// values are fixed enumerations chosen here, never request data, so nothing
// a client or guest sends can become a label (and no secret can).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace airlock::control {

class DaemonMetrics {
 public:
  static constexpr std::array<double, 11> kCreateBuckets = {0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120};

  void CreateStarted() { creates_.fetch_add(1); }
  void CreateFailed() { create_failures_.fetch_add(1); }
  void CreateSucceeded(double seconds);
  void Exec() { execs_.fetch_add(1); }
  void AdmissionRejected(int http_status) {
    (http_status == 503 ? rejected_memory_ : http_status == 507 ? rejected_disk_ : rejected_limit_).fetch_add(1);
  }
  // By reason (AdmissionDecision::reason): "limit", "memory", "held_memory", "pressure", "disk".
  void AdmissionRejected(const std::string& reason) {
    (reason == "held_memory" ? rejected_held_
     : reason == "pressure"  ? rejected_pressure_
     : reason == "memory"    ? rejected_memory_
     : reason == "disk"      ? rejected_disk_
                             : rejected_limit_)
        .fetch_add(1);
  }
  // A running sandbox paused by the memory-pressure policy.
  void PressurePause() { pressure_pauses_.fetch_add(1); }
  // For the egress proxy (sealed network): one call per connection decision,
  // and the bytes it moved.
  void EgressDecision(bool allowed) { (allowed ? egress_allowed_ : egress_denied_).fetch_add(1); }
  void EgressBytes(uint64_t to_internet, uint64_t from_internet) {
    egress_tx_.fetch_add(to_internet);
    egress_rx_.fetch_add(from_internet);
  }
  void AuditRecord() { audit_records_.fetch_add(1); }
  void SandboxDied() { sandbox_deaths_.fetch_add(1); }
  // Checkpoints and rollback (checkpoint_routes.cc); `lost`: a rollback that
  // failed after the old VMM was stopped (the sandbox was killed).
  void Checkpointed() { checkpoints_.fetch_add(1); }
  void RolledBack() { rollbacks_.fetch_add(1); }
  void RollbackLost() { rollbacks_lost_.fetch_add(1); }
  // A cluster node's heartbeat recount (cluster/membership.h): `reserved`
  // corrected from `was` to `now`; `dropped` reservations whose lease or TTL
  // ran out with no record (a front that died mid-create).
  void ClusterReconciled(int was, int now, int dropped) {
    if (was != now) {
      cluster_corrections_.fetch_add(1);
      cluster_drift_slots_.fetch_add(static_cast<uint64_t>(was > now ? was - now : now - was));
    }
    if (dropped > 0) cluster_dropped_reservations_.fetch_add(static_cast<uint64_t>(dropped));
  }
  // A cluster node fetched a template's image from another node
  // (cluster/template_replica.h): `outcome` "ok", "corrupt" (its digest
  // differed: refused) or "failed"; `bytes` received.
  void ClusterArtefactFetched(const std::string& outcome, int64_t bytes) {
    (outcome == "ok" ? artefact_fetches_ok_ : outcome == "corrupt" ? artefact_fetches_corrupt_ : artefact_fetches_failed_)
        .fetch_add(1);
    if (bytes > 0) artefact_bytes_.fetch_add(static_cast<uint64_t>(bytes));
  }

  struct Gauges {
    int running = 0, paused = 0, creating = 0, queued = 0;
    int64_t committed_memory_mib = 0;
    uint64_t otlp_exported = 0, otlp_dropped = 0, otlp_failed_batches = 0;
    // egress::EgressCounters (counted by the egress service itself).
    uint64_t egress_dns_tcp_refused = 0, egress_host_address_refused = 0;
    // The warm pool (WarmPool::stats).
    int pool_parked = 0;
    uint64_t pool_hits = 0, pool_misses = 0;
    // What memory admission sees (AdmissionStats, MiB).
    int64_t memory_held_mib = 0, memory_growth_reserve_mib = 0, memory_unmeasured_mib = 0;
    int64_t memory_budget_mib = 0, memory_host_reserve_mib = 0, memory_available_mib = -1, memory_pool_held_mib = 0;
    int memory_pressure = 0;
    double memory_sample_seconds = 0;
  };
  // The whole exposition, with the gauges sampled by the caller.
  std::string Render(const Gauges& g) const;

 private:
  std::atomic<uint64_t> creates_{0}, create_failures_{0}, execs_{0};
  std::atomic<uint64_t> rejected_limit_{0}, rejected_memory_{0}, rejected_disk_{0};
  std::atomic<uint64_t> rejected_held_{0}, rejected_pressure_{0}, pressure_pauses_{0};
  std::atomic<uint64_t> egress_allowed_{0}, egress_denied_{0}, egress_tx_{0}, egress_rx_{0};
  std::atomic<uint64_t> audit_records_{0};
  std::atomic<uint64_t> sandbox_deaths_{0};
  std::atomic<uint64_t> checkpoints_{0}, rollbacks_{0}, rollbacks_lost_{0};
  std::atomic<uint64_t> cluster_corrections_{0}, cluster_drift_slots_{0}, cluster_dropped_reservations_{0};
  std::atomic<uint64_t> artefact_fetches_ok_{0}, artefact_fetches_corrupt_{0}, artefact_fetches_failed_{0},
      artefact_bytes_{0};
  std::array<std::atomic<uint64_t>, kCreateBuckets.size()> create_buckets_{};
  std::atomic<uint64_t> create_count_{0};
  std::atomic<uint64_t> create_sum_us_{0};
};

}  // namespace airlock::control
