#include "control/metrics.h"

#include <cstdio>

namespace airlock::control {

void DaemonMetrics::CreateSucceeded(double seconds) {
  for (size_t i = 0; i < kCreateBuckets.size(); ++i) {
    if (seconds <= kCreateBuckets[i]) create_buckets_[i].fetch_add(1);
  }
  create_count_.fetch_add(1);
  create_sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6));
}

std::string DaemonMetrics::Render(const Gauges& g) const {
  std::string o;
  char buf[256];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof buf, fmt, args...);
    o += buf;
  };
  auto u = [](const std::atomic<uint64_t>& a) { return static_cast<unsigned long long>(a.load()); };
  o += "# HELP airlock_sandboxes Sandboxes by state.\n# TYPE airlock_sandboxes gauge\n";
  line("airlock_sandboxes{state=\"running\"} %d\n", g.running);
  line("airlock_sandboxes{state=\"paused\"} %d\n", g.paused);
  line("airlock_sandboxes{state=\"creating\"} %d\n", g.creating);
  line("airlock_sandboxes{state=\"queued\"} %d\n", g.queued);
  o += "# HELP airlock_committed_memory_mib Guest memory committed to sandboxes (MiB).\n"
       "# TYPE airlock_committed_memory_mib gauge\n";
  line("airlock_committed_memory_mib %lld\n", static_cast<long long>(g.committed_memory_mib));
  o += "# HELP airlock_sandbox_creates_total Sandbox creates started.\n# TYPE airlock_sandbox_creates_total counter\n";
  line("airlock_sandbox_creates_total %llu\n", u(creates_));
  o += "# HELP airlock_sandbox_create_failures_total Sandbox creates that failed after admission.\n"
       "# TYPE airlock_sandbox_create_failures_total counter\n";
  line("airlock_sandbox_create_failures_total %llu\n", u(create_failures_));
  o += "# HELP airlock_admission_rejections_total Creates refused: limits (429), held memory, memory pressure, "
       "nominal memory cap (503), disk (507).\n"
       "# TYPE airlock_admission_rejections_total counter\n";
  line("airlock_admission_rejections_total{reason=\"limit\"} %llu\n", u(rejected_limit_));
  line("airlock_admission_rejections_total{reason=\"held_memory\"} %llu\n", u(rejected_held_));
  line("airlock_admission_rejections_total{reason=\"pressure\"} %llu\n", u(rejected_pressure_));
  line("airlock_admission_rejections_total{reason=\"memory\"} %llu\n", u(rejected_memory_));
  line("airlock_admission_rejections_total{reason=\"disk\"} %llu\n", u(rejected_disk_));
  auto ll = [](int64_t v) { return static_cast<long long>(v); };
  o += "# HELP airlock_memory_held_mib Memory the VMMs of measured live sandboxes hold (Private_Clean + "
       "Private_Dirty, MiB).\n# TYPE airlock_memory_held_mib gauge\n";
  line("airlock_memory_held_mib %lld\n", ll(g.memory_held_mib));
  o += "# HELP airlock_memory_reserved_mib Memory admission keeps beyond what sandboxes hold (MiB): growth of "
       "measured sandboxes, memoryMB of unmeasured ones, the host reserve.\n"
       "# TYPE airlock_memory_reserved_mib gauge\n";
  line("airlock_memory_reserved_mib{for=\"growth\"} %lld\n", ll(g.memory_growth_reserve_mib));
  line("airlock_memory_reserved_mib{for=\"unmeasured\"} %lld\n", ll(g.memory_unmeasured_mib));
  line("airlock_memory_reserved_mib{for=\"host\"} %lld\n", ll(g.memory_host_reserve_mib));
  o += "# HELP airlock_memory_budget_mib Host memory minus the host reserve: what held + reserved may reach (MiB).\n"
       "# TYPE airlock_memory_budget_mib gauge\n";
  line("airlock_memory_budget_mib %lld\n", ll(g.memory_budget_mib));
  o += "# HELP airlock_memory_available_mib MemAvailable at the last reading (MiB; -1 unknown).\n"
       "# TYPE airlock_memory_available_mib gauge\n";
  line("airlock_memory_available_mib %lld\n", ll(g.memory_available_mib));
  o += "# HELP airlock_memory_pool_held_mib Memory the warm pool's parked VMMs hold (MiB).\n"
       "# TYPE airlock_memory_pool_held_mib gauge\n";
  line("airlock_memory_pool_held_mib %lld\n", ll(g.memory_pool_held_mib));
  o += "# HELP airlock_memory_pressure 1 while the host is under memory pressure (creates refused, pool shrinking).\n"
       "# TYPE airlock_memory_pressure gauge\n";
  line("airlock_memory_pressure %d\n", g.memory_pressure);
  o += "# HELP airlock_memory_sample_seconds How long the last memory reading (every VMM's smaps_rollup) took.\n"
       "# TYPE airlock_memory_sample_seconds gauge\n";
  line("airlock_memory_sample_seconds %.6f\n", g.memory_sample_seconds);
  o += "# HELP airlock_memory_pressure_pauses_total Running sandboxes paused by the memory-pressure policy.\n"
       "# TYPE airlock_memory_pressure_pauses_total counter\n";
  line("airlock_memory_pressure_pauses_total %llu\n", u(pressure_pauses_));
  o += "# HELP airlock_sandbox_create_duration_seconds Time from admission to a ready sandbox.\n"
       "# TYPE airlock_sandbox_create_duration_seconds histogram\n";
  for (size_t i = 0; i < kCreateBuckets.size(); ++i) {
    line("airlock_sandbox_create_duration_seconds_bucket{le=\"%g\"} %llu\n", kCreateBuckets[i], u(create_buckets_[i]));
  }
  line("airlock_sandbox_create_duration_seconds_bucket{le=\"+Inf\"} %llu\n", u(create_count_));
  line("airlock_sandbox_create_duration_seconds_sum %.6f\n", static_cast<double>(create_sum_us_.load()) / 1e6);
  line("airlock_sandbox_create_duration_seconds_count %llu\n", u(create_count_));
  o += "# HELP airlock_execs_total Processes started through the data plane.\n# TYPE airlock_execs_total counter\n";
  line("airlock_execs_total %llu\n", u(execs_));
  o += "# HELP airlock_egress_connections_total Egress decisions of the sandbox network.\n"
       "# TYPE airlock_egress_connections_total counter\n";
  line("airlock_egress_connections_total{decision=\"allowed\"} %llu\n", u(egress_allowed_));
  line("airlock_egress_connections_total{decision=\"denied\"} %llu\n", u(egress_denied_));
  o +=
      "# HELP airlock_egress_bytes_total Bytes moved by the egress proxy.\n# TYPE airlock_egress_bytes_total counter\n";
  line("airlock_egress_bytes_total{direction=\"sent\"} %llu\n", u(egress_tx_));
  line("airlock_egress_bytes_total{direction=\"received\"} %llu\n", u(egress_rx_));
  o += "# HELP airlock_egress_dns_tcp_refused_total Resolver TCP connections refused over a cap.\n"
       "# TYPE airlock_egress_dns_tcp_refused_total counter\n";
  line("airlock_egress_dns_tcp_refused_total %llu\n", static_cast<unsigned long long>(g.egress_dns_tcp_refused));
  o += "# HELP airlock_egress_host_address_refused_total Resolver answers and proxied connections refused: an "
       "address of this host or of a sandbox.\n"
       "# TYPE airlock_egress_host_address_refused_total counter\n";
  line("airlock_egress_host_address_refused_total %llu\n",
       static_cast<unsigned long long>(g.egress_host_address_refused));
  o += "# HELP airlock_audit_records_total Records appended to the audit trail.\n"
       "# TYPE airlock_audit_records_total counter\n";
  line("airlock_audit_records_total %llu\n", u(audit_records_));
  o += "# HELP airlock_sandbox_deaths_total Running sandboxes whose VMM exited (guest panic, QEMU crash).\n"
       "# TYPE airlock_sandbox_deaths_total counter\n";
  line("airlock_sandbox_deaths_total %llu\n", u(sandbox_deaths_));
  o += "# HELP airlock_pool_parked Sandboxes parked in the warm pool, ready to be handed out.\n"
       "# TYPE airlock_pool_parked gauge\n";
  line("airlock_pool_parked %d\n", g.pool_parked);
  o += "# HELP airlock_pool_hits_total Creates that took a parked sandbox from the warm pool.\n"
       "# TYPE airlock_pool_hits_total counter\n";
  line("airlock_pool_hits_total %llu\n", static_cast<unsigned long long>(g.pool_hits));
  o += "# HELP airlock_pool_misses_total Creates of a pooled shape that found the pool empty.\n"
       "# TYPE airlock_pool_misses_total counter\n";
  line("airlock_pool_misses_total %llu\n", static_cast<unsigned long long>(g.pool_misses));
  o += "# HELP airlock_checkpoints_total Checkpoints of running sandboxes committed.\n"
       "# TYPE airlock_checkpoints_total counter\n";
  line("airlock_checkpoints_total %llu\n", u(checkpoints_));
  o += "# HELP airlock_rollbacks_total Rollbacks of sandboxes to a checkpoint, by result (lost: the restore failed "
       "after "
       "the old VMM was stopped, and the sandbox was killed).\n"
       "# TYPE airlock_rollbacks_total counter\n";
  line("airlock_rollbacks_total{result=\"ok\"} %llu\n", u(rollbacks_));
  line("airlock_rollbacks_total{result=\"lost\"} %llu\n", u(rollbacks_lost_));
  o += "# HELP airlock_cluster_reserved_corrections_total Heartbeats of this cluster node whose recount changed its "
       "reserved slots (drift of any cause).\n"
       "# TYPE airlock_cluster_reserved_corrections_total counter\n";
  line("airlock_cluster_reserved_corrections_total %llu\n", u(cluster_corrections_));
  o += "# HELP airlock_cluster_reserved_drift_slots_total Slots those recounts moved, added up.\n"
       "# TYPE airlock_cluster_reserved_drift_slots_total counter\n";
  line("airlock_cluster_reserved_drift_slots_total %llu\n", u(cluster_drift_slots_));
  o += "# HELP airlock_cluster_reservations_dropped_total Reservations on this node dropped because their front "
       "stopped renewing them or their TTL ran out with no record.\n"
       "# TYPE airlock_cluster_reservations_dropped_total counter\n";
  line("airlock_cluster_reservations_dropped_total %llu\n", u(cluster_dropped_reservations_));
  o += "# HELP airlock_cluster_artefact_fetches_total Template images this node fetched from another node, by "
       "outcome (corrupt: the copy's SHA-256 differed and it was refused).\n"
       "# TYPE airlock_cluster_artefact_fetches_total counter\n";
  line("airlock_cluster_artefact_fetches_total{outcome=\"ok\"} %llu\n", u(artefact_fetches_ok_));
  line("airlock_cluster_artefact_fetches_total{outcome=\"corrupt\"} %llu\n", u(artefact_fetches_corrupt_));
  line("airlock_cluster_artefact_fetches_total{outcome=\"failed\"} %llu\n", u(artefact_fetches_failed_));
  o += "# HELP airlock_cluster_artefact_bytes_received_total Bytes of template images this node received from other "
       "nodes.\n"
       "# TYPE airlock_cluster_artefact_bytes_received_total counter\n";
  line("airlock_cluster_artefact_bytes_received_total %llu\n", u(artefact_bytes_));
  o += "# HELP airlock_otlp_exported_records_total Audit records delivered to the OTLP collector.\n"
       "# TYPE airlock_otlp_exported_records_total counter\n";
  line("airlock_otlp_exported_records_total %llu\n", static_cast<unsigned long long>(g.otlp_exported));
  o += "# HELP airlock_otlp_dropped_records_total Audit records dropped from the full OTLP queue.\n"
       "# TYPE airlock_otlp_dropped_records_total counter\n";
  line("airlock_otlp_dropped_records_total %llu\n", static_cast<unsigned long long>(g.otlp_dropped));
  o += "# HELP airlock_otlp_failed_batches_total OTLP export attempts that failed (retried).\n"
       "# TYPE airlock_otlp_failed_batches_total counter\n";
  line("airlock_otlp_failed_batches_total %llu\n", static_cast<unsigned long long>(g.otlp_failed_batches));
  return o;
}

}  // namespace airlock::control
