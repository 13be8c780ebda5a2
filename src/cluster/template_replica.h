// A cluster node's share of the cluster's custom templates (issue 38 item 1,
// docs/multinode.md "Templates on every node").
//
// A template is built on one node; its metadata lives in that node's
// template store (SQLite) and its image is one file, rootfs.ext4, under the
// node's state directory. To make it usable on every node:
//
//   publish   every committed change to a template here (a build ready, a
//             tag moved, public/private, a delete) is exported from the
//             store (TemplateStore::ExportTemplate) with, for each ready
//             build, its image's artefact: the SHA-256 of rootfs.ext4 (over
//             its logical bytes, holes as zeros), its size and allocated
//             bytes, its rootfs key, readiness lines and shape. The bundle
//             goes to the registry (ClusterRegistry::PublishTemplate; a
//             delete leaves a tombstone) and this node is recorded as a
//             holder of each image (RecordArtefact).
//   import    every 5 s, the bundles other nodes published since the last
//             look are imported the same way, so any node can serve the
//             template routes (a front sends them to the first live node).
//   refresh   before a create here resolves a custom template, every bundle
//             the reference's name matches is imported into this node's
//             store (ImportTemplate), and a tombstone deletes the local
//             copy, so the node resolves the name exactly as the node that
//             published it. Bundles this node published are its own store's
//             already and are skipped.
//   image     a ready build whose image this node lacks is fetched from a
//             live node that holds it (a grant from the registry, the
//             cluster's mutual TLS between nodes, cluster/artefacts.h:
//             streamed, resumable, hash-verified, within the disk reserve),
//             installed as the build's image (image::InstallBuiltImage,
//             this node's own kernel and initramfs), and this node recorded
//             as a holder. A copy whose digest differs is refused
//             (DataLoss) and nothing is installed.
//   serve     PathOf: which local file holds a digest, for the node's
//             ArtefactServer (only images of ready builds in this store).
//
// Template snapshots are not moved: a node makes its own from the image
// (they hold the node's QEMU device state and CPU model).
//
// Errors: the registry's (Unavailable when PostgreSQL is unreachable),
// NotFound ("no live node holds ..."), FetchArtefact's (DataLoss for a
// corrupt copy, ResourceExhausted for the disk reserve). Thread-safe;
// every call blocks (a worker's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cluster/cluster_registry.h"
#include "common/status.h"

namespace boost::asio::ssl {
class context;
}

namespace airlock::templates {
class TemplateStore;
}

namespace airlock::cluster {

class ClusterTls;

struct TemplateReplicaConfig {
  std::string node;       // this node's name
  std::string state_dir;  // where images live
  std::string owner;      // the daemon registry's path (image::BuiltImage::owner)
  std::chrono::milliseconds lapse{5000};  // a holder's heartbeat must be younger
  // The cluster's mutual TLS (null: --insecure-cluster, plain HTTP between nodes).
  std::shared_ptr<const ClusterTls> tls;
  // Free bytes a fetch must leave on the state directory's filesystem.
  int64_t reserve_bytes = int64_t{1} << 30;
};

class TemplateReplica {
 public:
  // `registry` and `store` must outlive it. Starts the publisher's thread.
  TemplateReplica(ClusterRegistry& registry, templates::TemplateStore& store, TemplateReplicaConfig config);
  ~TemplateReplica();

  // The store's observer (TemplateStore::SetOnChange): queues a publish of
  // `template_id` (the thread exports and publishes; a registry error is
  // retried every 2 s until it goes through). "": every template of the
  // store (at start: what was built while the registry was unreachable,
  // or before the cluster).
  void Changed(const std::string& template_id);
  // A build's image was installed: its digest is computed now (cached
  // beside it), so publishing it once the build is ready takes no time.
  void Warm(const std::string& image);
  // Each fetch's outcome ("ok", "corrupt", "failed") and bytes received (metrics).
  void SetOnFetch(std::function<void(const std::string& outcome, int64_t bytes)> fn);
  // Waits until every queued publish is done (tests, shutdown).
  void Flush();

  // Before a create resolves `ref` ("name", "name:tag", "ns/name[:tag]", an id).
  Status Refresh(const std::string& ref);
  // Makes `image` (a ready build of `template_id`) present here.
  Status EnsureImage(const std::string& template_id, const std::string& image);
  // The local file with this SHA-256 (an image of a ready build here);
  // NotFound otherwise.
  StatusOr<std::string> PathOf(const std::string& digest);

  // What fetches did (metrics, tests).
  int64_t bytes_fetched() const { return bytes_fetched_.load(); }

 private:
  StatusOr<nlohmann::json> BundleOf(const std::string& template_id);
  Status Publish(const std::string& template_id, bool only_own);
  void Loop();
  StatusOr<nlohmann::json> ArtefactOf(const std::string& template_id, const std::string& build_id,
                                      const std::string& image);

  Status Apply(const TemplateBundle& row);
  Status ImportChanged();  // on the thread only
  static constexpr std::chrono::seconds kImportEvery{5};

  ClusterRegistry& registry_;
  templates::TemplateStore& store_;
  const TemplateReplicaConfig config_;
  void Fetched(const std::string& outcome, int64_t bytes);
  std::atomic<int64_t> bytes_fetched_{0};
  std::mutex on_fetch_mu_;
  std::function<void(const std::string& outcome, int64_t bytes)> on_fetch_;
  std::mutex fetch_mu_;  // one fetch at a time (they share the disk and the link)
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;  // template ids to publish (guarded by mu_)
  bool busy_ = false, stop_ = false;
  int64_t since_ms_ = 0;  // the newest bundle imported (the thread's)
  std::chrono::steady_clock::time_point next_import_{};
  std::thread thread_;
};

}  // namespace airlock::cluster
