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
#include "server/relay_guard.h"
#include "core/registry.h"
#include "secrets/broker.h"
#include "secrets/redactor.h"
#include "control/admission.h"
#include "server/api_keys.h"
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
#include "server/stream_table.h"
#include "server/team_disk.h"
#include "server/template_api.h"

namespace airlock::server {

// Who a request is from, and the secrets service, are control/'s.
using control::Caller;
using control::DaemonMetrics;
using control::SecretsService;

struct TemplateAnswer;
class McpService;

inline constexpr const char* kAirlockVersion = "0.1.0";

// The API key a request presents: X-API-Key, else (allow_bearer: /mcp,
// where MCP clients send one) "Authorization: Bearer <key>"; "" for none.
std::string PresentedApiKey(const HttpConn& c, bool allow_bearer);

struct ServerConfig {
  // Host-based data-plane routing "<port>-<id>.<domain>" only for this
  // domain (serve --domain); empty: none (E2b-Sandbox-Id routing only).
  std::string domain;
  std::string listen = "127.0.0.1:3000";
  // The web console's own listener, "ip:port" (serve --console-listen); empty:
  // no console. Its origin serves the console's files, the control API and
  // the agent's port by E2b-Sandbox-Id only, never a signed URL or a
  // host-routed guest port; `listen` serves no console (docs/console.md).
  std::string console_listen;
  ManagerConfig manager;
  // The registry; empty: <state_dir>/airlock.db. The CLI key file is
  // written beside it (cli.key, 0600). Tests point this at a temp dir so a
  // test daemon never adopts the sandboxes of the real one.
  std::string db_path;
  int default_timeout_s = 300;  // TTL when create gives none
  int max_timeout_s = 86400;    // upper bound of every TTL
  int workers = 4;
  int default_vcpus = 1;
  int default_memory_mib = 512;
  HttpLimits limits;
  size_t max_json_body = 1 << 20;  // control-plane request bodies
  // Write <state_dir>/cli.key (0600) holding a key for the local CLI.
  bool write_cli_key = true;
  std::chrono::milliseconds reaper_interval{1000};
  // How often the daemon samples each running sandbox's resource use for
  // GET /sandboxes/{id}/metrics (E2B: 5 s); 0: no history, live samples only.
  std::chrono::milliseconds metrics_interval{5000};
  // The audit trail (docs/audit.md); empty: <db dir>/audit.
  std::string audit_dir;
  // OTLP/HTTP JSON log export of audit records; endpoint empty: off.
  audit::OtlpConfig otlp;
  // Limits (docs/limits.md): maxima a create request may ask for
  // (cpuCount, memoryMB, diskSizeMB; 400 above), admission, lifetime.
  int max_vcpus = 4;
  int max_memory_mib = 4096;
  int max_disk_mib = 16384;
  int max_lifetime_s = 0;  // 0: none; else sandboxes die this long after create, whatever their TTL
  control::AdmissionConfig admission;
  // Disk admission (docs/limits.md): a create is refused (507) unless the
  // filesystems of the state dir and of the registry each keep
  // disk_reserve_mib free for the registry and audit trail plus
  // disk_per_create_mib for the new sandbox's overlay and snapshots.
  int64_t disk_reserve_mib = 1024;
  int64_t disk_per_create_mib = 256;
  // Memory admission and pressure (docs/limits.md "Host memory"): every
  // memory_sample_interval a worker reads MemAvailable and each VMM's
  // smaps_rollup for admission (AdmissionConfig) and the pressure policy
  // (memory_pressure.h). 0: never (admission then counts every sandbox at
  // its memoryMB and sees no pressure).
  std::chrono::milliseconds memory_sample_interval{2000};
  control::PressureConfig pressure;
  // On a clean stop: true destroys every sandbox; false leaves the detached
  // VMMs running for the next daemon to adopt.
  bool kill_on_exit = false;
  // true: every create cold boots (no template snapshots are made or used).
  bool no_template_snapshot = false;
  // The warm pool per template shape (serve --pool; core/warm_pool.h):
  // -1 sized to the host (PoolSizeForHost), 0 off.
  int pool_size = -1;
  // Custom template builds (docs/templates.md): at most max_builds at once
  // (more wait), each at most build_timeout_s; build sandboxes may reach
  // only build_allow (serve --build-allow; empty: the package mirrors of the
  // host's apt and npm configuration, DefaultBuildAllow); an upload is at
  // most max_upload_mib. public_url: the base of upload URLs ("" = the
  // Host the client used).
  int max_builds = 1;
  int build_timeout_s = 3600;
  std::vector<std::string> build_allow;
  bool build_allow_set = false;
  // Registries fromImage may reach without TLS verification (serve
  // --insecure-registry HOST[:PORT]).
  std::vector<std::string> insecure_registries;
  // Registries fromImage may pull from whatever they resolve to (serve
  // --registry-allow HOST[:PORT]); others only from public addresses.
  std::vector<std::string> registry_allow;
  int64_t max_upload_mib = 2048;
  // An upload no build in flight uses is removed this long after its last
  // upload or files link (serve --upload-ttl; templates/upload_ttl.h); 0: never.
  int64_t upload_ttl_s = 86400;
  // What one team may hold on disk: uploads, layers, images, checkpoints,
  // paused and named snapshots (serve --team-disk-budget; team_disk.h).
  // Writing more is 507. -1: a quarter of the state dir's filesystem; 0: off.
  int64_t team_disk_budget_mib = -1;
  // The most an OCI base's layers may expand to on the host (serve
  // --max-image-unpack; image/layer_size.h).
  int64_t max_image_unpack_mib = 16384;
  std::string public_url;
  // The API the MCP tools call with the caller's key ("host:port"); empty:
  // this daemon's own port on loopback. A cluster's nodes name a front here
  // (serve --mcp-api), so the tools see every node's sandboxes.
  std::string mcp_api;
  // MCP tool calls (docs/mcp.md): threads of their pool, and calls a team
  // may hold at once, running or waiting (0: below half the threads,
  // FairCallQueue::DefaultPerTeam; must stay below half).
  int mcp_threads = 16;
  int mcp_calls_per_team = 0;
  // A node of a cluster (serve --role node, docs/multinode.md); all unset
  // on a single-node daemon.
  struct ClusterHooks {
    // API keys from the cluster registry instead of this daemon's registry.
    std::optional<ApiKeySource> keys;
    // A sandbox is about to be handed out (a create or a fork child), on a
    // worker: an error fails its bring-up. front_reserved: the create carried
    // X-Airlock-Reservation equal to reservation_secret (a front holds its slot).
    std::function<Status(const std::string& id, bool front_reserved)> sandbox_added;
    // A sandbox ended (on a worker).
    std::function<void(const std::string& id)> sandbox_removed;
    std::string reservation_secret;
  } cluster;
};

// The host names of the package mirrors this host's apt sources
// (/etc/apt/sources.list, sources.list.d/*.list and *.sources) and npm
// configuration (`npm config get registry`) use: what build sandboxes may
// reach unless serve --build-allow says otherwise. `root` prefixes the
// paths (tests).
std::vector<std::string> DefaultBuildAllow(const std::string& root = "");

// Which sandbox a data-plane request is for, and its guest port (*port,
// default the agent's): E2b-Sandbox-Id (+ E2b-Sandbox-Port) when the Host is
// localhost, an IP or sandbox.<domain>, else a Host "<port>-<id>.<domain>"
// (`domain` empty: no Host form at all). nullopt: a control-plane request.
std::optional<std::string> DataPlaneSandbox(const HttpConn& c, const std::string& domain, uint16_t* port);
// The same from the Host, E2b-Sandbox-Id and E2b-Sandbox-Port values.
std::optional<std::string> DataPlaneSandbox(const std::string& host, const std::string& id,
                                            const std::string& port_header, const std::string& domain,
                                            uint16_t* port);

// GET /console/<file>: the web console's built-in files (console_routes.cc).
void ServeConsoleAsset(HttpConn& c);

// What a caller of ForwardRequest adds to a plain relay (a cluster's front,
// cluster/front.h).
struct ForwardExtras {
  HeaderList headers;               // added to the request head
  std::optional<std::string> body;  // sent instead of the client's body (already read by the caller)
  // The upstream's status as soon as its head arrives; 0 when none came
  // (unreachable, dropped, cut). Called once, on the io thread.
  std::function<void(int)> on_status;
  std::string upstream_name;  // for "<name> unreachable" (default: "sandbox port N")
  // How the upstream's answer head is guarded (relay_guard.h); a sandbox's
  // relay in the data plane is always GuardForGuest's.
  RelayGuard guard = RelayGuard::kNone;
};
// Relays the request on `c` to host:port (an IP literal; the Host header
// sent is `host_header`, "" for host:port) and its answer back, streamed
// both ways (the data plane's proxy: chunked and WebSocket included).
void ForwardRequest(std::shared_ptr<HttpConn> c, const std::string& host, uint16_t port, std::string host_header,
                    ForwardExtras extras = {}, std::function<void(std::weak_ptr<DataPlaneStream>)> track = nullptr);

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
  Registry& registry() { return *registry_; }
  audit::AuditLog& audit() { return *audit_; }
  // Appends to the audit trail (thread-safe; failures are logged).
  void Audit(nlohmann::json record);
  audit::AuditSink AuditSinkFn();
  // Counters the network code bumps (egress decisions and bytes).
  DaemonMetrics& daemon_metrics() { return metrics_; }
  // The brokered-secret table the egress proxy queries (docs/secrets.md).
  std::shared_ptr<secrets::Broker> broker() { return secrets_->broker(); }
  Manager& manager() { return *manager_; }
  // The ids and aliases of every custom template this daemon holds (a
  // cluster node lists them in the registry, so placement sends their
  // creates here). Blocks on the template store.
  std::vector<std::string> CustomTemplateNames();

 private:
  explicit Server(ServerConfig config);
  Status Init();
  void Handle(std::shared_ptr<HttpConn> c);
  std::optional<std::string> DataPlaneTarget(const HttpConn& c, uint16_t* port) const;
  // The console's listener (console_routes.cc): its files, the control API,
  // the agent's port by header; nothing else of the data plane.
  void HandleConsoleOrigin(std::shared_ptr<HttpConn> c);
  // /console/ asked of the API's listener: a redirect to the console's origin, or 404 without one.
  void ConsoleElsewhere(std::shared_ptr<HttpConn> c);

  // control plane (control_plane.cc): HandleControl authenticates (the
  // key table, api_keys.h), RouteControl dispatches.
  void HandleControl(std::shared_ptr<HttpConn> c);
  // A sandbox's last bring-up step on a cluster node (ServerConfig::cluster):
  // the registry learns it, so every front routes it before its create or
  // fork answers. OK at once on a single-node daemon.
  Status RecordInCluster(const std::string& id, bool front_reserved);
  void RouteControl(std::shared_ptr<HttpConn> c, const Caller& caller);
  void CreateSandbox(std::shared_ptr<HttpConn> c, const Caller& caller);
  // The create once its template is resolved (a custom template's is shown
  // by its template id and alias).
  void CreateSandboxFrom(std::shared_ptr<HttpConn> c, const Caller& caller, const requests::CreateRequest& req,
                         const control::ResolvedTemplate& tmpl);
  void ListSandboxes(std::shared_ptr<HttpConn> c, const Caller& caller, bool v2);
  void GetSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void KillSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void SetTimeout(std::shared_ptr<HttpConn> c, const std::string& id);
  void ConnectSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  // GET /sandboxes/{id}/metrics (metrics_history.cc; the history: control/metrics_sampler.h).
  void Metrics(std::shared_ptr<HttpConn> c, const std::string& id);
  void Logs(std::shared_ptr<HttpConn> c, const std::string& id, bool v2);
  // egress_routes.cc: PUT /sandboxes/{id}/network; the egress records of a
  // sandbox as log entries (v2 shape) from `from_ms`.
  void UpdateNetwork(std::shared_ptr<HttpConn> c, const std::string& id);
  std::vector<nlohmann::json> EgressLogEntries(const std::string& id, int64_t from_ms);
  // snapshots (snapshot_routes.cc)
  void PauseSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  // POST /sandboxes/{id}/fork {"timeout"?, "count"?}: 201 [{sandbox}|{error}].
  void ForkSandbox(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller);
  // Named snapshots: POST /sandboxes/{id}/snapshots {"name"?} 201
  // {"snapshotID","names"}; GET /snapshots?sandboxID=&name=&limit=&nextToken=;
  // DELETE /templates/{snapshotID or name} 204 / 404 / 409 (in use).
  // Snapshots belong to the team that owns the sandbox they were taken of.
  void CreateSnapshot(std::shared_ptr<HttpConn> c, const std::string& id);
  void ListSnapshots(std::shared_ptr<HttpConn> c, const Caller& caller);
  void DeleteSnapshot(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller);
  // Custom templates (template_api.h, docs/templates.md) are TemplateApi's:
  // templates_, whose Route() RouteControl calls.
  // The API's templateID of a sandbox: a built-in template with its runtime
  // when that is not qemu ("base-gvisor", core/template_runtime.h), a custom
  // template's id (TemplateApi::DisplayTemplateId), else its template as recorded.
  std::string ShownTemplateId(const SandboxRecord& r);
  // Checkpoints and rollback (checkpoint_routes.cc, docs/snapshots.md):
  // POST|GET /sandboxes/{id}/checkpoints, DELETE .../checkpoints/{cid},
  // POST /sandboxes/{id}/rollback {"checkpointID"}; `p`: the route's
  // parameters (routes.h), p[0] a sandbox the caller owns, live or 404.
  void RouteCheckpoints(std::shared_ptr<HttpConn> c, RouteId route, const std::vector<std::string>& p);
  void CreateCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id);
  void ListCheckpoints(std::shared_ptr<HttpConn> c, const std::string& id);
  void DeleteCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id, const std::string& checkpoint_id);
  void RollbackSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  // May `caller` see sandbox / named snapshot `id` (its owners row)?
  bool CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id);
  // Makes the template snapshot for (template, shape, runtime; "" = the
  // default) on a worker, once; nothing for a runtime without snapshots.
  void EnsureTemplateSnapshotAsync(const std::string& template_name, int vcpus, int memory_mib,
                                   const std::string& runtime = "");
  // Reads a bounded JSON object body; answers 400/413 itself and returns
  // nothing on failure.
  void ReadJson(std::shared_ptr<HttpConn> c, std::function<void(nlohmann::json)> then);

  // audit (audit_hooks.cc)
  Status InitAudit(const std::string& db_dir);
  // Records the call when its response begins: key id, action, sandbox, status.
  void AuditControlCall(const std::shared_ptr<HttpConn>& c, const std::string& key_id, const std::string& action,
                        const std::string& sandbox);
  void SandboxAudit(std::shared_ptr<HttpConn> c, const std::string& id);
  // Runs `work` on a worker and answers 200 with its JSON, or 500 with its error.
  void AnswerFromWorker(std::shared_ptr<HttpConn> c, std::function<StatusOr<nlohmann::json>()> work);
  void AuditAuthFailure(const std::shared_ptr<HttpConn>& c);  // rate-limited (10/s)

  // limits and metrics (limits_hooks.cc)
  // OK when the disk can take another sandbox; else ResourceExhausted with
  // the numbers (answered 507).
  Status CheckDiskForCreate() const;
  void ScheduleAdmissionTick();
  void ServeMetrics(std::shared_ptr<HttpConn> c);
  // Visible sandboxes by API state (GET /metrics, GET /host).
  struct SandboxCounts {
    int running = 0, paused = 0;
  };
  SandboxCounts CountSandboxes();

  // The web console's files and the JSON it reads besides the E2B API
  // (console_routes.cc, docs/console.md; the audit routes: audit_hooks.cc).
  void ServeConsole(std::shared_ptr<HttpConn> c);
  void LatestMetrics(std::shared_ptr<HttpConn> c, const Caller& caller);
  void AuditTrail(std::shared_ptr<HttpConn> c, const Caller& caller);
  void AuditVerify(std::shared_ptr<HttpConn> c, const Caller& caller);
  void HostView(std::shared_ptr<HttpConn> c, const Caller& caller);

  // MCP over streamable HTTP at /mcp (mcp_service.h, docs/mcp.md): made
  // once the listener is bound (Init), shut down first in ~Server, destroyed
  // with the members declared after it.
  std::unique_ptr<McpService> mcp_;

  // E2B secrets API (secrets_api.cc): /secrets and /secrets/{selector}
  // (selector empty: the collection); the store work is SecretsService's.
  void HandleSecrets(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& selector);
  void ListSecrets(std::shared_ptr<HttpConn> c, const Caller& caller);

  // data plane (proxy.cc)
  void HandleData(std::shared_ptr<HttpConn> c, const std::string& id, uint16_t port);
  // uploadUrl()/downloadUrl() carry no routing header (spec §4.2, §8): the
  // sandbox whose access token signs this GET/POST /files, if any.
  std::optional<std::string> SandboxBySignature(const HttpConn& c);

  // state (the Manager's; these are the server's views and hooks)
  // The sandbox the API shows, or nullptr.
  std::shared_ptr<Sandbox> Visible(const std::string& id) { return manager_->Visible(id); }
  // 404 for a sandbox the API does not show; one that ended lately says how
  // ("outcome", "outcomeDetail", "endedAt" beside code and message).
  void RespondNoSandbox(const std::shared_ptr<HttpConn>& c, const std::string& id);
  // Appends to a sandbox's log (nothing when it is gone).
  void AddLog(const std::string& id, std::string level, std::string message);
  // SandboxEvents (server.cc): streams, secrets, audit, admission, metrics.
  void OnSandboxEnding(Sandbox& sb, const SandboxEnd& end);
  void OnSandboxEnded(const std::string& id, const SandboxEnd& end);
  // API keys changed by `airlock apikey` reach the table within a reaper_interval.
  void ScheduleKeyRefresh();
  int ClampTimeout(int64_t seconds) const;
  // The shape a create of the template gets when it names none: the
  // template's own (image::DefaultShapeOf) within serve's maxima, else
  // serve's defaults.
  image::MachineShape DefaultShapeFor(const std::string& template_name) const;
  // `own` (0s: none) within serve's maxima, else serve's defaults.
  image::MachineShape ClampedShape(const image::MachineShape& own) const;

  ServerConfig config_;
  StateLock registry_lock_;  // held for the daemon's life (released last)
  // Declared before io_: pending handlers destroyed with io_ still audit.
  std::shared_ptr<secrets::Redactor> redactor_;
  std::shared_ptr<audit::AuditLog> audit_;
  std::unique_ptr<audit::OtlpExporter> otlp_;
  DaemonMetrics metrics_;
  std::unique_ptr<control::Admission> admission_;
  std::unique_ptr<asio::steady_timer> admission_timer_;
  // Secrets and sandbox CAs (docs/secrets.md); made before the Manager,
  // whose egress proxy asks its broker.
  std::unique_ptr<SecretsService> secrets_;
  std::string db_path_, db_dir_;
  asio::io_context io_;
  std::unique_ptr<asio::thread_pool> workers_;
  std::unique_ptr<HttpListener> listener_;
  std::unique_ptr<HttpListener> console_listener_;  // ServerConfig::console_listen; null without
  std::unique_ptr<asio::signal_set> signals_;
  std::unique_ptr<asio::steady_timer> key_timer_;
  std::unique_ptr<Registry> registry_;
  // Disk per team (disk_hooks.cc, docs/limits.md); the upload TTL is
  // TemplateApi's (MaybeSweepUploads, on the key timer).
  void InitTeamDisk();
  std::vector<TeamDisk::Holding> DiskHoldings();  // worker thread
  // OK, or ResourceExhausted naming the budget (answered 507); worker thread.
  Status CheckTeamDisk(const std::string& team);
  std::unique_ptr<TeamDisk> team_disk_;
  // X-API-Key checks in memory; reloads run on lookups_.
  std::unique_ptr<ApiKeyTable> api_keys_;
  // Short blocking reads that must never queue behind a bring-up holding
  // every worker: API-key reloads (a new key's first call) and template
  // resolution (TemplateCatalog, so admission answers a create at once).
  std::unique_ptr<asio::thread_pool> lookups_;
  std::atomic<bool> key_refresh_in_flight_{false};
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
};

// serve --pool -1: one parked sandbox per 8 GiB of host memory, 1..4.
int PoolSizeForHost();

// "sandbox.create", "sandbox.kill", ... for a control-plane route (path
// segments after the optional "v2").
// The record's trafficAccessToken for a response: the token, or null.
}  // namespace airlock::server
