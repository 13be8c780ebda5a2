// The sandbox routes of the control plane (spec §1.4, schemas §1.5):
//   POST /sandboxes (/v2/sandboxes)          create: 201 {sandbox}; 400; 404 template; 429/503/507 refused
//   GET  /sandboxes, /v2/sandboxes           list (X-Total-Running, X-Next-Token)
//   GET  /sandboxes/{id}                     detail; DELETE: kill (204)
//   POST /sandboxes/{id}/timeout             204; POST .../connect: 200, 201 when it resumed
//   GET  /sandboxes/{id}/logs, /v2/...       the sandbox's log and its egress records
//   GET  /sandboxes/{id}/metrics             resource use (control/metrics_sampler.h)
//   PUT  /sandboxes/{id}/network             the egress policy (egress_routes.cc)
// Ownership is the router's (another team's sandbox is 404 before these
// run). Each handler parses, runs its action (control/sandbox_controller.h)
// on a worker and answers from the outcome; io thread, never blocking.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control/template_catalog.h"
#include "server/api_base.h"
#include "server/requests/create.h"

namespace airlock::server {

class SandboxApi : public ApiHandlers {
 public:
  explicit SandboxApi(const Services& s) : ApiHandlers(s) {}
  void CreateSandbox(std::shared_ptr<HttpConn> c, const Caller& caller);
  void ListSandboxes(std::shared_ptr<HttpConn> c, const Caller& caller, bool v2);
  void GetSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void KillSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void SetTimeout(std::shared_ptr<HttpConn> c, const std::string& id);
  // POST /sandboxes/{id}/refreshes {"duration"?: s}: E2B's keep-alive.
  void Refresh(std::shared_ptr<HttpConn> c, const std::string& id);
  void ConnectSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void Logs(std::shared_ptr<HttpConn> c, const std::string& id, bool v2);
  void Metrics(std::shared_ptr<HttpConn> c, const std::string& id);
  void UpdateNetwork(std::shared_ptr<HttpConn> c, const std::string& id);

 private:
  // The create once its template is resolved (a custom template's is shown
  // by its template id and alias).
  void CreateSandboxFrom(std::shared_ptr<HttpConn> c, const Caller& caller, const requests::CreateRequest& req,
                         const control::ResolvedTemplate& tmpl);
  // The egress records of a sandbox as log entries (v2 shape) from `from_ms`.
  // (Unix ms, SandboxLogEntry) of each egress decision, oldest first.
  std::vector<std::pair<int64_t, nlohmann::json>> EgressLogEntries(const std::string& id);
};

}  // namespace airlock::server
