// The daemon's audit hooks (docs/audit.md): opening the trail, recording
// control-plane calls when their response begins, and reading it: GET
// /sandboxes/{id}/audit, GET /audit, GET /audit/verify. Data-plane records come from audit::DataPlaneTap
// (proxy.cc).
#include <boost/asio/post.hpp>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "audit/audit_log.h"
#include "common/log.h"
#include "secrets/redactor.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

void AuditApi::AuditControlCall(const std::shared_ptr<HttpConn>& c, const std::string& key_id, const std::string& action,
                              const std::string& sandbox) {
  std::string method = c->method_string();
  std::string path = c->path();
  std::string peer = c->peer();
  c->SetOnRespond([this, key_id, action, sandbox, method, path, peer](int status) {
    json r = {{"action", action}, {"method", method}, {"path", path}, {"status", status}, {"peer", peer}};
    if (!key_id.empty()) r["api_key_id"] = key_id;
    if (!sandbox.empty()) r["sandbox"] = sandbox;
    Audit(std::move(r));
  });
}

namespace {

// since (ParseSince) and limit (1..10000) of an audit query; InvalidArgument
// naming the parameter.
Status ParseAuditWindow(const HttpConn& c, audit::QueryFilter* f) {
  if (auto s = c.Query("since"); s && !s->empty()) {
    ASSIGN_OR_RETURN(f->since_ms, audit::ParseSince(*s, NowUnixMs()));
  }
  if (auto l = c.Query("limit"); l && !l->empty()) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 10000) return InvalidArgument("limit must be 1..10000");
    f->limit = static_cast<size_t>(v);
  }
  return OkStatus();
}

}  // namespace

void AuditApi::SandboxAudit(std::shared_ptr<HttpConn> c, const std::string& id) {
  audit::QueryFilter f;
  f.sandbox = id;
  if (Status st = ParseAuditWindow(*c, &f); !st.ok()) return c->RespondError(400, st.message());
  AnswerFromWorker(c, [dir = audit_->dir(), f]() -> StatusOr<json> {
    ASSIGN_OR_RETURN(auto recs, audit::Query(dir, f));
    return json(std::move(recs));
  });
}

// GET /audit?since=&sandbox=&action=&limit= (docs/server.md): the newest
// `limit` (default 500) matches, oldest first; `action` is a whole action or
// a prefix ending in "."; a non-admin key sees its team's sandboxes' records
// and its own calls.
void AuditApi::AuditTrail(std::shared_ptr<HttpConn> c, const Caller& caller) {
  audit::QueryFilter f;
  f.limit = 500;
  if (Status st = ParseAuditWindow(*c, &f); !st.ok()) return c->RespondError(400, st.message());
  if (auto s = c->Query("sandbox")) f.sandbox = *s;
  std::string action = c->Query("action").value_or("");
  const size_t limit = f.limit;
  // Filters after the read narrow it: read more, keep the newest `limit`.
  if (!action.empty() || !caller.admin) f.limit = 10000;
  AnswerFromWorker(c, [this, dir = audit_->dir(), f, limit, action, caller]() -> StatusOr<json> {
    ASSIGN_OR_RETURN(auto recs, audit::Query(dir, f));
    std::map<std::string, bool> owns;  // sandbox → visible to the caller
    std::vector<json> kept;
    for (auto& r : recs) {
      std::string a = audit::StringField(r, "action");
      if (!action.empty() && a != action && !(action.back() == '.' && a.rfind(action, 0) == 0)) continue;
      if (!caller.admin) {
        std::string sb = audit::StringField(r, "sandbox");
        bool mine = audit::StringField(r, "api_key_id") == caller.key_id;
        if (!mine && !sb.empty()) {
          auto it = owns.find(sb);
          if (it == owns.end()) it = owns.emplace(sb, CallerOwns(caller, OwnedKind::kSandbox, sb)).first;
          mine = it->second;
        }
        if (!mine) continue;
      }
      kept.push_back(std::move(r));
    }
    if (kept.size() > limit) kept.erase(kept.begin(), kept.end() - static_cast<std::ptrdiff_t>(limit));
    return json(std::move(kept));
  });
}

// GET /audit/verify: audit::Verify of the whole trail (admin keys only).
void AuditApi::AuditVerify(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (!caller.admin) return c->RespondError(403, "verifying the whole audit trail needs an admin key");
  AnswerFromWorker(c, [dir = audit_->dir()]() -> StatusOr<json> {
    ASSIGN_OR_RETURN(auto report, audit::Verify(dir));
    json problems = json::array();
    for (const auto& p : report.problems)
      problems.push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}, {"tampering", p.tampering}});
    return json{{"ok", report.ok()},
                {"tampered", report.tampered()},
                {"files", report.files},
                {"records", report.records},
                {"problems", problems},
                {"notes", report.notes}};
  });
}

}  // namespace airlock::server

namespace airlock::server {

std::string ControlActionName(const std::vector<std::string>& seg, http::Method verb) {
  if (!seg.empty() && seg[0] == "secrets" && seg.size() <= 2) {
    if (seg.size() == 1) return verb == http::Method::kPost ? "secret.create" : "secret.list";
    return verb == http::Method::kDelete ? "secret.delete"
           : verb == http::Method::kPost ? "secret.update"
                                         : "secret.get";
  }
  if (seg.size() == 1 && seg[0] == "audit") return "audit.query";
  if (seg.size() == 2 && seg[0] == "audit" && seg[1] == "verify") return "audit.verify";
  if (seg.size() == 1 && seg[0] == "host") return "host.get";
  if (seg.size() == 2 && seg[0] == "sandboxes" && seg[1] == "metrics") return "sandbox.metrics_batch";
  if (seg.empty() || seg[0] != "sandboxes") return "api.unknown_route";
  if (seg.size() == 1) return verb == http::Method::kPost ? "sandbox.create" : "sandbox.list";
  if (seg.size() == 2) return verb == http::Method::kDelete ? "sandbox.kill" : "sandbox.get";
  if (seg.size() >= 3 && seg[2] == "checkpoints") {
    if (seg.size() == 4) return verb == http::Method::kDelete ? "sandbox.checkpoint.delete" : "api.unknown_route";
    return verb == http::Method::kPost ? "sandbox.checkpoint" : "sandbox.checkpoints";
  }
  if (seg.size() == 3) return "sandbox." + seg[2];
  return "api.unknown_route";
}

void AuditApi::AuditAuthFailure(const std::shared_ptr<HttpConn>& c) {
  // An unauthenticated client must not be able to fill the disk: at most 10
  // records a second, the rest counted in the next record.
  static std::mutex mu;
  static int64_t window = 0;
  static int in_window = 0;
  static uint64_t suppressed = 0;
  uint64_t dropped = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    int64_t now_s = NowUnixMs() / 1000;
    if (now_s != window) {
      window = now_s;
      in_window = 0;
    }
    if (++in_window > 10) {
      ++suppressed;
      return;
    }
    dropped = std::exchange(suppressed, 0);
  }
  json r = {{"action", "auth.denied"},
            {"method", c->method_string()},
            {"path", c->path()},
            {"status", 401},
            {"peer", c->peer()}};
  if (dropped) r["suppressed_before"] = dropped;
  Audit(std::move(r));
}

}  // namespace airlock::server
