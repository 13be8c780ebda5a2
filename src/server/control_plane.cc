// Control plane: the E2B REST API of spec §1 (schemas §1.5), plus path
// aliases for older SDKs (§1.7). Every route but GET /health needs a valid
// X-API-Key (401 JSON otherwise). Blocking work runs on the worker pool.

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
#include "server/requests/list.h"
#include "server/requests/timeout.h"
#include "server/routes.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

std::string PresentedApiKey(const HttpConn& c, bool allow_bearer) {
  std::string key = c.Header("X-API-Key");
  if (key.empty() && allow_bearer) {
    std::string auth = c.Header("Authorization");
    if (auth.size() > 7 && (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0)) key = auth.substr(7);
  }
  return key;
}

void Server::HandleControl(std::shared_ptr<HttpConn> c) {
  const std::string& path = c->path();
  auto verb = c->method();
  if (path == "/health" && verb == http::Method::kGet) return c->Respond(200, "application/json", "{\"status\":\"ok\"}");
  if (path == "/metrics" && verb == http::Method::kGet) return host_api_->ServeMetrics(c);
  // COPY archives of template builds: the signed URL is the credential.
  if (path.rfind("/upload/", 0) == 0) return templates_->HandleUpload(c);
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

void Server::RouteControl(std::shared_ptr<HttpConn> c, const Caller& caller) {
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
    case R::kConnect: return sandbox_api_->ConnectSandbox(c, p[0]);
    case R::kMetrics: return sandbox_api_->Metrics(c, p[0]);
    case R::kLogs: return sandbox_api_->Logs(c, p[0], false);
    case R::kLogsV2: return sandbox_api_->Logs(c, p[0], true);
    case R::kUpdateNetwork: return sandbox_api_->UpdateNetwork(c, p[0]);
    case R::kPause: return snapshot_api_->PauseSandbox(c, p[0]);
    case R::kFork: return snapshot_api_->ForkSandbox(c, p[0], caller);
    case R::kSandboxAudit: return audit_api_->SandboxAudit(c, p[0]);
    case R::kCreateSnapshot: return snapshot_api_->CreateSnapshot(c, p[0]);
  }
}

}  // namespace airlock::server
