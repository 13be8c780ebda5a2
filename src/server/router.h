// The daemon's front door: every request of the API's listener and of the
// console's goes through one Router, which decides where it goes and no
// more. On the API's listener: a data-plane request (E2b-Sandbox-Id, the
// "<port>-<id>.<domain>" Host, or a signed /files URL) goes to DataPlane;
// everything else is the control plane: GET /health and /metrics and PUT
// /upload/ need no key, /console/ is redirected to the console's own
// origin, /mcp goes to McpService, and every other route is authenticated
// by its API key (the key table, refreshed off the io thread on a miss),
// audited under its action (routes.h), checked for ownership (another
// team's sandbox is 404) and dispatched to the handler class of its
// resource. The console's listener serves the console's files, the
// control plane, and the agent's port by header only (docs/console.md).
//
// Threads: io thread only; nothing here blocks. Errors are answered as
// JSON {"code","message"}: 401 without a valid key, 404 for no route or
// another team's object, 405 for a known path with another method.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/api_base.h"
#include "server/audit_api.h"
#include "server/data_plane.h"
#include "server/events_api.h"
#include "server/host_api.h"
#include "server/idempotency.h"
#include "server/sandbox_api.h"
#include "server/secrets_api.h"
#include "server/snapshot_api.h"
#include "server/volumes_api.h"

namespace airlock::server {

class McpService;

class Router : public ApiHandlers {
 public:
  // `console_port`: the console listener's port (0 without one).
  Router(const Services& s, McpService* mcp, std::function<uint16_t()> console_port);
  ~Router();
  void Handle(std::shared_ptr<HttpConn> c);               // the API's listener
  void HandleConsoleOrigin(std::shared_ptr<HttpConn> c);  // the console's listener
  // The named-snapshot handlers (a DELETE /templates/{name} of a snapshot
  // reaches them through TemplateApi).
  SnapshotApi& snapshots();

 private:
  std::optional<std::string> DataPlaneTarget(const HttpConn& c, uint16_t* port) const;
  // /console/ asked of the API's listener: a redirect to the console's origin, or 404 without one.
  void ConsoleElsewhere(std::shared_ptr<HttpConn> c);
  void HandleControl(std::shared_ptr<HttpConn> c);
  void RouteControl(std::shared_ptr<HttpConn> c, const Caller& caller);
  void Dispatch(std::shared_ptr<HttpConn> c, const Caller& caller, const RouteMatch& m);

  McpService* mcp_;
  std::function<uint16_t()> console_port_;
  std::unique_ptr<SandboxApi> sandbox_api_;
  std::unique_ptr<SnapshotApi> snapshot_api_;
  std::unique_ptr<SecretsApi> secrets_api_;
  std::unique_ptr<VolumesApi> volumes_api_;
  std::unique_ptr<AuditApi> audit_api_;
  std::unique_ptr<HostApi> host_api_;
  std::unique_ptr<DataPlane> data_plane_;
  std::unique_ptr<EventsApi> events_api_;
  std::unique_ptr<Idempotency> idempotency_;
};

}  // namespace airlock::server
