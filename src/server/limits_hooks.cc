// GET /metrics (docs/limits.md#metrics): the daemon's counters and gauges in
// the Prometheus text format (HostApi, host_api.h).
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "server/http_status.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

HostApi::SandboxCounts HostApi::CountSandboxes() {
  SandboxCounts n;
  // As GET /v2/sandboxes reports them: a paused one holds no VMM.
  for (const auto& sb : manager_->VisibleList()) (sb->api_state() == "paused" ? n.paused : n.running)++;
  return n;
}

void HostApi::ServeMetrics(std::shared_ptr<HttpConn> c) {
  DaemonMetrics::Gauges g;
  auto st = admission_->stats();
  const SandboxCounts n = CountSandboxes();
  g.running = n.running;
  g.paused = n.paused;
  g.creating = st.in_flight;
  g.queued = static_cast<int>(st.queued);
  g.committed_memory_mib = st.committed_memory_mib;
  g.memory_held_mib = st.held_mib;
  g.memory_growth_reserve_mib = st.growth_reserve_mib;
  g.memory_unmeasured_mib = st.unmeasured_mib;
  g.memory_budget_mib = st.budget_mib;
  g.memory_host_reserve_mib = admission_->config().memory_host_reserve_mib;
  g.memory_available_mib = st.available_mib;
  g.memory_pool_held_mib = memory_->pool_held_mib();
  g.memory_pressure = st.pressure ? 1 : 0;
  g.memory_sample_seconds = memory_->last_reading_seconds();
  auto ps = manager_->warm_pool().stats();
  g.pool_parked = ps.parked;
  g.pool_hits = ps.hits;
  g.pool_misses = ps.misses;
  if (otlp_) {
    auto os = otlp_->stats();
    g.otlp_exported = os.exported;
    g.otlp_dropped = os.dropped;
    g.otlp_failed_batches = os.failed_batches;
  }
  if (auto* eg = manager_->egress()) {
    auto ec = eg->Counters();
    g.egress_dns_tcp_refused = ec.dns_tcp_refused;
    g.egress_host_address_refused = ec.host_address_refused;
  }
  c->Respond(200, "text/plain; version=0.0.4", metrics_.Render(g));
}

}  // namespace airlock::server
