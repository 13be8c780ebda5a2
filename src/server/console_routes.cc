// What the web console (docs/console.md) reads besides the E2B API: its
// own files at /console/ (no key: they hold nothing secret), and the
// authenticated JSON routes it reads (other clients may use them too):
//   GET /sandboxes/metrics?sandbox_ids=a,b   E2B's batch shape: {"sandboxes": {id: metric}}, the newest sample
//                                            of each listed sandbox the key may see (at most 1000 ids)
//   GET /audit, GET /audit/verify            the trail and its check (audit_hooks.cc)
//   GET /host                                capacity in use, pool, queue, runtimes, version (admin keys)
#include <sys/statvfs.h>

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

void Server::ServeConsole(std::shared_ptr<HttpConn> c) { ServeConsoleAsset(*c); }

void ServeConsoleAsset(HttpConn& conn) {
  HttpConn* c = &conn;
  if (c->method() != http::Method::kGet && c->method() != http::Method::kHead)
    return c->RespondError(405, "the console is read with GET", {{"Allow", "GET, HEAD"}});
  const std::string& path = c->path();
  // Relative asset URLs need the trailing slash.
  if (path == "/console") return c->Respond(308, "text/plain", "/console/\n", {{"Location", "/console/"}});
  const console::Asset* asset = console::FindAsset(std::string_view(path).substr(std::string_view("/console/").size()));
  const http::HeaderList& headers = console::SecurityHeaders();
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

void Server::HostView(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (!caller.admin) return c->RespondError(403, "the host view needs an admin key");
  const SandboxCounts n = CountSandboxes();
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
      {"sandboxes", {{"running", n.running}, {"paused", n.paused}, {"creating", st.in_flight}, {"max", ac.max_sandboxes}}},
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
