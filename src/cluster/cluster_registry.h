// The cluster registry (docs/multinode.md): what every front and node of one
// airlock cluster share, in PostgreSQL. A single-node `airlock serve` never
// uses it (SQLite, core/registry.h).
//
// Tables (schema version kSchemaVersion, migrations run on start, each in
// its own transaction under an advisory lock so two daemons starting at once
// migrate once):
//   nodes(name, address "ip:port", capacity, reserved, draining, live,
//         boot_id, heartbeat, version)      capacity and reserved count
//                                           sandboxes (running or paused)
//   node_templates(node, template)         what a node can start
//   sandboxes(id, node, created_at, lost_at)  which node owns a sandbox
//   reservations(id, node, made_at, used_at, token, body_sha256,
//         claimed_at)                      a front's slot for a create in
//                                           flight (schema 2), bound to it
//                                           (schema 3)
//   api_keys(id, name, prefix, hash, created_at_ms, team, admin)  as the
//         single-node registry: SHA-256 hex of the key, never the key
//   cluster_meta(key, value)               (empty since schema 3)
//   idempotency_routes(team, key, node, made_at)  where a create with an
//                                           Idempotency-Key went (schema 3)
//   template_bundles(template_id, team, names[], publisher, bundle,
//         updated_at)                      a custom template as its building
//                                           node exported it (TemplateStore::
//                                           ExportTemplate), for every node;
//                                           bundle NULL: deleted (schema 4)
//   node_artefacts(node, digest, size, made_at)  which node holds which
//                                           content-addressed file (a
//                                           template's image) (schema 4)
//   artefact_grants(id, token, digest, holder, requester, made_at)  a
//                                           node's short-lived permission to
//                                           fetch one artefact from one
//                                           holder (schema 4)
//   cluster_secrets(name, sealed, info, publisher, updated_at)  a secret
//                                           as the node that stored it last
//                                           published it: its value sealed
//                                           with the cluster key (base64 of
//                                           nonce|ciphertext|tag, never in
//                                           clear; NULL: deleted), its
//                                           policy and attributes (schema 4)
//
// Capacity accounting. The rule: a node's `reserved` is its sandboxes not
// lost plus its reservations not used yet (and younger than the TTL).
// Every statement below keeps that true, under the node row's lock, and
// every heartbeat recounts it (so drift of any cause lasts one beat):
// - a front reserves one slot with one conditional UPDATE (reserved + 1 <=
//   capacity, live, not draining, heartbeat fresh) that also inserts a
//   reservation row with its time, so two fronts never over-commit a node;
// - the create carries the reservation's random token (never a shared
//   secret); the node claims it (ClaimReservation: its own, unused, for
//   this very body, within the TTL; once) before it starts anything, and
//   its record marks that row used, so the slot is not counted twice;
// - the front releases its reservation only when the node refused the
//   create (its 4xx/5xx) or never got it (connect failure); a client that
//   hangs up frees nothing (the node may still be making the sandbox);
// - until the node claims it, a reservation holds its slot only while its
//   front renews its lease (kReservationLease): a front that died before
//   the create reached the node loses it at the node's next heartbeat; a
//   claimed one older than the TTL with no record (a node that died
//   mid-create) is dropped too; a create that fails after its claim is
//   released by the node itself;
// - sandboxes a node makes by itself (forks) are counted when recorded; an
//   end removes its row and frees its slot in one statement;
// - a node whose heartbeat lapses is marked not live, its reservations are
//   dropped and its sandboxes marked lost; when it registers again its own
//   journal (SQLite) is the truth: its rows are replaced by the sandboxes it
//   still has and `reserved` by their count.
//
// Every call blocks on the database: never on an event loop thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cluster/pg.h"
#include "common/status.h"
#include "core/registry.h"  // ApiKeyRecord

namespace airlock::cluster {

inline constexpr int kSchemaVersion = 4;
// AddSandbox's `reservation` for a sandbox the node makes by itself (a fork
// child): no front reserved its slot, so it needs a free one.
inline constexpr int64_t kWithinCapacity = -1;

// A reservation with no record from its node after this long is dropped
// (the heartbeat's reconciliation). Longer than a front waits for a node's
// answer to a create (FrontConfig::create_timeout).
inline constexpr std::chrono::milliseconds kReservationTtl{std::chrono::minutes(3)};
// How long a reservation the node has not claimed yet holds its slot without
// its front renewing it (Front renews every second while it waits): a front
// that dies between a placement and its create's delivery lets the slot go
// at the node's next heartbeat after this.
inline constexpr std::chrono::milliseconds kReservationLease{std::chrono::seconds(5)};

// How long an artefact grant (GrantArtefact) lets its requester read the
// artefact from its holder: any number of range requests (a resumed fetch)
// within it. Grants older than twice this are deleted.
inline constexpr std::chrono::milliseconds kArtefactGrantTtl{std::chrono::minutes(10)};

struct NodeInfo {
  std::string name;
  std::string address;  // "ip:port" the fronts reach its API on
  std::string boot_id;  // changes at every start of the node's daemon
  int capacity = 0;     // sandboxes
  int reserved = 0;
  bool draining = false;
  bool live = false;
  int64_t heartbeat_age_ms = 0;
  std::string version;
  std::vector<std::string> templates;
};

struct SandboxLocation {
  std::string node;
  std::string address;
  bool lost = false;
  int64_t lost_at_ms = 0;
};

// One placement: the node that reserved a slot.
struct Placement {
  std::string node;
  std::string address;
  int tried = 0;            // candidates that refused before it
  int64_t reservation = 0;  // its reservation row (Release)
  std::string token;        // 32 hex digits, random: the create carries it to the node (X-Airlock-Reservation)
};

// A custom template as the registry holds it (template_bundles).
struct TemplateBundle {
  std::string template_id, team, publisher;  // publisher: the node that published it last
  std::vector<std::string> names;            // the id and every alias (of `team`'s namespace)
  std::string bundle;                        // TemplateStore::ExportTemplate's JSON text; "" = a tombstone
  int64_t updated_ms = 0;                    // Unix ms of the last publish
};

// A secret as the registry holds it (cluster_secrets; cluster/secret_replica.h).
struct ClusterSecretRow {
  std::string name;
  std::string sealed;      // base64 of nonce(12)|ciphertext|tag(16) under the cluster key; "" = a tombstone
  std::string info;        // JSON: policy, api, size, createdAtMs, updatedAtMs (the publisher's store)
  std::string publisher;   // the node that published it last
  int64_t updated_ms = 0;  // Unix ms of the last publish (the registry's clock)
};

// What a heartbeat found (and corrected).
struct Beat {
  bool registered = false;  // false: the row is gone, another boot's, or lapsed: register again
  int reserved_was = 0;     // `reserved` before the reconciliation
  int reserved = 0;         // after: sandboxes not lost + reservations in flight
  int dropped = 0;          // reservations dropped: their lease or the TTL ran out with no record
};

class ClusterRegistry {
 public:
  // Connects (`pool` connections at most) and migrates to kSchemaVersion.
  static StatusOr<std::unique_ptr<ClusterRegistry>> Open(const std::string& url, size_t pool = 4);

  // ---- nodes ----
  // Registers (or re-registers) `node` and reconciles its sandboxes: its rows
  // become exactly `sandbox_ids` (live, not lost) and reserved their count.
  Status RegisterNode(const NodeInfo& node, const std::vector<std::string>& sandbox_ids);
  // Beats, then reconciles under the node row's lock: reservations older
  // than `reservation_ttl` are dropped and `reserved` becomes the node's
  // sandboxes not lost plus its unused reservations. registered == false:
  // the row is gone, taken by another boot of the same name, or was marked
  // not live (lapsed): the node must register again (nothing reconciled).
  StatusOr<Beat> Heartbeat(const std::string& name, const std::string& boot_id,
                           std::chrono::milliseconds reservation_ttl = kReservationTtl);
  Status SetTemplates(const std::string& name, const std::vector<std::string>& templates);
  // NotFound for an unknown node.
  Status SetDraining(const std::string& name, bool draining);
  StatusOr<std::vector<NodeInfo>> Nodes();
  // A node stopping cleanly: at once what a lapse does later (not live, its
  // slots freed, its sandboxes lost until it registers again). Only its
  // own boot: a newer daemon of the same name is left alone.
  Status Leave(const std::string& name, const std::string& boot_id);
  // Marks every live node whose heartbeat is older than `lapse` not live,
  // frees its reservations and marks its sandboxes lost; returns their names.
  StatusOr<std::vector<std::string>> MarkLapsed(std::chrono::milliseconds lapse);

  // ---- placement ----
  // Best-of-K: K random candidates among the live, fresh, not draining nodes
  // that have `template_name` (or, when no node lists it, all of them),
  // tried in order of most free slots; each try is one conditional UPDATE.
  // ResourceExhausted ("no capacity") when every candidate refused. The
  // reservation is bound to the create whose body digest is `body_sha256`.
  // `only_node`: that node only, draining or not (a retry of an
  // Idempotency-Key's create goes where the key is remembered).
  // `any_node_fallback` (a template any node can fetch, e.g. a custom one
  // in template_bundles): the nodes that list it are preferred; when every
  // one of them refused (or none was eligible), the other live, fresh, not
  // draining nodes with room are tried the same best-of-K way before
  // ResourceExhausted. Ignored with `only_node`.
  StatusOr<Placement> Place(const std::string& template_name, int k, std::chrono::milliseconds lapse,
                            const std::string& body_sha256 = "", const std::string& only_node = "",
                            bool any_node_fallback = false);
  // ---- Idempotency-Key routes (a node remembers its keys; fronts send a
  // retry to the node of the first call, table idempotency_routes, 24 h) ----
  // The live node team's `key` went to; "" when none.
  StatusOr<std::string> IdempotencyNode(const std::string& team, const std::string& key);
  // Records `node` for team's `key` and returns the node recorded: `node`,
  // or the live one a concurrent create recorded first.
  StatusOr<std::string> RecordIdempotencyNode(const std::string& team, const std::string& key, const std::string& node);
  Status ForgetOldIdempotencyRoutes();
  // Gives a placement's slot back: for a create the node refused or never
  // got (the front), or one it failed after claiming (the node). Its
  // reservation goes while unused; nothing when it is gone (released
  // already, dropped by its lease, the TTL or a lapse) or used, so a slot
  // is never freed twice.
  Status Release(const std::string& node, int64_t reservation);
  // A front still waits for these creates' nodes: their unclaimed
  // reservations hold their slots `lease` longer.
  Status RenewLeases(const std::vector<int64_t>& reservations, std::chrono::milliseconds lease = kReservationLease);

  // ---- sandboxes ----
  // Records `id` on `node`. `reservation` (non-zero: the create's, claimed
  // with ClaimReservation): a front already holds its slot, so that row is
  // marked used instead of counting the sandbox again (gone meanwhile, e.g.
  // dropped by the TTL: counted); a row already there (the sync's) frees
  // that reservation's slot. 0: a sandbox the node already runs (the
  // sync's), counted once. kWithinCapacity: a fork child, counted only when
  // the node has a free slot (ResourceExhausted otherwise, nothing written).
  Status AddSandbox(const std::string& id, const std::string& node, int64_t reservation);
  // A node's check of a create's X-Airlock-Reservation: the row with
  // `token`, made for `node`, for a create whose body digest is
  // `body_sha256` (gateway/reservation.h), not claimed or used, younger than
  // `ttl`, is marked claimed and its id returned; otherwise PermissionDenied
  // saying which of those failed (never echoing the token).
  StatusOr<int64_t> ClaimReservation(const std::string& node, const std::string& token, const std::string& body_sha256,
                                     std::chrono::milliseconds ttl = kReservationTtl);
  // Removes `id` from `node` and frees its slot (nothing when not there).
  Status RemoveSandbox(const std::string& id, const std::string& node);
  StatusOr<std::optional<SandboxLocation>> Locate(const std::string& id);

  // ---- custom templates across the cluster (template_bundles) ----
  // Upserts the row of `template_id` (its team, names, publisher, bundle,
  // updated_at = now). `names`: the id and every alias (the id is added
  // when missing). `bundle` "" writes a tombstone (bundle NULL: the
  // template was deleted), so a node that still has it deletes it too.
  // InvalidArgument for an empty template_id, team or publisher.
  Status PublishTemplate(const std::string& template_id, const std::string& team,
                         const std::vector<std::string>& names, const std::string& publisher,
                         const std::string& bundle);
  // Every row (tombstones included) whose template_id is `name` or whose
  // names hold it: of every team (another team's "app" is another
  // template: the caller picks by team). Oldest update first; empty when none.
  StatusOr<std::vector<TemplateBundle>> TemplateBundlesNamed(const std::string& name);
  // Every row (tombstones included) updated at or after `since_ms` (Unix
  // ms), oldest first: a node's periodic import of the cluster's templates
  // (template_replica.h), so that any node can serve the template routes.
  StatusOr<std::vector<TemplateBundle>> TemplateBundlesSince(int64_t since_ms);

  // ---- artefacts: content-addressed files a node holds (node_artefacts) ----
  // `digest` is the file's SHA-256, 64 lower-case hex digits (otherwise
  // InvalidArgument). The rows of a node stay across its restarts (its
  // disk keeps the files); a node forgets its own with ForgetArtefact.
  // `node` holds `digest`, `size` bytes (an upsert; made_at = now).
  Status RecordArtefact(const std::string& node, const std::string& digest, int64_t size);
  // OK when there was no such row.
  Status ForgetArtefact(const std::string& node, const std::string& digest);
  // The live nodes whose heartbeat is younger than `lapse` (draining ones
  // included: they still serve reads) that hold `digest`, in random order
  // (spreads fetches). `templates` is filled as by Nodes().
  StatusOr<std::vector<NodeInfo>> ArtefactHolders(const std::string& digest, std::chrono::milliseconds lapse);
  // A permission for `requester` to read `digest` from `holder`, for that
  // artefact and that holder only: a random 128-bit token (32 lower-case
  // hex digits) the requester sends with its reads (never logged). Valid
  // kArtefactGrantTtl for any number of range requests. Deletes the grants
  // older than twice the TTL on the way. InvalidArgument for a bad digest
  // or an empty requester or holder.
  StatusOr<std::string> GrantArtefact(const std::string& requester, const std::string& holder,
                                      const std::string& digest);
  // The holder's check of a read: OK when a grant with `token` exists for
  // `holder` and `digest` and is younger than kArtefactGrantTtl;
  // otherwise PermissionDenied saying which check failed (not a grant this
  // cluster holds; for node n1, not n2; for another artefact; expired),
  // never echoing the token. InvalidArgument for a token that is not 32
  // lower-case hex digits or a bad digest.
  Status CheckArtefactGrant(const std::string& holder, const std::string& token, const std::string& digest);

  // ---- secrets across the cluster (cluster_secrets; every call in
  // cluster_registry_secrets.cc) ----
  // Upserts the row of `name` (publisher, updated_at = now). `sealed`: the
  // value sealed with the cluster key, as base64 text; "" writes a
  // tombstone (sealed NULL: deleted on `publisher`), so every node deletes
  // its copy. `info` "" is stored as "{}". InvalidArgument for a name that
  // is no secret name (secrets::ValidateSecretName) or an empty publisher.
  Status PublishSecret(const std::string& name, const std::string& sealed, const std::string& info,
                       const std::string& publisher);
  // Every row (tombstones included) updated at or after `since_ms` (Unix
  // ms), oldest first: a node's periodic import.
  StatusOr<std::vector<ClusterSecretRow>> SecretsSince(int64_t since_ms);
  // The rows of these names (tombstones included), oldest first; names
  // with no row are left out.
  StatusOr<std::vector<ClusterSecretRow>> SecretsNamed(const std::vector<std::string>& names);

  // ---- API keys (the same records and key format as core/registry.h) ----
  StatusOr<std::pair<ApiKeyRecord, std::string>> CreateApiKey(const std::string& name, const std::string& team,
                                                              bool admin);
  StatusOr<std::vector<ApiKeyRecord>> ListApiKeys();
  Status RemoveApiKey(const std::string& id_or_name);
  StatusOr<std::vector<std::pair<std::string, ApiKeyRecord>>> ApiKeysByHash();
  // Changes whenever a key is added or removed (a sequence a trigger bumps).
  StatusOr<int64_t> KeyVersion();

  // A random secret made once per cluster: fronts send it with a create
  // whose slot they reserved, nodes check it (constant time).

  PgPool& pool() { return pool_; }
  const std::string& url() const { return pool_.url(); }

 private:
  ClusterRegistry(const std::string& url, size_t pool) : pool_(url, pool) {}
  StatusOr<std::vector<TemplateBundle>> TemplateBundlesWhere(const std::string& where, const std::string& arg);
  StatusOr<std::vector<ClusterSecretRow>> SecretsWhere(const std::string& where, const std::string& arg);
  Status Migrate();
  PgPool pool_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace airlock::cluster
