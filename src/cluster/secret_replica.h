// A cluster node's share of the cluster's secrets (issue 38 item 3;
// docs/secrets.md, docs/multinode.md "Templates on every node" is the same
// design for templates).
//
// A secret is stored on one node (a front routes /secrets to one node; an
// operator runs `airlock secret set` on one); its value lives in that
// node's secret store (SQLite, sealed under the node's own secrets.key). So
// that a create on any node can use it:
//
//   publish   every committed Set, Create and Remove of the store (its
//             observer, SecretStore::SetOnChange, calls Changed) is written
//             to the registry's cluster_secrets by this replica's thread:
//             the value sealed with the CLUSTER key (secrets/sealed.h,
//             AES-256-GCM, additional data "airlock-cluster-secret-v1:
//             <name>", base64 of nonce|ciphertext|tag), its policy, API
//             attributes, size and times as JSON (`info`), and this node as
//             the publisher. A secret the store no longer has leaves a
//             tombstone. The registry never holds a value in clear; fronts
//             never need the key.
//   import    every `import_every` while idle, the rows other nodes
//             published since the last look (and 2 s before it: a row whose
//             transaction committed late) are imported into this node's
//             store with SecretStore::ImportSecret (same value, policy,
//             attributes and times; the observer is not called, so an import
//             is never published back); a tombstone removes the local copy
//             (RemoveImported). Each imported value is handed to
//             `on_imported` (the node's redactor).
//   refresh   before a create uses secrets, Refresh imports their rows now.
//
// Rows this node published are skipped (its store is their truth); a row
// of a name with a local change waiting to be published (or while a
// Changed("") waits) is left for later (the local change is newer and wins
// when published; the periodic import reads the row again after it). A row that does not
// unseal (another node with another cluster key, or a changed row) is
// skipped with a warning naming the secret and the publisher, once per
// version of the row. Changed("") at start: every secret of the store whose
// registry row is absent, this node's, or older than the local copy (set
// while the daemon was down) is published, and this node's rows of secrets
// the store no longer has are tombstoned.
//
// Conflicts: the registry keeps one row per name, the last publish wins
// (two nodes changing one secret at once end with the later publish's
// value everywhere). A row whose commit lagged its timestamp by more than
// 2 s is missed by the periodic import but still found by Refresh.
//
// Errors: the registry's are logged and retried (a publish every 2 s, the
// import at its next turn); Refresh returns them (Unavailable when
// PostgreSQL is unreachable) and the store's. A key that is not 32 bytes is
// logged once and the replica then does nothing (Refresh:
// FailedPrecondition). Thread-safe; every call but Changed blocks (a
// worker's); the destructor joins the thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_registry.h"
#include "common/status.h"

namespace airlock::secrets {
class SecretStore;
}

namespace airlock::cluster {

struct SecretReplicaConfig {
  std::string node;  // this node's name (the publisher of its rows)
  std::string key;   // the cluster key: 32 bytes (secrets::LoadKeyFile of --cluster-secrets-key)
  std::chrono::milliseconds import_every{1000};
};

class SecretReplica {
 public:
  // The node's store, opened on first use (an error is retried like the registry's).
  using StoreFn = std::function<StatusOr<secrets::SecretStore*>()>;
  // A value imported from another node (feeds the redactor); may be null.
  using OnImported = std::function<void(const std::string& name, const std::string& value)>;

  // `registry` and the store must outlive it. Starts the thread; its first
  // import runs `import_every` after the start. Call Changed("") once the
  // store is open (e.g. from the StoreFn's first open): until that pass is
  // done, no row is imported over a local copy.
  SecretReplica(ClusterRegistry& registry, StoreFn store, SecretReplicaConfig config, OnImported on_imported);
  ~SecretReplica();
  SecretReplica(const SecretReplica&) = delete;
  SecretReplica& operator=(const SecretReplica&) = delete;

  // The store's observer: queues a publish of `name` (sealed, or a
  // tombstone when the store no longer has it). "": every secret of the
  // store (see the file comment). Does not block.
  void Changed(const std::string& name);
  // Before a create uses `names`: imports their registry rows now.
  Status Refresh(const std::vector<std::string>& names);
  // Waits until every queued publish is done (tests, shutdown).
  void Flush();

 private:
  void Loop();
  Status Publish(const std::string& name, bool only_own);
  Status QueueAll();  // Changed("")
  // *deferred (may be null): skipped behind a local change waiting to be published.
  Status Apply(const ClusterSecretRow& row, bool* deferred = nullptr);
  Status ImportChanged();  // on the thread only
  bool PendingLocked(const std::string& name) const;
  void QueueLocked(const std::string& item);

  ClusterRegistry& registry_;
  const StoreFn store_;
  SecretReplicaConfig config_;  // its key is wiped by the destructor
  const OnImported on_imported_;
  const bool key_ok_;

  std::mutex apply_mu_;                     // one import at a time (the thread's and Refresh's)
  std::map<std::string, int64_t> applied_;  // name -> updated_ms of the row applied or skipped (apply_mu_)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // names to publish; "?name": only when absent/own/older; "": all
  std::string in_flight_;          // the item being published (busy_)
  bool busy_ = false, stop_ = false;
  int64_t since_ms_ = 0;  // the newest row imported (the thread's)
  std::chrono::steady_clock::time_point next_import_;
  std::thread thread_;
};

}  // namespace airlock::cluster
