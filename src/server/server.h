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
// The server holds its owners in a few groups (daemon_owners.h: the
// registry, the audit trail, the event loop, the fleet, the templates, the
// front door) declared in the order they must be destroyed in reverse of.
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
#include "server/lifecycle_events.h"
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
#include "core/volumes.h"
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
#include "gateway/list_query.h"
#include "server/requests/secret.h"
#include "secrets/spec.h"
#include "control/secrets_service.h"
#include "server/server_config.h"
#include "gateway/stream_table.h"
#include "server/team_disk.h"
#include "server/router.h"
#include "server/template_api.h"
#include "server/daemon_owners.h"

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
  uint16_t port() const { return front_.port(); }
  // The console's port (ServerConfig::console_listen), 0 when there is none.
  uint16_t console_port() const { return front_.console_port(); }
  // Serves until Stop() or SIGINT/SIGTERM.
  void Run();
  void Stop();  // thread-safe
  Manager& manager() { return *fleet_.manager; }
  DaemonMetrics& metrics() { return metrics_; }
  // The ids and aliases of every custom template whose image is here (a
  // cluster node lists them in the registry, so placement sends their
  // creates here). Blocks on the template store.
  std::vector<std::string> CustomTemplateNames();

 private:
  friend class DaemonStart;  // Init's steps (daemon_start.cc)
  explicit Server(ServerConfig config);
  Status Init();

  // SandboxEvents (server.cc), the Manager's hooks: streams, secrets,
  // audit, admission, metrics.
  void OnSandboxEnding(Sandbox& sb, const SandboxEnd& end);
  void OnSandboxEnded(const std::string& id, const SandboxEnd& end);

  // What the daemon holds: twelve owners, most of them groups of
  // daemon_owners.h, which says what each group holds and what its inner
  // order rests on. DaemonStart fills them step by step (its order is the
  // construction order); ~Server stops what runs (server.cc), then they are
  // destroyed in reverse of the order below, front_ first and mcp_ last.

  // MCP over streamable HTTP at /mcp (mcp_service.h, docs/mcp.md): made
  // once the listener is bound (Init), shut down first in ~Server (its tool
  // calls' threads are let go), destroyed last of all.
  std::unique_ptr<McpService> mcp_;
  ServerConfig config_;
  // The registry and its lock, held for the daemon's life: the registry
  // outlives every owner below that reads or writes it; the lock goes after it.
  RegistryHold registry_;
  // Declared before loop_: pending handlers destroyed with its io_context
  // still audit, and the log's observer counts each record into metrics_
  // and hands it to the OTLP exporter.
  AuditTrail audit_;
  DaemonMetrics metrics_;
  // Made before the Manager (the adopted sandboxes are entered in it) and
  // destroyed after it (each end is taken out of it, OnSandboxEnded).
  std::unique_ptr<control::Admission> admission_;
  // Secrets and sandbox CAs (docs/secrets.md); made before the Manager,
  // whose egress proxy asks its broker, and destroyed after it (an end
  // forgets the sandbox's secrets).
  std::unique_ptr<SecretsService> secrets_;
  // Lifecycle events and webhooks (lifecycle_events.h): made before the
  // Manager, whose pauses, resumes and ends it hears, and destroyed after it.
  std::unique_ptr<LifecycleEvents> lifecycle_;
  // The io_context, the workers, the signal set, the lookups: after the
  // owners above (which its pending handlers may still touch when it goes)
  // and before every owner below, which posts to it or keeps io objects on
  // it and so is destroyed first.
  Loop loop_;
  // Disk per team (disk_hooks.cc, docs/limits.md); the upload TTL is
  // TemplateApi's (SweepEvery). The controller's and the templates' disk
  // checks read it: both declared after it, gone first.
  std::unique_ptr<TeamDisk> team_disk_;
  std::unique_ptr<VolumeStore> volumes_;
  // The Manager and what acts on its sandboxes (reaper, controller, memory
  // governor, metrics sampler, live streams).
  Fleet fleet_{loop_.io};
  // Custom templates and the catalog; after fleet_: the Builder drives the
  // Manager, so it goes first.
  Templates templates_;
  // The listeners, the key table and the router: the router is made last
  // (no request is served before Run) over every owner above and is
  // destroyed first.
  Front front_;
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
