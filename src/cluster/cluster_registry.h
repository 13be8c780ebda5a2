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
//   api_keys(id, name, prefix, hash, created_at_ms, team, admin)  as the
//         single-node registry: SHA-256 hex of the key, never the key
//   cluster_meta(key, value)               the fronts' reservation secret
//
// Capacity accounting: a front reserves one slot with one conditional
// UPDATE (reserved + 1 <= capacity, live, not draining, heartbeat fresh), so
// two fronts can never over-commit a node; the node then records the
// sandbox without counting it again (front_reserved), or the front releases
// the slot when the create fails. Sandboxes a node makes by itself (forks)
// are counted when recorded. A node's end of a sandbox removes its row and
// frees its slot in one statement. A node whose heartbeat lapses is marked
// not live, its reservations are freed and its sandboxes marked lost; when
// it registers again its own journal (SQLite) is the truth: its rows are
// replaced by the sandboxes it still has and `reserved` by their count.
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

inline constexpr int kSchemaVersion = 1;

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
  int tried = 0;  // candidates that refused before it
};

class ClusterRegistry {
 public:
  // Connects (`pool` connections at most) and migrates to kSchemaVersion.
  static StatusOr<std::unique_ptr<ClusterRegistry>> Open(const std::string& url, size_t pool = 4);

  // ---- nodes ----
  // Registers (or re-registers) `node` and reconciles its sandboxes: its rows
  // become exactly `sandbox_ids` (live, not lost) and reserved their count.
  Status RegisterNode(const NodeInfo& node, const std::vector<std::string>& sandbox_ids);
  // false: the row is gone, taken by another boot of the same name, or was
  // marked not live (lapsed): the node must register again.
  StatusOr<bool> Heartbeat(const std::string& name, const std::string& boot_id);
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
  // ResourceExhausted ("no capacity") when every candidate refused.
  StatusOr<Placement> Place(const std::string& template_name, int k, std::chrono::milliseconds lapse);
  // Gives a reserved slot back (a create that failed).
  Status Release(const std::string& node, int n = 1);

  // ---- sandboxes ----
  // Records `id` on `node`. front_reserved: a front already holds its slot
  // (then it is not counted again; a row already there frees that slot).
  Status AddSandbox(const std::string& id, const std::string& node, bool front_reserved);
  // Removes `id` from `node` and frees its slot (nothing when not there).
  Status RemoveSandbox(const std::string& id, const std::string& node);
  StatusOr<std::optional<SandboxLocation>> Locate(const std::string& id);

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
  StatusOr<std::string> ReservationSecret();

  PgPool& pool() { return pool_; }
  const std::string& url() const { return pool_.url(); }

 private:
  ClusterRegistry(const std::string& url, size_t pool) : pool_(url, pool) {}
  Status Migrate();
  PgPool pool_;
  std::mutex rng_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
};

}  // namespace airlock::cluster
