// What the daemon tells about itself: GET /metrics (Prometheus text, no key;
// limits_hooks.cc), and the JSON the web console reads besides the E2B API
// (console_routes.cc): GET /sandboxes/metrics?sandbox_ids= (the newest
// sample of each, E2B's batch shape) and GET /host (capacity, pool, queue,
// runtimes, version; admin keys). io thread, never blocking.
#pragma once

#include <memory>

#include "server/api_base.h"

namespace airlock::server {

class HostApi : public ApiHandlers {
 public:
  explicit HostApi(const Services& s) : ApiHandlers(s) {}
  void ServeMetrics(std::shared_ptr<HttpConn> c);
  void LatestMetrics(std::shared_ptr<HttpConn> c, const Caller& caller);
  void HostView(std::shared_ptr<HttpConn> c, const Caller& caller);

 private:
  // Visible sandboxes by API state.
  struct SandboxCounts {
    int running = 0, paused = 0;
  };
  SandboxCounts CountSandboxes();
};

}  // namespace airlock::server
