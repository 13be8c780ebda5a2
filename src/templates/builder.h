// Builder: runs custom template builds (docs/templates.md), each inside a
// build sandbox (a microVM through the agent, never on the host), one
// layer per step, cached by the hash chain of shared/spec/e2b-templates.md
// §A.7, and finalized into a guest image with its template snapshot:
//
//   queue (status "waiting", at most max_concurrent building; fair per
//   team, build_queue.h: no team holds every slot or jumps other teams)
//     ─▶ base: `base` (fromBaseImage, fromImage e2bdev/base), a built
//        template's last layer (fromTemplate), with its context, or an OCI
//        image (any other fromImage: pulled, the agent added, installed as
//        image "oci-<key>", image/oci_base.h) and its user phase (`user`
//        made in a build sandbox, a cached layer of its own)
//     ─▶ steps 1..N: cached (the layer index has the step's hash and its
//        layer is complete) or run in ONE build sandbox started on the last
//        cached layer, `sync`, and its disk saved as the step's layer
//     ─▶ finalize (cached too): /etc/airlock/template.json (default user,
//        workdir) and the start command as an agent service with its ready
//        command (agent/services.h)
//     ─▶ the last layer's disk exported as a raw rootfs (image id = a hash
//        of the layer: an all-cached rebuild reuses it), the guest image
//        installed as "b<build id hex>", its template snapshot taken with the
//        start command running and ready ─▶ "ready"; tags already point here.
//
// A failure at any point: status "error" with reason {message, step}
// ("base", "1".."N", "finalize"), the build sandbox destroyed, and no new
// layer or image left. Layers are committed to the index only when the
// build is ready. A daemon that dies mid-build: Start() marks the build
// failed and deletes layer directories no index entry names.
//
// Network: a build sandbox is an ordinary sandbox (same egress proxy and
// audit) whose policy allows only BuilderConfig::allow.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "templates/build_queue.h"
#include "templates/build_spec.h"
#include "templates/template_store.h"

namespace airlock {
class Manager;
}

namespace airlock::templates {

// `message` with every path under `state_dir` replaced by "<host path>":
// what a team sees of a failed build (its log, its reason) names causes,
// never the host's layout. The daemon's own log keeps the paths.
std::string HideHostPaths(std::string message, const std::string& state_dir);

struct BuilderConfig {
  std::string state_dir;
  // The daemon's registry (canonical path): its layers live in a directory
  // of their own (SnapshotDirs::layers()/<hash of owner>), and the images of its
  // builds carry it, so that another daemon on the same state dir never
  // collects them, and a registry that is gone leaves nothing for long.
  std::string owner;
  int max_concurrent = 1;                          // builds running at once (the rest wait)
  std::chrono::seconds timeout{std::chrono::hours(1)};  // one build, queue time excluded
  std::vector<std::string> allow;                  // egress allowlist of build sandboxes
  // Registries (HOST[:PORT]) fromImage may pull from over plain HTTP or
  // without TLS verification (serve --insecure-registry; image/oci_base.h).
  std::vector<std::string> insecure_registries;
  // Registries (HOST[:PORT]) fromImage may pull from wherever they resolve
  // (serve --registry-allow); any other only from public addresses
  // (image/pull_proxy.h).
  std::vector<std::string> registry_allow;
  // The most an OCI base's layers may expand to (serve --max-image-unpack;
  // image::OciPullOptions::max_unpacked_bytes).
  uint64_t max_image_unpack_bytes = 16ull << 30;
  // Every build's decision and outcome (audit). May be empty.
  std::function<void(const nlohmann::json&)> audit;
  // A build's image is installed and its template snapshot comes next, then
  // "ready" (a cluster node computes what sharing the image needs here, so
  // the build is shareable the moment it is ready). May be empty.
  std::function<void(const std::string& image)> image_installed;
};

// The image name of a build ("b" + the build id's 32 hex digits).
std::string ImageNameOf(const std::string& build_id);
// Where an uploaded COPY archive of `team` lives (state dir relative paths
// never depend on team names: a hash of the team).
std::string FilesPathOf(const std::string& state_dir, const std::string& team, const std::string& hash);

class Builder {
 public:
  Builder(Manager& manager, TemplateStore& store, BuilderConfig config);
  ~Builder();  // Stop()
  // Fails builds a previous daemon left running, collects garbage, starts
  // the workers.
  void Start();
  // Cancels what runs (its sandbox is destroyed) and joins the workers.
  void Stop();
  // Queues a started build. FailedPrecondition when stopping.
  Status Enqueue(const std::string& build_id);
  // Cancels the template's queued and running builds (DELETE /templates).
  void CancelTemplate(const std::string& template_id);
  // Layers no ready build's chain needs, and uploads no template build is
  // waiting for are removed (after each build and each template delete).
  void CollectGarbage();
  // Where this daemon's layers are.
  std::string LayersRoot() const;

 private:
  struct Job;
  void Worker();
  // Marks running jobs canceled and destroys their build sandboxes.
  void Cancel(const std::vector<std::shared_ptr<Job>>& jobs);
  void RunBuild(const std::string& build_id);
  Status Build(Job& job);
  void Log(Job& job, const std::string& level, const std::string& message, const std::string& step);

  Manager& manager_;
  TemplateStore& store_;
  BuilderConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  BuildQueue queue_;  // guarded by mu_
  std::map<std::string, std::shared_ptr<Job>> running_;  // build id -> job
  std::set<std::string> canceled_;                        // build ids
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::mutex gc_mu_;
};

}  // namespace airlock::templates
