// The custom-templates API in the daemon (shared/spec/e2b-templates.md §A.3,
// docs/templates.md): what the official SDK's Template builder and the
// `e2b template` CLI call, the signed upload URL of COPY archives, and the
// state that is theirs: the template store (SQLite, beside the registry),
// the Builder that runs builds in build sandboxes, the HMAC key of upload
// URLs, the image -> template id table the sandbox views show, and the
// commit/sweep of uploads (the upload TTL). Server owns one (templates_),
// routes the template rows of routes.h to Route() and PUT /upload/{hash} to
// HandleUpload(); the route table and its audit actions stay routes.h's.
//
//   POST   /v3/templates, /v2/templates (older SDKs)     request a build (202)
//   GET    /templates/{id}/files/{hash}                  upload link (201)
//   PUT    /upload/{hash}?team=&expires=&token=          the archive (200)
//   POST   /v2/templates/{id}/builds/{bid}               start it (202, empty)
//   GET    /templates/{id}/builds/{bid}/status           status + logs by offset
//   GET    /templates/aliases/{alias[:tag]}              exists in the caller's team (200/404)
//   POST   /templates/tags, DELETE /templates/tags, GET /templates/{ref}/tags
//   GET    /templates, GET /templates/{ref}, DELETE /templates/{ref},
//   PATCH  /v2/templates/{ref} (publish), PATCH /templates/{ref}
//
// Threads: Route() and HandleUpload() run on the io thread and never block;
// every SQLite call runs on the workers the daemon lends (Deps::workers) and
// its answer is posted back to the connection's executor. Builds run on the
// Builder's own threads. MaybeSweepUploads() runs on SweepEvery's tick (io thread);
// NoteTemplateImage/DisplayTemplateId are thread-safe; CustomTemplateNames,
// DiskHoldings and SweepUploads block (call them off the io thread, or at
// start).
//
// Errors: answered as JSON {"code","message"}: a store or resolution error
// by HttpStatusFor (http_status.h), except that a state conflict
// (FailedPrecondition) is E2B's 400 ("build is not in waiting state"); 507
// when the team's disk budget is spent. Open() returns the failing step.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/manager.h"
#include "control/caller.h"
#include "server/http_conn.h"
#include "server/routes.h"
#include "server/team_disk.h"
#include "control/ticker.h"
#include "templates/builder.h"
#include "templates/template_store.h"

namespace airlock::server {

using control::Caller;

struct TemplateAnswer;

class TemplateApi {
 public:
  // The daemon's settings it reads (ServerConfig's, see there).
  struct Config {
    std::string state_dir;  // images, uploads and layers live under it
    std::string owner;      // the daemon's registry (ManagerConfig::owner), for the Builder
    std::string db_path;    // the template store shares the registry's database
    int max_builds = 1;
    int build_timeout_s = 3600;
    std::vector<std::string> build_allow;
    std::vector<std::string> insecure_registries;
    std::vector<std::string> registry_allow;
    int64_t max_image_unpack_mib = 16384;
    // The maxima a build request may ask for (cpuCount, memoryMB, minFreeDiskMb).
    int max_vcpus = 4;
    int max_memory_mib = 4096;
    int max_disk_mib = 16384;
    int64_t max_upload_mib = 2048;
    int64_t upload_ttl_s = 86400;  // 0: uploads never expire
    // The base of upload URLs; empty: http://<the Host the client used>,
    // else http://<listen>.
    std::string public_url;
    std::string listen;
  };
  // What it needs of the rest of the daemon; each must outlive it.
  struct Deps {
    Manager& manager;  // build sandboxes; named snapshots share the team's names
    boost::asio::thread_pool& workers;
    TeamDisk* team_disk = nullptr;  // null: no budget
    // OK, or ResourceExhausted naming the budget (answered 507); blocks.
    std::function<Status(const std::string& team)> check_team_disk;
    std::function<void(nlohmann::json)> audit;  // one audit record (thread-safe)
    // Reads a bounded JSON object body; answers 400/413 itself on failure.
    std::function<void(std::shared_ptr<HttpConn>, std::function<void(nlohmann::json)>)> read_json;
    // DELETE /templates/{ref} of a named snapshot (E2B deletes snapshots
    // through this route too); called on the io thread.
    std::function<void(std::shared_ptr<HttpConn>, const std::string& ref, const Caller&)> delete_snapshot;
    // The named snapshot `ref` of `team` (any team's for admin), "" for
    // none (control::TemplateCatalog::NamedSnapshotDir); blocks.
    std::function<std::string(const std::string& ref, const std::string& team, bool admin)> named_snapshot;
    // A build's image was installed (templates::BuilderConfig::image_installed); may be empty.
    std::function<void(const std::string& image)> image_installed;
  };

  // Opens the template store, starts the Builder (a previous daemon's
  // unfinished builds are failed), learns the images of ready builds and
  // sweeps expired uploads once. Errors: the store's.
  static StatusOr<std::unique_ptr<TemplateApi>> Open(Config config, Deps deps);
  ~TemplateApi();

  // Ends every build (its build sandbox is destroyed) and joins the
  // Builder's threads; idempotent. ~Server calls it before the Manager
  // releases its sandboxes.
  void Stop();

  // The template rows of routes.h (kRequestTemplateBuild ... kDeleteTemplate),
  // `p` the route's parameters.
  void Route(std::shared_ptr<HttpConn> c, const Caller& caller, RouteId route, const std::vector<std::string>& p);
  // PUT /upload/{hash}?team=&expires=&token=: the signed URL is the credential.
  void HandleUpload(std::shared_ptr<HttpConn> c);

  // The store, for what reads it beside this API: a create's template
  // resolution (control::TemplateCatalog), E2B's spawnCount, the names a
  // named snapshot may not take.
  templates::TemplateStore& store() { return *store_; }
  // The API's templateID of a sandbox's image ("b<build>" -> its template
  // id); an image no custom template built is shown as it is.
  void NoteTemplateImage(const std::string& image, const std::string& template_id);
  // The API's templateID of a sandbox: a built-in template with its runtime
  // when that is not the daemon's default ("base-gvisor",
  // core/template_runtime.h), a custom template's id, else its template as
  // recorded.
  std::string ShownTemplateId(const SandboxRecord& r);
  std::string DisplayTemplateId(const std::string& image);
  // The ids and aliases of every custom template (a cluster node lists them
  // in the registry). Blocks on the store.
  std::vector<std::string> CustomTemplateNames();
  // The teams' uploads, layers and images (TeamDisk's holdings). Blocks.
  std::vector<TeamDisk::Holding> DiskHoldings();
  // The upload TTL: on the key timer, posts a sweep to the workers when one
  // is due; SweepUploads removes the expired ones now (blocks).
  void MaybeSweepUploads();
  // MaybeSweepUploads every `period` on `io`'s thread until StopSweeps (io thread).
  void SweepEvery(boost::asio::io_context& io, std::chrono::milliseconds period);
  void StopSweeps();
  void SweepUploads();

 private:
  TemplateApi(Config config, Deps deps);
  Status Init();

  void InTemplateWorker(std::shared_ptr<HttpConn> c, std::function<TemplateAnswer()> work);
  // DELETE /templates/{ref}: a custom template by id or alias; else a named snapshot.
  void DeleteTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref);
  void RequestTemplateBuild(std::shared_ptr<HttpConn> c, const Caller& caller);
  void FilesLink(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                 const std::string& hash);
  // The body of an upload whose link and budget were checked; `budget_left`:
  // bytes the team may still write (TeamDisk::RemainingBytes).
  void ReceiveUpload(std::shared_ptr<HttpConn> c, const std::string& team, const std::string& hash,
                     int64_t budget_left);
  void StartTemplateBuild(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                          const std::string& build_id);
  void TemplateBuildStatus(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                           const std::string& build_id);
  void AliasExists(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref);
  void TemplateTags(std::shared_ptr<HttpConn> c, const Caller& caller, bool assign);
  void ListTemplateTags(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref);
  void ListTemplates(std::shared_ptr<HttpConn> c, const Caller& caller);
  void GetTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref);
  void PublishTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref, bool v2);
  nlohmann::json TemplateJson(const templates::TemplateRow& t, bool with_builds);
  bool IsTemplateOwner(const Caller& caller, const templates::TemplateRow& t);
  std::string UploadToken(const std::string& team, const std::string& hash, int64_t expires) const;

  const Config config_;
  Deps deps_;
  std::unique_ptr<templates::TemplateStore> store_;
  std::unique_ptr<control::Ticker> sweeps_;
  std::unique_ptr<templates::Builder> builder_;  // after store_: destroyed before it
  std::string upload_key_;                       // HMAC key of upload URLs (per daemon start)
  std::mutex upload_mu_;                         // an upload's commit (rename + row) vs the sweep
  int64_t next_upload_sweep_ms_ = 0;             // key timer only
  std::atomic<bool> upload_sweep_in_flight_{false};
  std::mutex template_images_mu_;
  std::map<std::string, std::string> template_images_;  // image -> template id (guarded by template_images_mu_)
};

}  // namespace airlock::server
