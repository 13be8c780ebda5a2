// The daemon (`airlock serve`): one HTTP port serving the E2B control plane
// (spec §1: /v2/sandboxes, /sandboxes/{id}, ...; X-API-Key) and the data
// plane (requests carrying E2b-Sandbox-Id are proxied to that sandbox's agent
// or another guest port; X-Access-Token), see docs/server.md.
//
// Threads: one io_context thread runs every connection and the proxy;
// blocking work (Manager::Create/Destroy, agent /metrics, SQLite writes)
// runs on a small worker pool and posts its result back to the
// connection's executor, so the event loop never blocks on a VM.
//
// State: the Manager owns every sandbox's state (core/manager.h Sandbox:
// machine, metadata, times, lifecycle, log, outcome), writes the Registry
// (SQLite) on each transition so a restarted daemon re-adopts detached
// VMMs. What owns a lock, a timer or a thread is a class of its own that
// the server holds: the reaper (core/reaper.h), the memory governor and the
// metrics sampler (control/), the live data-plane streams (stream_table.h).
// Errors are Status values; HTTP errors are JSON {"code","message"}.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "audit/audit_log.h"
#include "audit/otlp_exporter.h"
#include "common/agent_port.h"
#include "common/clock.h"
#include "common/state_lock.h"
#include "common/status.h"
#include "control/memory_governor.h"
#include "control/metrics_sampler.h"
#include "control/sandbox_controller.h"
#include "control/template_catalog.h"
#include "core/manager.h"
#include "core/reaper.h"
#include "image/image.h"
#include "gateway/relay_guard.h"
#include "core/registry.h"
#include "secrets/broker.h"
#include "secrets/redactor.h"
#include "control/admission.h"
#include "gateway/api_keys.h"
#include "control/caller.h"
#include "server/http_conn.h"
#include "control/metrics.h"
#include "server/routes.h"
#include "server/views.h"
#include "server/requests/create.h"  // Lifecycle, ParseLifecycle, ... (tests)
#include "server/requests/list.h"
#include "server/requests/secret.h"
#include "secrets/spec.h"
#include "control/secrets_service.h"
#include "server/server_config.h"
#include "gateway/stream_table.h"
#include "server/team_disk.h"
#include "server/router.h"
#include "server/template_api.h"

namespace airlock::server {

// Who a request is from, and the secrets service, are control/'s.
using control::Caller;
using control::DaemonMetrics;
using control::SecretsService;

struct TemplateAnswer;
class McpService;

inline constexpr const char* kAirlockVersion = "0.1.0";

// The host names of the package mirrors this host's apt sources
// (/etc/apt/sources.list, sources.list.d/*.list and *.sources) and npm
// configuration (`npm config get registry`) use: what build sandboxes may
// reach unless serve --build-allow says otherwise. `root` prefixes the
// paths (tests).
std::vector<std::string> DefaultBuildAllow(const std::string& root = "");

class Server {
 public:
  // Opens the registry and the Manager (re-adopting live sandboxes of a
  // previous daemon), then listens. Errors: the failing step.
  static StatusOr<std::unique_ptr<Server>> Open(ServerConfig config);
  ~Server();
  uint16_t port() const { return listener_->port(); }
  // The console's port (ServerConfig::console_listen), 0 when there is none.
  uint16_t console_port() const { return console_listener_ ? console_listener_->port() : 0; }
  // Serves until Stop() or SIGINT/SIGTERM.
  void Run();
  void Stop();  // thread-safe
  Manager& manager() { return *manager_; }
  // The ids and aliases of every custom template this daemon holds (a
  // cluster node lists them in the registry, so placement sends their
  // creates here). Blocks on the template store.
  std::vector<std::string> CustomTemplateNames();

 private:
  friend class DaemonStart;  // Init's steps (daemon_start.cc)
  explicit Server(ServerConfig config);
  Status Init();

  // audit (audit_hooks.cc)



  // MCP over streamable HTTP at /mcp (mcp_service.h, docs/mcp.md): made
  // once the listener is bound (Init), shut down first in ~Server, destroyed
  // with the members declared after it.
  std::unique_ptr<McpService> mcp_;


  // state (the Manager's; these are the server's views and hooks)
  // SandboxEvents (server.cc): streams, secrets, audit, admission, metrics.
  void OnSandboxEnding(Sandbox& sb, const SandboxEnd& end);
  void OnSandboxEnded(const std::string& id, const SandboxEnd& end);

  ServerConfig config_;
  StateLock registry_lock_;  // held for the daemon's life (released last)
  // Declared before io_: pending handlers destroyed with io_ still audit.
  std::shared_ptr<secrets::Redactor> redactor_;
  std::shared_ptr<audit::AuditLog> audit_;
  std::unique_ptr<audit::OtlpExporter> otlp_;
  DaemonMetrics metrics_;
  std::unique_ptr<control::Admission> admission_;
  // Secrets and sandbox CAs (docs/secrets.md); made before the Manager,
  // whose egress proxy asks its broker.
  std::unique_ptr<SecretsService> secrets_;
  std::string db_path_, db_dir_;
  asio::io_context io_;
  std::unique_ptr<asio::thread_pool> workers_;
  std::unique_ptr<HttpListener> listener_;
  std::unique_ptr<HttpListener> console_listener_;  // ServerConfig::console_listen; null without
  std::unique_ptr<asio::signal_set> signals_;
  std::unique_ptr<Registry> registry_;
  // Disk per team (disk_hooks.cc, docs/limits.md); the upload TTL is
  // TemplateApi's (MaybeSweepUploads, on the key timer).
  std::unique_ptr<TeamDisk> team_disk_;
  // X-API-Key checks in memory; reloads run on lookups_.
  std::unique_ptr<ApiKeyTable> api_keys_;
  // Short blocking reads that must never queue behind a bring-up holding
  // every worker: API-key reloads (a new key's first call) and template
  // resolution (TemplateCatalog, so admission answers a create at once).
  std::unique_ptr<asio::thread_pool> lookups_;
  std::unique_ptr<Manager> manager_;
  std::unique_ptr<Reaper> reaper_;  // after manager_: destroyed before it
  // The sandbox actions (create, kill, timeout, connect); after manager_.
  std::unique_ptr<control::SandboxController> sandboxes_;
  // After manager_, io_ and workers_ (destroyed before them; ~Server joins
  // the workers first): they read the Manager and post to the workers.
  std::unique_ptr<control::MemoryGovernor> memory_;  // host memory readings, pressure pauses
  std::unique_ptr<control::MetricsSampler> metrics_sampler_;  // GET /sandboxes/{id}/metrics history
  StreamTable streams_{io_};  // live data-plane exchanges per sandbox
  // Custom templates: the store, the Builder, uploads (template_api.h). Its
  // builds are stopped first thing in ~Server (TemplateApi::Stop, before the
  // reaper, the workers and the Manager's release); declared after manager_
  // so that it is also destroyed before the Manager its Builder drives.
  std::unique_ptr<TemplateApi> templates_;
  // What a create's templateID names; after templates_: it reads its store.
  std::unique_ptr<control::TemplateCatalog> catalog_;
  // The front door and the handlers by resource (router.h), made last in
  // Init over the owners above (destroyed first).
  std::unique_ptr<Router> router_;
};

// What each team holds on disk (uploads, layers, images: TemplateApi's,
// none while it is null; pause snapshots, checkpoints, named snapshots: the
// Manager's), for TeamDisk; blocks (disk_hooks.cc).
std::vector<TeamDisk::Holding> DiskHoldingsOf(Manager& manager, TemplateApi* templates);

// serve --pool -1: one parked sandbox per 8 GiB of host memory, 1..4.
int PoolSizeForHost();

// "sandbox.create", "sandbox.kill", ... for a control-plane route (path
// segments after the optional "v2").
// The record's trafficAccessToken for a response: the token, or null.
}  // namespace airlock::server
