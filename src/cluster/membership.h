// A node's membership of the cluster (serve --role node, docs/multinode.md):
// registers the node in the cluster registry, beats its heartbeat, and keeps
// the registry's view of its sandboxes and templates equal to its own.
//
// The node's SQLite journal is the truth for its sandboxes: at start (and
// whenever the registry dropped it: a lapsed heartbeat, a changed boot)
// the node registers again with the list it has, which replaces its rows.
// Between those, the server reports each sandbox it hands out
// (SandboxAdded, before the create answers, so any front routes it at once)
// and each that ends (SandboxRemoved); before every beat a sync adds or
// removes what those missed (the templates every `sync_every` beats), and
// the beat itself recounts the node's `reserved` from those rows and the
// fronts' reservations in flight (ClusterRegistry::Heartbeat).
//
// Threads: one of its own for the beat; SandboxAdded/Removed block on the
// database (call them on a worker).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_registry.h"

namespace airlock::cluster {

struct MembershipConfig {
  NodeInfo node;  // name, address, capacity, version
  std::chrono::milliseconds heartbeat{1000};
  int sync_every = 5;  // beats between two reads of the templates
  // A front's reservation that this node has not recorded after this long is dropped.
  std::chrono::milliseconds reservation_ttl = kReservationTtl;
  // The node's live sandboxes and the templates it can start, read each sync.
  std::function<std::vector<std::string>()> sandboxes;
  std::function<std::vector<std::string>()> templates;
  // Each heartbeat's recount (Beat: reserved before and after, reservations
  // dropped), for the node's metrics; may be null.
  std::function<void(const Beat&)> on_beat;
};

class NodeMembership {
 public:
  // Registers once (an error here fails the daemon's start) and starts the beat.
  static StatusOr<std::unique_ptr<NodeMembership>> Start(ClusterRegistry* registry, MembershipConfig config);
  ~NodeMembership();

  // The daemon is stopping: the beat ends and the registry stops placing
  // here at once (ClusterRegistry::Leave) instead of after the lapse.
  void Leave();
  Status SandboxAdded(const std::string& id, int64_t reservation);
  void SandboxRemoved(const std::string& id);
  const std::string& name() const { return config_.node.name; }
  const std::string& boot_id() const { return config_.node.boot_id; }

 private:
  NodeMembership(ClusterRegistry* registry, MembershipConfig config)
      : registry_(registry), config_(std::move(config)) {}
  Status Register();
  void Loop();
  void Sync(bool templates);
  ClusterRegistry* registry_;
  MembershipConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::string> known_;  // guarded by mu_
  std::vector<std::string> templates_;
  std::thread thread_;
};

}  // namespace airlock::cluster
