// Limits in the daemon (docs/limits.md): admission (429 + Retry-After / bounded fair queue / 503 memory), the
// admission tick, and GET /metrics. The memory readings admission uses: control/memory_governor.h.
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "server/http_status.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

Status Server::CheckDiskForCreate() const {
  const int64_t need = config_.disk_reserve_mib + config_.disk_per_create_mib;
  for (const std::string& dir : {config_.manager.state_dir, db_dir_}) {
    struct statvfs vfs;
    if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoError("statvfs " + dir);
    int64_t free_mib = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
    if (free_mib < need) {
      return ResourceExhausted(
          "not enough free disk for another sandbox: " + std::to_string(free_mib) + " MiB free on the filesystem of " +
          dir + ", " + std::to_string(config_.disk_reserve_mib) + " MiB kept for the registry and audit trail plus " +
          std::to_string(config_.disk_per_create_mib) + " MiB per create (serve --disk-reserve, --disk-per-create)");
    }
  }
  return OkStatus();
}

void Server::ScheduleAdmissionTick() {
  admission_timer_->expires_after(std::chrono::milliseconds(100));
  admission_timer_->async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    (void)admission_->Pump(control::Admission::Clock::now());
    ScheduleAdmissionTick();
  });
}

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
