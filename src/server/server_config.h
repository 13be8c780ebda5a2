// What `airlock serve` is configured with (its flags, docs/server.md):
// listeners, limits, the Manager's settings, builds, MCP, the cluster hooks
// of a node. Units are in the names (_s, _mib, _ms); 0 or empty means off
// or "the default" where a field says so.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "audit/otlp_exporter.h"
#include "common/status.h"
#include "control/admission.h"
#include "control/memory_pressure.h"
#include "control/secrets_service.h"
#include "control/template_catalog.h"
#include "core/manager.h"
#include "core/reaper.h"
#include "image/image.h"
#include "gateway/api_keys.h"
#include "gateway/tls_front.h"
#include "server/http_conn.h"

namespace airlock::templates {
class TemplateStore;
}

namespace airlock::server {

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
  // TLS in front of `listen` (gateway/tls_front.h): "ip:port" (serve
  // --tls-listen) with a PEM certificate chain and key (--tls-cert,
  // --tls-key; a wildcard certificate for `domain` and api.<domain> lets
  // E2B's SDKs reach https://api.<domain> and https://<port>-<id>.<domain>).
  // Empty: no TLS.
  std::string tls_listen, tls_cert, tls_key;
  // A cluster node's listener (cluster/cluster_tls.h): --tls-listen takes
  // only clients with a certificate this accepts (a front's); set by
  // serve --role node with --cluster-ca, never by a flag of its own.
  std::shared_ptr<const gateway::TlsClientAuth> tls_client_auth;
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
  // How long after create a sandbox may run, whatever its TTL: serve
  // --max-lifetime (lifetime.default_s; 0: no cap) and, per team,
  // --team-max-lifetime TEAM=S (lifetime.per_team; ParseTeamMaxLifetimes).
  LifetimeCaps lifetime;
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
  // Webhooks of lifecycle events (lifecycle_events.h): may they reach
  // private, loopback and the host's addresses (serve
  // --webhook-allow-private), and how long apart their retries are
  // (--webhook-retry-delay, ms; E2B's 10 s).
  bool webhook_allow_private = false;
  int64_t webhook_retry_delay_ms = 10000;
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
  // Volumes (core/volumes.h): the size of one when its create names none
  // (serve --volume-size-mib), the sum of sizes one team may have
  // (serve --team-volume-budget-mib; -1: a quarter of the state dir's
  // filesystem; 0: none), and how many one team may have
  // (serve --max-volumes-per-team; 0: no cap).
  int64_t volume_size_mib = 1024;
  int64_t team_volume_budget_mib = -1;
  int64_t max_volumes_per_team = 64;
  // Idle sleep for sandboxes whose create names no lifecycle.idleTimeout
  // (serve --idle-timeout, seconds; 0: none).
  int idle_timeout_s = 0;
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
    // worker: an error fails its bring-up. `reservation`: the front's
    // reservation the create claimed (claim_reservation), 0: none.
    std::function<Status(const std::string& id, int64_t reservation)> sandbox_added;
    // A create carrying X-Airlock-Reservation (gateway/reservation.h):
    // ClusterRegistry::ClaimReservation for this node.
    std::function<StatusOr<int64_t>(const std::string& token, const std::string& digest)> claim_reservation;
    // A claimed reservation's create failed here: its slot goes back.
    std::function<void(int64_t reservation)> release_reservation;
    // A sandbox ended (on a worker).
    std::function<void(const std::string& id)> sandbox_removed;
    // The node's share of the cluster's custom templates
    // (cluster/template_replica.h): called once the template store is open,
    // on the starting thread; returns what the template catalog asks
    // before it resolves a custom template. `owner`: ManagerConfig::owner
    // (the images' owner). What it keeps of `store` must be let go before
    // the Server is destroyed.
    std::function<control::TemplateCatalog::ClusterSource(templates::TemplateStore& store, const std::string& owner)>
        templates;
    // A build's image was installed, before the build is ready (on the
    // build's thread): what sharing it needs is done now (its digest).
    std::function<void(const std::string& image)> template_image_installed;
    // The node's share of the cluster's secrets (cluster/secret_replica.h):
    // called once the secrets service exists, on the starting thread;
    // returns what it asks of the cluster. What it keeps of `service` must
    // be let go before the Server is destroyed.
    std::function<control::SecretsService::ClusterSource(control::SecretsService& service)> secrets;
  } cluster;
};

// A TTL within [0, max_timeout_s].
int ClampTimeout(const ServerConfig& config, int64_t seconds);
// `own` (0s: none) within serve's maxima, else serve's defaults.
image::MachineShape ClampedShape(const ServerConfig& config, const image::MachineShape& own);
// The shape a create of the template gets when it names none: the
// template's own (image::DefaultShapeOf) within serve's maxima, else
// serve's defaults.
image::MachineShape DefaultShapeFor(const ServerConfig& config, const std::string& template_name);
// The values of serve --team-max-lifetime, each "TEAM=SECONDS": TEAM as
// `airlock apikey create --team` takes it (1..64 of [A-Za-z0-9_.-]),
// SECONDS a decimal integer 0..2147483647 (0: no cap for that team).
// InvalidArgument quoting the value when one is malformed or names a team
// a second time.
StatusOr<std::map<std::string, int, std::less<>>> ParseTeamMaxLifetimes(const std::vector<std::string>& values);

}  // namespace airlock::server
