#include "server/api_base.h"

#include <boost/asio/post.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "server/http_status.h"
#include "server/lifecycle_events.h"
#include "server/template_api.h"

namespace airlock::server {

using nlohmann::json;

void ReadJsonBody(const std::shared_ptr<HttpConn>& c, size_t max_body, std::function<void(json)> then) {
  c->ReadBodyToString(max_body, [c, then = std::move(then)](StatusOr<std::string> body) {
    if (!body.ok())
      return c->RespondError(HttpStatusFor(body.status(), HttpStatusContext::kRequestBody), body.status().message());
    json j = body->empty() ? json::object() : json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return c->RespondError(400, "request body must be a JSON object");
    then(std::move(j));
  });
}

void RespondNoSandbox(const std::shared_ptr<HttpConn>& c, Manager& manager, const std::string& id) {
  auto end = manager.EndOf(id);
  if (!end) return c->RespondError(404, "sandbox " + id + " not found");
  json j{{"code", 404},
         {"message", "sandbox " + id + " not found: it ended (" + end->Describe() + ")"},
         {"outcome", SandboxOutcomeName(end->outcome)},
         {"outcomeDetail", end->detail},
         {"endedAt", FormatRfc3339Ms(end->at_ms)}};
  // The detail may quote a VMM's or guest's bytes: never an exception (500) for them.
  c->Respond(404, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace));
}

void AppendAudit(audit::AuditLog* log, json record) {
  if (!log) return;
  Status st = log->Append(std::move(record));
  if (!st.ok()) {
    static std::atomic<int64_t> last{0};
    int64_t now = NowUnixMs();
    if (now - last.load() > 10000) {
      last = now;
      LOG_ERROR("audit: append failed: {}", st.message());
    }
  }
}

audit::AuditSink AuditSinkOf(std::shared_ptr<audit::AuditLog> log) {
  return [log](const json& r) {
    if (!log) return;
    Status st = log->Append(r);
    if (!st.ok()) LOG_ERROR("audit: append failed: {}", st.message());
  };
}

ApiHandlers::ApiHandlers(const Services& s)
    : config_(*s.config),
      io_(*s.io),
      workers_(s.workers),
      lookups_(s.lookups),
      manager_(s.manager),
      registry_(s.registry),
      sandboxes_(s.sandboxes),
      secrets_(s.secrets),
      admission_(s.admission),
      memory_(s.memory),
      metrics_sampler_(s.metrics_sampler),
      catalog_(s.catalog),
      metrics_(*s.metrics),
      templates_(s.templates),
      team_disk_(s.team_disk),
      volumes_(s.volumes),
      streams_(*s.streams),
      lifecycle_(s.lifecycle),
      api_keys_(s.api_keys),
      audit_(s.audit),
      otlp_(s.otlp),
      db_dir_(s.db_dir) {}

void ApiHandlers::EmitLifecycle(std::string_view type, const std::string& id, json event_data) const {
  if (auto sb = manager_->Get(id)) EmitLifecycle(type, *sb, std::move(event_data));
}

void ApiHandlers::EmitLifecycle(std::string_view type, const Sandbox& sb, json event_data) const {
  if (lifecycle_) lifecycle_->Emit(type, sb.Record(), sb.attributes().owner_team, std::move(event_data));
}

std::string ApiHandlers::ShownTemplateId(const SandboxRecord& r) const { return templates_->ShownTemplateId(r); }

void ApiHandlers::AnswerFromWorker(std::shared_ptr<HttpConn> c, std::function<StatusOr<json>()> work) const {
  boost::asio::post(*workers_, [c, work = std::move(work)] {
    auto r = work();
    int status = r.ok() ? 200 : 500;
    std::string out = r.ok() ? r->dump(-1, ' ', false, json::error_handler_t::replace)
                             : JsonError(500, r.status().message());
    boost::asio::post(c->executor(), [c, status, out] { c->Respond(status, "application/json", out); });
  });
}

}  // namespace airlock::server
