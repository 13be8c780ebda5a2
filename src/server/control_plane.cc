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

void Server::ReadJson(std::shared_ptr<HttpConn> c, std::function<void(json)> then) {
  c->ReadBodyToString(config_.max_json_body, [c, then = std::move(then)](StatusOr<std::string> body) {
    if (!body.ok())
      return c->RespondError(HttpStatusFor(body.status(), HttpStatusContext::kRequestBody), body.status().message());
    json j = body->empty() ? json::object() : json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return c->RespondError(400, "request body must be a JSON object");
    then(std::move(j));
  });
}

void Server::HandleControl(std::shared_ptr<HttpConn> c) {
  const std::string& path = c->path();
  auto verb = c->method();
  if (path == "/health" && verb == http::Method::kGet) return c->Respond(200, "application/json", "{\"status\":\"ok\"}");
  if (path == "/metrics" && verb == http::Method::kGet) return ServeMetrics(c);
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
    AuditAuthFailure(c);
    return c->RespondError(401, is_mcp ? "missing API key (X-API-Key or Authorization: Bearer)" : "missing X-API-Key");
  }
  asio::post(*lookups_, [this, c, presented = std::move(presented), dispatch] {
    Status st = api_keys_->RefreshIfStale();
    auto key = api_keys_->Find(presented);
    asio::post(c->executor(), [this, c, st, key, dispatch] {
      if (key) return dispatch(c, *key);
      if (!st.ok()) return c->RespondError(500, st.message());
      AuditAuthFailure(c);
      c->RespondError(401, "invalid X-API-Key");
    });
  });
}

void Server::RouteControl(std::shared_ptr<HttpConn> c, const Caller& caller) {
  RouteMatch m = MatchControlRoute(c->method(), c->path(), c->target());
  const bool on_sandbox = m.route && m.route->sandbox;
  AuditControlCall(c, caller.key_id, std::string(m.action()), on_sandbox ? m.params[0] : "");
  if (!m.route) {
    if (m.other_method) return c->RespondError(405, "method not allowed");
    return c->RespondError(404, "no route for " + c->method_string() + " " + c->path());
  }
  const std::vector<std::string>& p = m.params;
  // Every route under /sandboxes/{id} acts on one sandbox: another team's is
  // answered exactly as one that does not exist.
  if (on_sandbox && !CallerOwns(caller, OwnedKind::kSandbox, p[0]))
    return c->RespondError(404, "sandbox " + p[0] + " not found");
  using R = RouteId;
  switch (m.route->id) {
    case R::kListSnapshots: return ListSnapshots(c, caller);
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
    case R::kAuditTrail: return AuditTrail(c, caller);
    case R::kAuditVerify: return AuditVerify(c, caller);
    case R::kHostView: return HostView(c, caller);
    case R::kLatestMetrics: return LatestMetrics(c, caller);
    case R::kSecrets: return HandleSecrets(c, caller, p.empty() ? "" : p[0]);
    case R::kCreateSandbox: return CreateSandbox(c, caller);
    case R::kListSandboxes: return ListSandboxes(c, caller, false);
    case R::kListSandboxesV2: return ListSandboxes(c, caller, true);
    case R::kGetSandbox: return GetSandbox(c, p[0]);
    case R::kKillSandbox: return KillSandbox(c, p[0]);
    case R::kCreateCheckpoint:
    case R::kListCheckpoints:
    case R::kDeleteCheckpoint:
    case R::kRollback: return RouteCheckpoints(c, m.route->id, p);
    case R::kSetTimeout: return SetTimeout(c, p[0]);
    case R::kConnect: return ConnectSandbox(c, p[0]);
    case R::kMetrics: return Metrics(c, p[0]);
    case R::kLogs: return Logs(c, p[0], false);
    case R::kLogsV2: return Logs(c, p[0], true);
    case R::kUpdateNetwork: return UpdateNetwork(c, p[0]);
    case R::kPause: return PauseSandbox(c, p[0]);
    case R::kFork: return ForkSandbox(c, p[0], caller);
    case R::kSandboxAudit: return SandboxAudit(c, p[0]);
    case R::kCreateSnapshot: return CreateSnapshot(c, p[0]);
  }
}

bool Server::CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id) {
  if (caller.admin) return true;
  // A live sandbox carries its team: no SQLite on the event loop. An ended
  // or unknown one is looked up (its owners row outlives it).
  if (kind == OwnedKind::kSandbox) {
    if (auto sb = manager_->Get(id)) {
      std::string team = sb->attributes().owner_team;
      if (!team.empty()) return caller.Owns(team);
    }
  }
  auto owner = registry_->OwnerOf(kind, id);
  if (!owner.ok()) {
    LOG_WARN("owner of {}: {}", id, owner.status().message());
    return false;
  }
  return caller.Owns(*owner);
}

void Server::CreateSandbox(std::shared_ptr<HttpConn> c, const Caller& caller) {
  ReadJson(c, [this, c, caller](json body) {
    auto parsed = requests::ParseCreateRequest(body, {config_.max_vcpus, config_.max_memory_mib, config_.max_disk_mib});
    if (!parsed.ok()) return c->RespondError(400, parsed.status().message());
    // The template, resolved once for the caller's team (control/template_catalog.h),
    // off the event loop (it reads the template store, named snapshots and
    // image files) and never behind a bring-up (lookups_).
    asio::post(*lookups_, [this, c, caller, req = *std::move(parsed)] {
      auto resolved = catalog_->Resolve(req.template_id.value_or("base"), caller.team, caller.admin);
      asio::post(c->executor(), [this, c, caller, req, resolved = std::move(resolved)] {
        if (!resolved.ok()) return c->RespondError(HttpStatusFor(resolved.status()), resolved.status().message());
        CreateSandboxFrom(c, caller, req, *resolved);
      });
    });
  });
}

void Server::CreateSandboxFrom(std::shared_ptr<HttpConn> c, const Caller& caller, const requests::CreateRequest& req,
                               const control::ResolvedTemplate& tmpl) {
  {
    CreateOptions opts;
    opts.detach = true;
    opts.template_name = tmpl.image_template;
    opts.named_snapshot_dir = tmpl.named_snapshot_dir;
    // The runtime: the body's, else the template name's ("base-gvisor"),
    // else the default (the manager's).
    opts.runtime = req.runtime ? *req.runtime : tmpl.runtime_in_name;
    const std::string display_id = tmpl.template_id, alias = tmpl.alias;
    if (!display_id.empty()) templates_->NoteTemplateImage(tmpl.image_template, display_id);
    const image::MachineShape shape = ClampedShape(tmpl.shape);
    opts.vcpus = req.vcpus.value_or(shape.vcpus);
    opts.memory_mib = req.memory_mib.value_or(shape.memory_mib);
    opts.env_vars = req.env_vars;
    opts.egress_policy = req.egress_policy;
    if (Status st = requests::CheckTemplateDisk(req, tmpl.disk_mib); !st.ok())
      return c->RespondError(400, st.message());
    int ttl = ClampTimeout(req.timeout_s.value_or(config_.default_timeout_s));
    opts.timeout = std::chrono::seconds(ttl);
    opts.attributes.metadata = req.metadata;
    if (!req.allow_public_traffic) opts.attributes.traffic_token = RandomHex(32);
    opts.attributes.mask_request_host = req.mask_request_host;
    opts.attributes.owner_team = caller.team;
    opts.attributes.auto_pause = req.lifecycle.auto_pause;
    opts.attributes.auto_pause_memory = req.lifecycle.auto_pause_memory;
    opts.attributes.auto_resume = req.lifecycle.auto_resume;
    opts.attributes.recorded_env_vars = req.env_vars;  // brokered secrets' values are never persisted
    // A front that placed this create holds its slot in the cluster registry.
    const std::string& secret = config_.cluster.reservation_secret;
    control::CreateAction action{caller, std::move(opts), req.secrets, display_id,
                                 !secret.empty() && SecureEqual(c->Header("X-Airlock-Reservation"), secret)};
    sandboxes_->Create(std::move(action), [this, c, display_id, alias](control::CreateOutcome out) {
      if (!out.sandbox) {
        HeaderList extra;
        if (out.retry_after_s > 0) extra.push_back({"Retry-After", std::to_string(out.retry_after_s)});
        const int code = out.http_status ? out.http_status : HttpStatusFor(out.status);
        return asio::post(c->executor(), [c, code, st = out.status, extra] { c->RespondError(code, st.message(), extra); });
      }
      const SandboxRecord rec = out.sandbox->Record();
      json created = SandboxJson(rec, ShownTemplateId(rec));
      if (!display_id.empty()) created["templateID"] = display_id;
      if (!alias.empty()) created["alias"] = alias;
      asio::post(c->executor(), [c, text = created.dump()] { c->Respond(201, "application/json", text); });
    });
  }
}

void Server::ListSandboxes(std::shared_ptr<HttpConn> c, const Caller& caller, bool v2) {
  auto parsed = requests::ParseListSandboxes([&c](const std::string& name) { return c->Query(name); });
  if (!parsed.ok()) return c->RespondError(400, parsed.status().message());
  const requests::ListSandboxesRequest& q = *parsed;
  std::vector<std::pair<SandboxRecord, int>> rows;
  size_t total_running = 0;
  for (const auto& sb : manager_->VisibleList()) {
    SandboxRecord rec = sb->Record();
    if (!caller.admin && rec.owner != caller.team) continue;  // another team's
    ++total_running;
    if (!(rec.state == "paused" ? q.want_paused : q.want_running)) continue;
    if (!q.template_id.empty() && rec.template_id != q.template_id && ShownTemplateId(rec) != q.template_id) continue;
    if (q.started_after_us && rec.created_at_ms * 1000 < *q.started_after_us) continue;
    if (q.started_before_us && rec.created_at_ms * 1000 >= *q.started_before_us) continue;
    bool match = true;
    for (auto& [k, v] : q.metadata) {
      auto it = rec.metadata.find(k);
      if (it == rec.metadata.end() || it->second != v) match = false;
    }
    if (match) rows.emplace_back(std::move(rec), sb->disk_mib());
  }
  auto key = [](const SandboxRecord& r) { return std::make_pair(r.created_at_ms, r.id); };
  std::sort(rows.begin(), rows.end(),
            [&](auto& a, auto& b) { return q.ascending ? key(a.first) < key(b.first) : key(b.first) < key(a.first); });
  json arr = json::array();
  HeaderList extra = {{"X-Total-Running", std::to_string(total_running)}};
  int taken = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i].first;
    if (q.after && (q.ascending ? !(key(r) > *q.after) : !(key(r) < *q.after))) continue;
    if (taken == q.limit) {
      const auto& last = rows[i - 1].first;
      extra.push_back({"X-Next-Token", std::to_string(last.created_at_ms) + "_" + last.id});
      break;
    }
    SandboxRecord shown = r;
    shown.template_id = ShownTemplateId(r);
    arr.push_back(ListedSandboxJson(shown, rows[i].second, false));
    ++taken;
  }
  (void)v2;
  c->Respond(200, "application/json", arr.dump(), extra);
}

void Server::GetSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  auto sb = Visible(id);
  if (!sb) return RespondNoSandbox(c, id);
  SandboxRecord shown = sb->Record();
  shown.template_id = ShownTemplateId(shown);
  json detail = ListedSandboxJson(shown, sb->disk_mib(), true);
  AddEgressFields(manager_->egress(), id, detail);
  secrets_->AddSecretFields(id, detail);
  c->Respond(200, "application/json", detail.dump());
}

void Server::KillSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  // Decided here, on the event loop: from now on nothing shows or reaches it.
  if (!sandboxes_->Kill(id).ok()) return RespondNoSandbox(c, id);
  streams_.Drop(id);
  asio::post(*workers_, [this, c, id] {
    sandboxes_->DestroyKilled(id);
    asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
  });
}

void Server::SetTimeout(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseSetTimeout(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const int64_t timeout_s = req->timeout_s;
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(timeout_s)} * 1000;
    if (!Visible(id)) return RespondNoSandbox(c, id);
    asio::post(*workers_, [this, c, id, ends, timeout_s] {
      Status st = sandboxes_->SetTimeout(id, ends, timeout_s);
      asio::post(c->executor(), [this, c, id, st] {
        if (!st.ok()) return RespondNoSandbox(c, id);
        c->Respond(204, "", "");
      });
    });
  });
}

void Server::ConnectSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseConnect(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(req->timeout_s.value_or(config_.default_timeout_s))} * 1000;
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    memory_->NoteActivity(id);  // a connected sandbox is in use: not the memory-pressure policy's first pause
    asio::post(*workers_, [this, c, id, ends] {
      control::ConnectOutcome out = sandboxes_->Connect(id, ends);
      if (!out.status.ok()) {
        return asio::post(c->executor(),
                          [c, st = out.status] { c->RespondError(HttpStatusFor(st), st.message()); });
      }
      if (!out.sandbox) return asio::post(c->executor(), [this, c, id] { RespondNoSandbox(c, id); });
      const SandboxRecord rec = out.sandbox->Record();
      std::string text = SandboxJson(rec, ShownTemplateId(rec)).dump();
      asio::post(c->executor(),
                 [c, text, code = out.resumed ? 201 : 200] { c->Respond(code, "application/json", text); });
    });
  });
}

void Server::Logs(std::shared_ptr<HttpConn> c, const std::string& id, bool v2) {
  int64_t from = 0;
  if (auto s = c->Query(v2 ? "cursor" : "start"); s && !s->empty()) from = std::strtoll(s->c_str(), nullptr, 10);
  size_t limit = 1000;
  if (auto s = c->Query("limit"); s && !s->empty()) limit = std::strtoul(s->c_str(), nullptr, 10);
  json entries = json::array(), lines = json::array();
  {
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    for (const auto& e : sb->Logs()) {
      if (e.ts_ms < from || entries.size() >= limit) continue;
      entries.push_back({{"timestamp", FormatRfc3339Ms(e.ts_ms)},
                         {"level", e.level},
                         {"message", e.message},
                         {"fields", json::object()}});
      lines.push_back({{"timestamp", FormatRfc3339Ms(e.ts_ms)}, {"line", e.message}});
    }
  }
  for (auto& e : EgressLogEntries(id, from)) {
    if (entries.size() >= limit) break;
    lines.push_back({{"timestamp", e["timestamp"]}, {"line", e["message"]}});
    entries.push_back(std::move(e));
  }
  json out = v2 ? json{{"logs", entries}} : json{{"logs", lines}, {"logEntries", entries}};
  c->Respond(200, "application/json", out.dump());
}

}  // namespace airlock::server
