// The owners the daemon (server.h's Server) holds, in the groups it holds
// them in: the registry, the audit trail, the event loop, the fleet (the
// Manager and what acts on its sandboxes), the custom templates, the front
// door. Each group is one member of Server.
//
// Order. Construction is the order of DaemonStart's steps (daemon_start.cc),
// not of these declarations: a group starts empty (null pointers, an
// unlocked lock; only the io_context and the stream table are live from the
// start) and each step fills what it opens. Destruction is the declarations':
// ~Server first stops what runs (server.cc), then Server's members go in
// reverse declaration order, and a group's members go in reverse
// declaration order too, after every member Server declares after the group.
// Each group below says where Server declares it and what its order rests on.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "audit/audit_log.h"
#include "audit/otlp_exporter.h"
#include "gateway/tls_front.h"
#include "common/state_lock.h"
#include "common/status.h"
#include "control/memory_governor.h"
#include "control/metrics_sampler.h"
#include "control/sandbox_controller.h"
#include "control/template_catalog.h"
#include "core/manager.h"
#include "core/reaper.h"
#include "core/registry.h"
#include "gateway/api_keys.h"
#include "gateway/stream_table.h"
#include "secrets/redactor.h"
#include "server/api_base.h"
#include "server/http_conn.h"
#include "server/router.h"
#include "server/template_api.h"

namespace airlock::server {

// The registry (SQLite: sandboxes, API keys) and the lock that makes this
// daemon its only one: a second daemon would adopt the same sandboxes and
// interleave the same audit trail (docs/security.md). Open takes the lock
// before it opens the registry; declared first, the lock is released only
// after the registry closes. Server declares it right after its config, before every owner
// that reads or writes the registry (the Manager, the key table, the
// catalog, the sandbox controller, the router's handlers), so the registry
// outlives them all.
class RegistryHold {
 public:
  // Locks <db>.lock (exclusive, never blocks), then opens the registry at
  // `db`. Errors: the lock's ("registry <db>.lock is in use by pid N") or
  // the registry's; a lock taken before a failed open stays held until the
  // hold is destroyed.
  Status Open(const std::string& db);

  Registry& db() const { return *registry_; }  // after Open
  const std::string& db_path() const { return db_path_; }
  const std::string& db_dir() const { return db_dir_; }  // "." for a bare file name

 private:
  StateLock lock_;  // first: held for the daemon's life, released last
  std::string db_path_, db_dir_;
  std::unique_ptr<Registry> registry_;
};

// The audit trail (docs/audit.md): the redactor every record (and the HTTP
// layer's log) passes through, the log, and its OTLP export (null without
// --otlp-endpoint). Server declares it before the loop: the loop's pending
// handlers, destroyed with the io_context, still write records (an abandoned
// data-plane exchange's tap), and the log's observer counts each record in
// Server's DaemonMetrics (declared after this, also before the loop) and
// hands it to the exporter. The exporter goes first, then the log, then the
// redactor the log holds a share of.
struct AuditTrail {
  std::shared_ptr<secrets::Redactor> redactor;  // shared with the log and SecretsService
  std::shared_ptr<audit::AuditLog> log;          // shared with the handlers (Services::audit)
  std::unique_ptr<audit::OtlpExporter> otlp;
  // One record; nothing while the log is not open.
  void Append(nlohmann::json record) const { AppendAudit(log.get(), std::move(record)); }
};

// The event loop and what runs beside it (server.h "Threads"): the
// io_context every connection, timer and relay runs on; the workers
// (blocking work: bring-ups, destroys, agent /metrics, SQLite writes); the
// signal set (SIGINT, SIGTERM: Server::Stop); the lookups (short blocking
// reads that must never queue behind a bring-up holding every worker:
// API-key reloads, template resolution; two threads).
// Server declares it after the audit trail and the counters (its pending
// handlers, destroyed with io, may still write to them) and after admission
// and the secrets, and before every owner that keeps an io object on it or
// posts to it (the fleet, the templates, the front door: destroyed before
// it). io is first, so the pools and the signal set (whose cancelled wait
// goes back to io) are destroyed before it; ~Server joins both pools (Join)
// before any member goes, so their order matters only to work posted after
// that, which is destroyed unrun.
struct Loop {
  asio::io_context io;
  std::unique_ptr<asio::thread_pool> workers;
  std::unique_ptr<asio::signal_set> signals;
  std::unique_ptr<asio::thread_pool> lookups;
  // Waits for the workers, then the lookups, to finish what was posted (each
  // that was made).
  void Join();
};

// The Manager (every sandbox's state, core/manager.h) and the owners that act
// on its sandboxes: the reaper (TTL, autoPause, lifetime cap, dead VMMs), the
// sandbox controller (create, kill, timeout, connect; admission's tick), the
// memory governor (host memory readings, pressure pauses), the metrics
// sampler (GET /sandboxes/{id}/metrics history) and the live data-plane
// streams per sandbox. Each after the Manager reads it, so is destroyed
// before it; the governor and the sampler also post to the workers and keep
// a timer on io. Server declares the fleet after the loop (destroyed before
// io and the pools) and before the templates (the Builder drives the
// Manager, so it goes first).
struct Fleet {
  explicit Fleet(asio::io_context& io) : streams(io) {}
  std::unique_ptr<Manager> manager;
  std::unique_ptr<Reaper> reaper;
  std::unique_ptr<control::SandboxController> controller;
  std::unique_ptr<control::MemoryGovernor> memory;
  std::unique_ptr<control::MetricsSampler> sampler;
  StreamTable streams;
  // On the io thread (Server::Stop): the sampler's, the controller's and the
  // governor's timers, in that order (each that was made).
  void StopTimers();
};

// Custom templates: TemplateApi (the store, the Builder, uploads;
// template_api.h) and the catalog that says what a create's templateID
// names, which reads the store (after it: destroyed before it). Server
// declares them after the fleet, so they go before the Manager the Builder
// drives; the builds themselves are stopped first thing in ~Server
// (TemplateApi::Stop, before the reaper, the workers and the Manager's
// release).
struct Templates {
  std::unique_ptr<TemplateApi> api;
  std::unique_ptr<control::TemplateCatalog> catalog;
};

// The front door: the API's listener, the web console's own
// (ServerConfig::console_listen; null without), the key table the control
// plane checks (X-API-Key; reloads on the loop's lookups) and the router
// the listeners hand every connection to (router.h). Server declares it last:
// the router, made last over every other owner, is destroyed first, then the
// key table and the listeners (their pending accepts go back to io, alive).
struct Front {
  std::unique_ptr<HttpListener> listener;
  std::unique_ptr<HttpListener> console_listener;
  std::unique_ptr<gateway::TlsFront> tls;  // serve --tls-listen; null without
  std::unique_ptr<ApiKeyTable> api_keys;
  std::unique_ptr<Router> router;
  uint16_t port() const { return listener->port(); }
  uint16_t console_port() const { return console_listener ? console_listener->port() : 0; }  // 0: none
  // On the io thread (Server::Stop): both listeners, then the keys' refresh
  // (each that was made).
  void Stop();
};

}  // namespace airlock::server
