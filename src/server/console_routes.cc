// The web console (docs/console.md) on its own origin (serve
// --console-listen), never the API's: the API's origin relays guest bytes
// (signed /files URLs), and a guest that got a page or a service worker onto
// the console's origin would read the key an operator signs in with. The
// console's listener serves (HandleConsoleOrigin):
//   /console/…                               its files, no key (they hold nothing secret)
//   E2b-Sandbox-Id (+ E2b-Sandbox-Port 49983) the agent's port, as the terminal and the file browser
//                                            call it: a fetch() with headers, which no navigation,
//                                            <script> or service-worker registration can send
//   everything else                          the control API (X-API-Key)
// and refuses signed URLs, other guest ports and service-worker fetches.
// The API's listener answers /console/ with a redirect to the console's
// origin (ConsoleElsewhere). Besides the E2B API the console reads these
// authenticated JSON routes (other clients may use them too):
//   GET /sandboxes/metrics?sandbox_ids=a,b   E2B's batch shape: {"sandboxes": {id: metric}}, the newest sample
//                                            of each listed sandbox the key may see (at most 1000 ids)
//   GET /audit, GET /audit/verify            the trail and its check (audit_hooks.cc)
//   GET /host                                capacity in use, pool, queue, runtimes, version (admin keys)
#include <sys/statvfs.h>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/agent_port.h"
#include "console/console_assets.h"
#include "http/client.h"
#include "runtime/registry.h"
#include "gateway/relay_guard.h"
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


void HostApi::LatestMetrics(std::shared_ptr<HttpConn> c, const Caller& caller) {
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
    if (auto m = metrics_sampler_->Latest(id)) out[id] = control::MetricJson(*m);
  }
  c->Respond(200, "application/json", json{{"sandboxes", out}}.dump());
}

void HostApi::HostView(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (!caller.admin) return c->RespondError(403, "the host view needs an admin key");
  const SandboxCounts n = CountSandboxes();
  auto st = admission_->stats();
  const auto& ac = admission_->config();
  auto ps = manager_->warm_pool().stats();
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
        {"poolHeldMiB", memory_->pool_held_mib()},
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
