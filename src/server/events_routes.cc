// The lifecycle events and webhooks API (events_api.h).
#include <boost/asio/post.hpp>

#include "server/events_api.h"
#include "server/http_status.h"
#include "server/lifecycle_events.h"

namespace airlock::server {

namespace asio = boost::asio;
using nlohmann::json;

namespace {

// Runs `work` on a worker and answers `ok_status` with its JSON (204 with
// none), or the status its error maps to.
void Answer(boost::asio::thread_pool& workers, std::shared_ptr<HttpConn> c, int ok_status,
            std::function<StatusOr<json>()> work) {
  asio::post(workers, [c, ok_status, work = std::move(work)] {
    auto r = work();
    asio::post(c->executor(), [c, ok_status, r = std::move(r)] {
      if (!r.ok()) return c->RespondError(HttpStatusFor(r.status()), r.status().message());
      if (r->is_null()) return c->Respond(204, "", "");
      c->Respond(ok_status, "application/json", r->dump(-1, ' ', false, json::error_handler_t::replace));
    });
  });
}

}  // namespace

void EventsApi::Route(std::shared_ptr<HttpConn> c, const Caller& caller, RouteId id,
                      const std::vector<std::string>& params) {
  if (!lifecycle_) return c->RespondError(503, "lifecycle events are off in this airlock");
  LifecycleEvents* events = lifecycle_;
  const std::string team = caller.team;
  switch (id) {
    case RouteId::kListEvents:
    case RouteId::kSandboxEvents: {
      auto q = ParseEventsQuery(http::SplitTarget(c->target()).second);
      if (!q.ok()) return c->RespondError(400, q.status().message());
      std::string sandbox = id == RouteId::kSandboxEvents ? params[0] : "";
      return Answer(*lookups_, c, 200, [events, team, sandbox, q = *q] { return events->ListEvents(team, sandbox, q); });
    }
    case RouteId::kListWebhooks:
      return Answer(*lookups_, c, 200, [events, team] { return events->ListWebhooks(team); });
    case RouteId::kGetWebhook:
      return Answer(*lookups_, c, 200, [events, team, wid = params[0]] { return events->GetWebhook(team, wid); });
    case RouteId::kDeleteWebhook:
      return Answer(*lookups_, c, 204, [events, team, wid = params[0]]() -> StatusOr<json> {
        RETURN_IF_ERROR(events->DeleteWebhook(team, wid));
        return json();
      });
    case RouteId::kCreateWebhook:
    case RouteId::kUpdateWebhook:
      return ReadJson(c, [this, c, id, events, team, params](json body) {
        if (id == RouteId::kCreateWebhook)
          return Answer(*lookups_, c, 201, [events, team, body] { return events->CreateWebhook(team, body); });
        Answer(*lookups_, c, 200,
               [events, team, body, wid = params[0]] { return events->UpdateWebhook(team, wid, body); });
      });
    default: return c->RespondError(404, "no such route");
  }
}

}  // namespace airlock::server
