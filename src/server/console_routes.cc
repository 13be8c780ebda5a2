// What the web console (docs/console.md) reads besides the E2B API: its
// own files at /console/ (no key: they hold nothing secret), and four
// authenticated JSON routes other clients may use too:
//   GET /sandboxes/metrics?sandbox_ids=a,b   E2B's batch shape: {"sandboxes": {id: metric}}, the newest sample
//                                            of each listed sandbox the key may see (at most 1000 ids)
//   GET /audit?since=&sandbox=&action=&limit= the trail, newest `limit` (1..10000, default 500) oldest first;
//                                            `action` matches a whole action or a prefix ending in ".";
//                                            a non-admin key sees its team's sandboxes' records and its own calls
//   GET /audit/verify                        audit::Verify of the whole trail (admin keys; 403 otherwise)
//   GET /host                                capacity in use, pool, queue, runtimes, version (admin keys)
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "console/console_assets.h"
#include "runtime/registry.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

int64_t FreeMib(const std::string& dir, int64_t* total_mib) {
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0) return -1;
  *total_mib = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
}

}  // namespace

void Server::ServeConsole(std::shared_ptr<HttpConn> c) {
  if (c->method() != http::Method::kGet && c->method() != http::Method::kHead)
    return c->RespondError(405, "the console is read with GET", {{"Allow", "GET, HEAD"}});
  const std::string& path = c->path();
  // Relative asset URLs need the trailing slash.
  if (path == "/console") return c->Respond(308, "text/plain", "/console/\n", {{"Location", "/console/"}});
  const console::Asset* asset = console::FindAsset(std::string_view(path).substr(std::string_view("/console/").size()));
  http::HeaderList headers;
  for (const auto& h : console::SecurityHeaders()) headers.push_back(h);
  if (!asset) return c->Respond(404, "text/plain; charset=utf-8", "no such console file\n", headers);
  c->Respond(200, asset->content_type, std::string(asset->body), headers);
}

void Server::LatestMetrics(std::shared_ptr<HttpConn> c, const Caller& caller) {
  auto ids_text = c->Query("sandbox_ids");
  if (!ids_text || ids_text->empty()) return c->RespondError(400, "sandbox_ids is required (comma-separated ids)");
  std::vector<std::string> ids;
  for (size_t pos = 0; pos <= ids_text->size();) {
    size_t comma = ids_text->find(',', pos);
    if (comma == std::string::npos) comma = ids_text->size();
    if (comma > pos) ids.push_back(ids_text->substr(pos, comma - pos));
    pos = comma + 1;
  }
  if (ids.size() > 1000) return c->RespondError(400, "sandbox_ids: at most 1000 ids");
  json out = json::object();
  for (const auto& id : ids) {
    if (!Visible(id) || !CallerOwns(caller, OwnedKind::kSandbox, id)) continue;
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = metric_history_.find(id); it != metric_history_.end() && !it->second.empty())
      out[id] = MetricJson(it->second.back());
  }
  c->Respond(200, "application/json", json{{"sandboxes", out}}.dump());
}

void Server::AuditTrail(std::shared_ptr<HttpConn> c, const Caller& caller) {
  audit::QueryFilter f;
  if (auto s = c->Query("since"); s && !s->empty()) {
    auto ms = audit::ParseSince(*s, NowUnixMs());
    if (!ms.ok()) return c->RespondError(400, ms.status().message());
    f.since_ms = *ms;
  }
  size_t limit = 500;
  if (auto l = c->Query("limit"); l && !l->empty()) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 10000) return c->RespondError(400, "limit must be 1..10000");
    limit = static_cast<size_t>(v);
  }
  if (auto s = c->Query("sandbox")) f.sandbox = *s;
  std::string action = c->Query("action").value_or("");
  // Filters after the read narrow it: read more, keep the newest `limit`.
  const bool narrowed = !action.empty() || !caller.admin;
  f.limit = narrowed ? 10000 : limit;
  std::string dir = audit_->dir();
  asio::post(*workers_, [this, c, dir, f, limit, action, caller] {
    auto recs = audit::Query(dir, f);
    if (!recs.ok()) {
      std::string msg = recs.status().message();
      return asio::post(c->executor(), [c, msg] { c->RespondError(500, msg); });
    }
    std::map<std::string, bool> owns;  // sandbox → visible to the caller
    std::vector<json> kept;
    for (auto& r : *recs) {
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
    std::string out = json(kept).dump(-1, ' ', false, json::error_handler_t::replace);
    asio::post(c->executor(), [c, out] { c->Respond(200, "application/json", out); });
  });
}

void Server::AuditVerify(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (!caller.admin) return c->RespondError(403, "verifying the whole audit trail needs an admin key");
  std::string dir = audit_->dir();
  asio::post(*workers_, [c, dir] {
    auto report = audit::Verify(dir);
    int status = 200;
    std::string out;
    if (!report.ok()) {
      status = 500;
      out = JsonError(500, report.status().message());
    } else {
      json problems = json::array();
      for (const auto& p : report->problems)
        problems.push_back({{"file", p.file}, {"line", p.line}, {"what", p.what}, {"tampering", p.tampering}});
      out = json{{"ok", report->ok()},
                 {"tampered", report->tampered()},
                 {"files", report->files},
                 {"records", report->records},
                 {"problems", problems},
                 {"notes", report->notes}}
                .dump(-1, ' ', false, json::error_handler_t::replace);
    }
    asio::post(c->executor(), [c, status, out] { c->Respond(status, "application/json", out); });
  });
}

void Server::HostView(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (!caller.admin) return c->RespondError(403, "the host view needs an admin key");
  int running = 0, paused = 0;
  for (const auto& sb : manager_->VisibleList()) (sb->api_state() == "paused" ? paused : running)++;
  auto st = admission_->stats();
  const auto& ac = admission_->config();
  auto ps = manager_->pool_stats();
  int64_t state_total = 0, db_total = 0;
  int64_t state_free = FreeMib(config_.manager.state_dir, &state_total);
  int64_t db_free = FreeMib(db_dir_, &db_total);
  json runtimes = json::array();
  for (const auto& name : AvailableRuntimes()) {
    json r = {{"name", name}, {"default", name == manager_->config().runtime}};
    if (name == manager_->config().runtime) r["accelerator"] = manager_->runtime().accelerator();
    runtimes.push_back(std::move(r));
  }
  json out = {
      {"version", kAirlockVersion},
      {"sandboxes", {{"running", running}, {"paused", paused}, {"creating", st.in_flight}, {"max", ac.max_sandboxes}}},
      {"queue", {{"length", st.queued}, {"maxPerKey", ac.max_queue_per_key}}},
      {"memory",
       {{"budgetMiB", st.budget_mib},
        {"heldMiB", st.held_mib},
        {"committedMiB", st.committed_memory_mib},
        {"availableMiB", st.available_mib},
        {"hostReserveMiB", ac.memory_host_reserve_mib},
        {"poolHeldMiB", pool_held_mib_.load()},
        {"pressure", st.pressure}}},
      {"disk",
       {{"stateDir", config_.manager.state_dir},
        {"stateFreeMiB", state_free},
        {"stateTotalMiB", state_total},
        {"registryFreeMiB", db_free},
        {"registryTotalMiB", db_total}}},
      {"pool", {{"parked", ps.parked}, {"hits", ps.hits}, {"misses", ps.misses}, {"sizePerTemplate", config_.pool_size}}},
      {"runtimes", runtimes},
      {"admission",
       {{"granted", st.granted},
        {"rejectedRate", st.rejected_rate},
        {"rejectedMemory", st.rejected_memory},
        {"queueTimeouts", st.queue_timeouts}}}};
  c->Respond(200, "application/json", out.dump());
}

}  // namespace airlock::server
