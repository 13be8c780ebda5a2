// The daemon's front door (router.h): which listener, data plane or
// control plane, which key, which route, which handler.

#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/secure_equal.h"
#include "core/http_client.h"
#include "image/image.h"
#include "server/egress_routes.h"
#include "server/http_status.h"
#include "server/mcp_service.h"
#include "server/requests/create.h"
#include "gateway/list_query.h"
#include "server/requests/timeout.h"
#include "server/routes.h"
#include "server/router.h"
#include "gateway/relay_guard.h"
#include "server/template_api.h"

namespace airlock::server {

using nlohmann::json;




void Router::HandleControl(std::shared_ptr<HttpConn> c) {
  const std::string& path = c->path();
  auto verb = c->method();
  if (path == "/health" && verb == http::Method::kGet) return c->Respond(200, "application/json", "{\"status\":\"ok\"}");
  if (path == "/metrics" && verb == http::Method::kGet) return host_api_->ServeMetrics(c);
  // COPY archives of template builds: the signed URL is the credential.
  if (path.rfind("/upload/", 0) == 0) return templates_->HandleUpload(c);
  // A volume's content: its token is the credential (volumes_api.h).
  if (path.rfind("/volumecontent/", 0) == 0) return volumes_api_->HandleContent(c);
  // The web console lives on its own origin (serve --console-listen,
  // HandleConsoleOrigin), never beside the data plane's signed URLs.
  if (path == "/console" || path.rfind("/console/", 0) == 0) return ConsoleElsewhere(c);
  // The key table is memory only; a key it does not hold may be one the CLI
  // made a moment ago, so the table is refreshed (SQLite, off this thread)
  // before the request is refused.
  const bool is_mcp = path == "/mcp";
  std::string presented = PresentedApiKey(*c, is_mcp);
  auto dispatch = [this, is_mcp, presented](std::shared_ptr<HttpConn> c, const ApiKeyRecord& key) {
    Caller caller{key.id, key.team, key.admin};
    if (is_mcp) return mcp_->Handle(std::move(c), caller, presented);
    RouteControl(std::move(c), caller);
  };
  if (auto key = api_keys_->Find(presented)) return dispatch(std::move(c), *key);
  if (presented.empty()) {
    audit_api_->AuditAuthFailure(c);
    return c->RespondError(401, is_mcp ? "missing API key (X-API-Key or Authorization: Bearer)" : "missing X-API-Key");
  }
  asio::post(*lookups_, [this, c, presented = std::move(presented), dispatch] {
    Status st = api_keys_->RefreshIfStale();
    auto key = api_keys_->Find(presented);
    asio::post(c->executor(), [this, c, st, key, dispatch] {
      if (key) return dispatch(c, *key);
      if (!st.ok()) return c->RespondError(500, st.message());
      audit_api_->AuditAuthFailure(c);
      c->RespondError(401, "invalid X-API-Key");
    });
  });
}

void Router::RouteControl(std::shared_ptr<HttpConn> c, const Caller& caller) {
  RouteMatch m = MatchControlRoute(c->method(), c->path(), c->target());
  const bool on_sandbox = m.route && m.route->sandbox;
  audit_api_->AuditControlCall(c, caller.key_id, std::string(m.action()), on_sandbox ? m.params[0] : "");
  if (!m.route) {
    if (m.other_method) return c->RespondError(405, "method not allowed");
    return c->RespondError(404, "no route for " + c->method_string() + " " + c->path());
  }
  const std::vector<std::string>& p = m.params;
  // Every route under /sandboxes/{id} acts on one sandbox: another team's is
  // answered exactly as one that does not exist.
  if (on_sandbox && !control::CallerOwns(caller, OwnedKind::kSandbox, p[0], *manager_, *registry_))
    return c->RespondError(404, "sandbox " + p[0] + " not found");
  if (Idempotency::Applies(m.route->id) && !c->Header("Idempotency-Key").empty()) {
    return idempotency_->Run(c, caller, [this, c, caller, m] { Dispatch(c, caller, m); });
  }
  Dispatch(std::move(c), caller, m);
}

void Router::Dispatch(std::shared_ptr<HttpConn> c, const Caller& caller, const RouteMatch& m) {
  const std::vector<std::string>& p = m.params;
  using R = RouteId;
  switch (m.route->id) {
    case R::kListSnapshots: return snapshot_api_->ListSnapshots(c, caller);
    case R::kRequestTemplateBuild:
    case R::kListTemplates:
    case R::kAssignTemplateTags:
    case R::kDeleteTemplateTags:
    case R::kAliasExists:
    case R::kFilesLink:
    case R::kStartTemplateBuild:
    case R::kTemplateBuildStatus:
    case R::kListTemplateTags:
    case R::kPublishTemplate:
    case R::kPublishTemplateV2:
    case R::kGetTemplate:
    case R::kDeleteTemplate: return templates_->Route(c, caller, m.route->id, p);
    case R::kAuditTrail: return audit_api_->AuditTrail(c, caller);
    case R::kAuditVerify: return audit_api_->AuditVerify(c, caller);
    case R::kHostView: return host_api_->HostView(c, caller);
    case R::kLatestMetrics: return host_api_->LatestMetrics(c, caller);
    case R::kSecrets: return secrets_api_->HandleSecrets(c, caller, p.empty() ? "" : p[0]);
    case R::kVolumes: return volumes_api_->HandleVolumes(c, caller, p);
    case R::kCreateSandbox: return sandbox_api_->CreateSandbox(c, caller);
    case R::kListSandboxes: return sandbox_api_->ListSandboxes(c, caller, false);
    case R::kListSandboxesV2: return sandbox_api_->ListSandboxes(c, caller, true);
    case R::kGetSandbox: return sandbox_api_->GetSandbox(c, p[0]);
    case R::kKillSandbox: return sandbox_api_->KillSandbox(c, p[0]);
    case R::kCreateCheckpoint:
    case R::kListCheckpoints:
    case R::kDeleteCheckpoint:
    case R::kRollback: return snapshot_api_->RouteCheckpoints(c, m.route->id, p);
    case R::kSetTimeout: return sandbox_api_->SetTimeout(c, p[0]);
    case R::kRefresh: return sandbox_api_->Refresh(c, p[0]);
    case R::kConnect: return sandbox_api_->ConnectSandbox(c, p[0]);
    case R::kMetrics: return sandbox_api_->Metrics(c, p[0]);
    case R::kLogs: return sandbox_api_->Logs(c, p[0], false);
    case R::kLogsV2: return sandbox_api_->Logs(c, p[0], true);
    case R::kUpdateNetwork: return sandbox_api_->UpdateNetwork(c, p[0]);
    case R::kPause: return snapshot_api_->PauseSandbox(c, p[0]);
    case R::kFork: return snapshot_api_->ForkSandbox(c, p[0], caller);
    case R::kSandboxAudit: return audit_api_->SandboxAudit(c, p[0]);
    case R::kCreateSnapshot: return snapshot_api_->CreateSnapshot(c, p[0]);
    case R::kListEvents:
    case R::kSandboxEvents:
    case R::kListWebhooks:
    case R::kCreateWebhook:
    case R::kGetWebhook:
    case R::kUpdateWebhook:
    case R::kDeleteWebhook: return events_api_->Route(c, caller, m.route->id, p);
  }
}

// The API's listener. What a guest answers never becomes a page of its
// origin (relay_guard.h): no service worker's script is fetched from it,
// except on a sandbox's own host ("<port>-<id>.<domain>": the guest's
// origin, never the daemon's).
void Router::Handle(std::shared_ptr<HttpConn> c) {
  uint16_t port = kAgentPort;
  auto id = DataPlaneTarget(*c, &port);
  const bool guest_origin = id && !(!c->Header("E2b-Sandbox-Id").empty() && HostIsDirect(c->Header("Host")));
  if (!guest_origin && IsServiceWorkerScript(*c)) {
    return c->RespondError(403, "no service worker is served on the daemon's origin");
  }
  if (id) return data_plane_->HandleData(std::move(c), *id, port);
  // A signed URL names its sandbox through the signature alone.
  if (auto signed_id = data_plane_->SandboxBySignature(*c))
    return data_plane_->HandleData(std::move(c), *signed_id, kAgentPort);
  if (DataPlane::IsEnvdCallByToken(*c)) {
    if (auto token_id = data_plane_->SandboxByAccessToken(*c))
      return data_plane_->HandleData(std::move(c), *token_id, kAgentPort);
    return RespondSandboxNotFound(*c, "");
  }
  if (c->path() == "/files" && c->Query("signature")) {
    const int64_t now_s = NowUnixMs() / 1000;
    auto shape = CheckSignedFileQuery(http::SplitTarget(c->target()).second, now_s);
    return c->RespondError(401, shape.ok() ? "the URL's signature matches no sandbox (tampered, expired, or its "
                                             "sandbox is gone)"
                                           : shape.status().message());
  }
  HandleControl(std::move(c));
}

// Which sandbox a request is for (data plane), if any: E2b-Sandbox-Id when the
// Host is localhost / an IP / sandbox.<domain>, else "<port>-<id>.<domain>"
// (only with serve --domain).
std::optional<std::string> Router::DataPlaneTarget(const HttpConn& c, uint16_t* port) const {
  return DataPlaneSandbox(c, config_.domain, port);
}

void Router::HandleConsoleOrigin(std::shared_ptr<HttpConn> c) {
  const std::string& path = c->path();
  if (IsServiceWorkerScript(*c)) return c->RespondError(403, "no service worker is served on the console's origin");
  if (path == "/") return c->Respond(308, "text/plain", "/console/\n", {{"Location", "/console/"}});
  if (path == "/console" || path.rfind("/console/", 0) == 0) return ServeConsoleAsset(*c);
  if (c->Query("signature")) {
    return c->RespondError(403, "signed URLs are served on the API's listener, never on the console's origin");
  }
  if (std::string id = c->Header("E2b-Sandbox-Id"); !id.empty()) {
    std::string port = c->Header("E2b-Sandbox-Port");
    if (!port.empty() && port != std::to_string(kAgentPort)) {
      return c->RespondError(403, "the console's origin reaches a sandbox's agent (port " + std::to_string(kAgentPort) +
                                      ") only; other guest ports are served on the API's listener");
    }
    return data_plane_->HandleData(std::move(c), id, kAgentPort);
  }
  HandleControl(std::move(c));
}

void Router::ConsoleElsewhere(std::shared_ptr<HttpConn> c) {
  if (config_.console_listen.empty()) {
    return c->RespondError(404, "the web console has its own origin: start airlock serve with --console-listen "
                                "ip:port (docs/console.md)");
  }
  // The console's host: its listen address, or for a wildcard one the name
  // this client used for the daemon.
  std::string host;
  if (auto hp = http::ParseHostPort(config_.console_listen); hp.ok()) host = hp->first;
  if (host.empty() || host == "0.0.0.0" || host == "::") {
    host = c->Header("Host");
    if (!host.empty() && host.front() == '[') {
      host = host.substr(0, host.find(']') + 1);
    } else if (size_t colon = host.rfind(':'); colon != std::string::npos && host.find(':') == colon) {
      host.resize(colon);
    }
    if (host.empty()) host = "127.0.0.1";
  } else if (host.find(':') != std::string::npos) {
    host = "[" + host + "]";
  }
  std::string location = "http://" + host + ":" + std::to_string(console_port_()) + c->target();
  c->Respond(308, "text/plain; charset=utf-8", location + "\n", {{"Location", location}});
}

Router::Router(const Services& s, McpService* mcp, std::function<uint16_t()> console_port)
    : ApiHandlers(s),
      mcp_(mcp),
      console_port_(std::move(console_port)),
      sandbox_api_(std::make_unique<SandboxApi>(s)),
      snapshot_api_(std::make_unique<SnapshotApi>(s)),
      secrets_api_(std::make_unique<SecretsApi>(s)),
      volumes_api_(std::make_unique<VolumesApi>(s)),
      audit_api_(std::make_unique<AuditApi>(s)),
      host_api_(std::make_unique<HostApi>(s)),
      data_plane_(std::make_unique<DataPlane>(s)),
      events_api_(std::make_unique<EventsApi>(s)),
      idempotency_(std::make_unique<Idempotency>(*s.registry, *s.lookups, s.config->max_json_body)) {
  // The calls of the daemon before this one ended with it: their keys are free.
  if (Status st = registry_->ReleaseUnansweredIdempotencyKeys(); !st.ok()) LOG_WARN("{}", st.ToString());
}

Router::~Router() = default;

SnapshotApi& Router::snapshots() { return *snapshot_api_; }

}  // namespace airlock::server
