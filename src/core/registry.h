// Registry: the daemon's durable state in SQLite (<state_dir>/airlock.db):
// the sandboxes it runs (so a restarted daemon can re-adopt them), the API
// keys of its control plane (stored as SHA-256 hex, never in clear) and who
// owns what (docs/security.md "Tenancy").
//
// Tenancy: every key belongs to a team (by default a team of its own, named
// after the key's id); sandboxes and named snapshots belong to the team of
// the key that made them (`owners`, kept after a sandbox dies so its audit
// trail stays its team's). An admin key (the CLI's cli.key, or
// `apikey create --admin`) sees and acts on everything.
//
// A thin RAII wrapper over the sqlite3 C API. Every method is one statement
// or one transaction; the class is thread-safe (one connection behind a
// mutex, WAL journal, busy timeout 5 s). Errors: Internal with the SQLite
// message and the statement's purpose; NotFound for missing rows.
// Times are Unix milliseconds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "core/sandbox_attributes.h"

struct sqlite3;

namespace airlock {

struct SandboxRecord {
  std::string id;
  std::string template_id;
  // The runtime it runs on (runtime/registry.h AvailableRuntimes()); rows
  // written before runtimes were recorded read "qemu".
  std::string runtime = "qemu";
  std::string state;  // "running" (the only state persisted today)
  int64_t created_at_ms = 0;
  int64_t ends_at_ms = 0;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> env_vars;
  std::string access_token;
  // E2B's trafficAccessToken (network.allowPublicTraffic false): required
  // as E2B-Traffic-Access-Token on every data-plane port but the agent's.
  // Empty: the other ports are open to anyone who can reach the daemon.
  std::string traffic_token;
  // E2B's network.maskRequestHost: the Host header the guest's servers see
  // on data-plane requests, "${PORT}" replaced by the port. Empty: the
  // client's own Host is passed on (as E2B's proxy does).
  std::string mask_request_host;
  int vcpus = 1;
  int memory_mib = 512;
  std::string netns_ip;
  int vmm_pid = -1;
  std::string run_dir;
  // Lifecycle (spec §1.5.1 autoPause, autoPauseMemory, autoResume): at TTL,
  // pause (keeping memory or not) instead of killing; resume a paused
  // sandbox when data-plane traffic arrives for it.
  bool auto_pause = false;
  bool auto_pause_memory = true;
  bool auto_resume = false;
  std::vector<uint16_t> https_ports;  // network.httpsPorts (kept in the lifecycle JSON)
  std::vector<SandboxVolumeMount> volume_mounts;  // kept in the lifecycle JSON
  int idle_timeout_s = 0;                         // kept in the lifecycle JSON
  bool idle_keeps_processes = false;
  // The team that owns it ("" only for rows written before tenancy: admin only).
  std::string owner;
};

// A rollback in flight (core/checkpoints.cc, docs/snapshots.md "A daemon
// killed with SIGKILL"): written before the sandbox's old VMM is stopped,
// rewritten once the new VMM is up, removed once the sandbox's row names the
// new VMM. A daemon start that finds one completes the rollback instead of
// taking the sandbox for dead (Manager::Open).
struct RollbackIntent {
  std::string sandbox_id;
  std::string checkpoint_id;
  // kRollbackStopping: the old VMM (vmm_pid) may or may not be stopped yet,
  // no new VMM is known; kRollbackRestored: the new VMM (vmm_pid) came up
  // from the checkpoint and its agent had /init.
  std::string phase;
  int vmm_pid = -1;
  int64_t started_at_ms = 0;
};
inline constexpr char kRollbackStopping[] = "stopping";
inline constexpr char kRollbackRestored[] = "restored";

struct ApiKeyRecord {
  std::string id;  // short random id, shown by `apikey ls`
  std::string name;
  std::string prefix;  // first characters of the key, for recognition
  int64_t created_at_ms = 0;
  std::string team;    // owner of what this key creates
  bool admin = false;  // sees and acts on every team's sandboxes and secrets
};

// A call made with an Idempotency-Key (server/idempotency.h): the request's
// fingerprint, and once it was answered, the answer.
struct IdempotentCall {
  std::string fingerprint;  // SHA-256 hex of method, path and body
  bool answered = false;
  int status = 0;
  std::string content_type;
  std::string body;
  int64_t created_at_ms = 0;
};

// A webhook of E2B's events API (control/lifecycle_events.h), per team.
struct WebhookRecord {
  std::string id;
  std::string team;
  std::string name;
  std::string url;
  bool enabled = true;
  std::vector<std::string> events;  // lifecycle event types it is sent
  std::string secret;               // signs each delivery; never returned by the API
  int64_t created_at_ms = 0;
};

// A volume (core/volumes.h, docs/volumes.md), per team: its name is unique
// within the team; its token authenticates the content API.
struct VolumeRecord {
  std::string id;
  std::string team;
  std::string name;
  std::string token;
  int64_t size_mib = 0;
  int64_t created_at_ms = 0;
};

// What the registry records ownership of.
enum class OwnedKind { kSandbox, kSnapshot };

class Registry {
 public:
  // Opens (creating if needed, mode 0600) and migrates the database.
  static StatusOr<std::unique_ptr<Registry>> Open(const std::string& path);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Status PutSandbox(const SandboxRecord& r);  // insert or replace
  // Removes the sandbox's row and its rollback intent, if any.
  Status DeleteSandbox(const std::string& id);
  Status SetEndsAt(const std::string& id, int64_t ends_at_ms);
  StatusOr<std::vector<SandboxRecord>> ListSandboxes();

  // Rollback intents (one per sandbox at most): insert or replace, remove
  // (OK when there is none), list.
  Status PutRollbackIntent(const RollbackIntent& intent);
  Status ClearRollbackIntent(const std::string& sandbox_id);
  StatusOr<std::vector<RollbackIntent>> ListRollbackIntents();

  // Creates a key: returns (record, the clear key "e2b_<40 hex>", E2B's own
  // format: 20 random bytes, 160 bits); only the hash (SHA-256 hex of the
  // whole key) is stored. Keys made before this format ("al_<48 hex>") stay
  // valid: lookups hash whatever the caller sends. team empty: a team of its own (the key's id). Team
  // names: [A-Za-z0-9_.-]{1,64}; InvalidArgument otherwise.
  StatusOr<std::pair<ApiKeyRecord, std::string>> CreateApiKey(const std::string& name, const std::string& team = "",
                                                              bool admin = false);
  StatusOr<std::vector<ApiKeyRecord>> ListApiKeys();
  // Removes by id or by name; NotFound when nothing matched.
  Status RemoveApiKey(const std::string& id_or_name);
  // Is `key` a stored key? (hash lookup)
  StatusOr<bool> CheckApiKey(const std::string& key);
  // The id of a stored key ("" when `key` is not one), for audit records.
  StatusOr<std::string> ApiKeyId(const std::string& key);
  // The stored key `key` is (nullopt when it is none).
  StatusOr<std::optional<ApiKeyRecord>> LookupApiKey(const std::string& key);
  // Every stored key with the hash lookups compare (SHA-256 hex of the
  // whole key), for an in-memory table of keys (server/api_keys.h).
  StatusOr<std::vector<std::pair<std::string, ApiKeyRecord>>> ApiKeysByHash();
  // SQLite's PRAGMA data_version of this connection: it changes when another
  // connection (another process such as `airlock apikey`, or another
  // connection of this one) commits to the database.
  StatusOr<int64_t> DataVersion();

  // Idempotency keys, per team. Claim: drops the team's calls older than
  // `window_ms` (and a call never answered older than `stale_ms`, its daemon
  // gone), then either holds (team, key) for a call with `fingerprint`
  // (nullopt) or returns the call that holds it. Answer: records the answer
  // of a held key. Release: frees it (an answer not worth replaying).
  // ReleaseUnanswered: frees every held key not answered (a daemon starting:
  // the calls of the one before it ended with it).
  StatusOr<std::optional<IdempotentCall>> ClaimIdempotencyKey(const std::string& team, const std::string& key,
                                                              const std::string& fingerprint, int64_t now_ms,
                                                              int64_t window_ms, int64_t stale_ms);
  Status AnswerIdempotencyKey(const std::string& team, const std::string& key, int status,
                              const std::string& content_type, const std::string& body);
  Status ReleaseIdempotencyKey(const std::string& team, const std::string& key);
  Status ReleaseUnansweredIdempotencyKeys();

  // Lifecycle events (control/lifecycle_events.h), per team: the newest
  // `keep` of a team are kept. List: the team's (one sandbox's when
  // `sandbox` is set), of `types` when not empty, newest first unless
  // `ascending`, after skipping `offset`, at most `limit`.
  Status AppendLifecycleEvent(const std::string& team, const std::string& sandbox, const std::string& type,
                              const std::string& event_json, int64_t at_ms, int keep);
  StatusOr<std::vector<std::string>> ListLifecycleEvents(const std::string& team, const std::string& sandbox,
                                                         const std::vector<std::string>& types, bool ascending,
                                                         int offset, int limit);
  // Webhooks: insert or replace; the team's; one by id (NotFound also for
  // another team's); delete (NotFound when none of the team's matched).
  Status PutWebhook(const WebhookRecord& w);
  StatusOr<std::vector<WebhookRecord>> ListWebhooks(const std::string& team);
  StatusOr<WebhookRecord> GetWebhook(const std::string& team, const std::string& id);
  Status DeleteWebhook(const std::string& team, const std::string& id);

  // Volumes: insert (AlreadyExists when the team has one of that name);
  // every team's (team empty) or one team's, by creation; delete by id.
  Status InsertVolume(const VolumeRecord& v);
  StatusOr<std::vector<VolumeRecord>> ListVolumes(const std::string& team);
  // One volume by id, any team's; NotFound when there is none.
  StatusOr<VolumeRecord> GetVolume(const std::string& id);
  Status DeleteVolume(const std::string& id);

  // Ownership (never removed with the sandbox: its audit stays its team's).
  Status SetOwner(OwnedKind kind, const std::string& id, const std::string& team);
  // The owning team; nullopt when nothing is recorded (admin only).
  StatusOr<std::optional<std::string>> OwnerOf(OwnedKind kind, const std::string& id);

 private:
  Registry() = default;
  Status Exec(const std::string& sql, const char* what);
  sqlite3* db_ = nullptr;
  std::mutex mu_;
};

// A team's name: 1..64 characters of [A-Za-z0-9_.-] (an API key's team,
// serve --team-max-lifetime's).
bool IsTeamName(std::string_view team);

// API keys as E2B issues them ("e2b_" + 40 lower-case hex digits), which the
// E2B SDKs' newest sources check before sending (`^e2b_[0-9a-f]+$`).
inline constexpr char kApiKeyPrefix[] = "e2b_";
// A new key and its record, not yet stored (Registry::CreateApiKey's format
// and checks; the cluster registry stores the same). InvalidArgument for a
// name that is not 1..128 characters or a team not [A-Za-z0-9_.-]{0,64}.
StatusOr<std::pair<ApiKeyRecord, std::string>> NewApiKey(const std::string& name, const std::string& team,
                                                         bool admin);
inline constexpr size_t kApiKeyRandomBytes = 20;
// Does `key` pass the SDKs' client-side check (`^e2b_[0-9a-f]+$`)?
bool HasE2bKeyFormat(std::string_view key);

// `n` random bytes from getrandom(2) (blocks only before the host's CRNG is seeded).
std::string RandomBytes(size_t n);
// Lower-case hex of `bytes` random bytes from getrandom(2).
std::string RandomHex(size_t bytes);

}  // namespace airlock
