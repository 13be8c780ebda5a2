// E2B's lifecycle events and webhooks API (docs/server.md "Lifecycle events
// and webhooks"): GET /events/sandboxes, GET /events/sandboxes/{id},
// GET/POST /events/webhooks, GET/PATCH/DELETE /events/webhooks/{id}. Per
// team: another team's webhook is 404, another team's sandbox has no
// events. The store work is LifecycleEvents' (lifecycle_events.h), on a worker.
#pragma once

#include <memory>
#include <string>

#include "server/api_base.h"
#include "server/routes.h"

namespace airlock::server {

class EventsApi : public ApiHandlers {
 public:
  explicit EventsApi(const Services& s) : ApiHandlers(s) {}
  void Route(std::shared_ptr<HttpConn> c, const Caller& caller, RouteId id, const std::vector<std::string>& params);
};

}  // namespace airlock::server
