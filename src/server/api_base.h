// What the daemon's HTTP handlers share: Services, the owners they act
// through (a wide, shallow hub of pointers that Server fills once every
// owner exists; none is owned here), and ApiHandlers, the base of each
// resource's handler class (SandboxApi, SnapshotApi, SecretsApi, AuditApi,
// ConsoleApi, DataPlane), which names the owners as the handlers use them
// and keeps the few helpers every handler needs: read a bounded JSON body,
// answer 404 for a sandbox, the team check, the template id a sandbox shows.
//
// Threads: handlers run on the io thread and never block; blocking work is
// posted to `workers_` and its answer posted back to the connection's
// executor. Errors are answered as JSON {"code","message"} (http_status.h).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "audit/audit_log.h"
#include "audit/otlp_exporter.h"
#include "control/admission.h"
#include "control/caller.h"
#include "control/memory_governor.h"
#include "control/metrics.h"
#include "control/metrics_sampler.h"
#include "control/sandbox_controller.h"
#include "control/secrets_service.h"
#include "control/template_catalog.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/volumes.h"
#include "gateway/api_keys.h"
#include "server/http_conn.h"
#include "server/server_config.h"
#include "gateway/stream_table.h"
#include "server/team_disk.h"

namespace airlock::server {

using control::Caller;
class TemplateApi;
class LifecycleEvents;

struct Services {
  const ServerConfig* config = nullptr;
  boost::asio::io_context* io = nullptr;
  boost::asio::thread_pool* workers = nullptr;  // blocking work
  boost::asio::thread_pool* lookups = nullptr;  // short reads never queued behind a bring-up
  Manager* manager = nullptr;
  Registry* registry = nullptr;
  control::SandboxController* sandboxes = nullptr;
  control::SecretsService* secrets = nullptr;
  control::Admission* admission = nullptr;
  control::MemoryGovernor* memory = nullptr;
  control::MetricsSampler* metrics_sampler = nullptr;
  control::TemplateCatalog* catalog = nullptr;
  control::DaemonMetrics* metrics = nullptr;
  TemplateApi* templates = nullptr;
  TeamDisk* team_disk = nullptr;  // null: no budget
  VolumeStore* volumes = nullptr;  // volumes (core/volumes.h)
  StreamTable* streams = nullptr;
  LifecycleEvents* lifecycle = nullptr;  // events and webhooks (lifecycle_events.h)
  ApiKeyTable* api_keys = nullptr;
  std::shared_ptr<audit::AuditLog> audit;
  audit::OtlpExporter* otlp = nullptr;  // null: no OTLP export
  std::string db_dir;  // the registry's directory (disk checks)
};

// A bounded JSON object body (ServerConfig::max_json_body): `then` gets it,
// or the request is answered 400/413 here.
void ReadJsonBody(const std::shared_ptr<HttpConn>& c, size_t max_body, std::function<void(nlohmann::json)> then);
// 404 for a sandbox the API does not show; one that ended lately says how
// ("outcome", "outcomeDetail", "endedAt" beside code and message).
void RespondNoSandbox(const std::shared_ptr<HttpConn>& c, Manager& manager, const std::string& id);
// Appends one record to the audit trail (failures are logged, at most one
// line per 10 s).
void AppendAudit(audit::AuditLog* log, nlohmann::json record);
// A sink that appends to `log` (failures logged), for code that records
// from other threads (the data-plane tap, the egress proxy).
audit::AuditSink AuditSinkOf(std::shared_ptr<audit::AuditLog> log);

class ApiHandlers {
 protected:
  explicit ApiHandlers(const Services& s);

  void ReadJson(std::shared_ptr<HttpConn> c, std::function<void(nlohmann::json)> then) const {
    ReadJsonBody(c, config_.max_json_body, std::move(then));
  }
  void RespondNoSandbox(const std::shared_ptr<HttpConn>& c, const std::string& id) const {
    server::RespondNoSandbox(c, *manager_, id);
  }
  // The sandbox the API shows, or nullptr.
  std::shared_ptr<Sandbox> Visible(const std::string& id) const { return manager_->Visible(id); }
  // May `caller` see sandbox / named snapshot `id` (its owners row)?
  bool CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id) const {
    return control::CallerOwns(caller, kind, id, *manager_, *registry_);
  }
  // The API's templateID of a sandbox (TemplateApi::ShownTemplateId).
  std::string ShownTemplateId(const SandboxRecord& r) const;
  void AddLog(const std::string& id, std::string level, std::string message) const {
    if (auto sb = manager_->Get(id)) sb->AddLog(std::move(level), std::move(message));
  }
  void Audit(nlohmann::json record) const { AppendAudit(audit_.get(), std::move(record)); }
  // A lifecycle event of sandbox `id` (lifecycle_events.h), when it is still known.
  void EmitLifecycle(std::string_view type, const std::string& id,
                     nlohmann::json event_data = nlohmann::json::object()) const;
  void EmitLifecycle(std::string_view type, const Sandbox& sb,
                     nlohmann::json event_data = nlohmann::json::object()) const;
  audit::AuditSink AuditSinkFn() const { return AuditSinkOf(audit_); }
  int ClampTimeout(int64_t seconds) const { return server::ClampTimeout(config_, seconds); }
  image::MachineShape ClampedShape(const image::MachineShape& own) const { return server::ClampedShape(config_, own); }
  // OK, or ResourceExhausted naming the team's budget (507); worker thread.
  Status CheckTeamDisk(const std::string& team) const { return server::CheckTeamDisk(team_disk_, team); }
  // Runs `work` on a worker and answers 200 with its JSON, or 500 with its error.
  void AnswerFromWorker(std::shared_ptr<HttpConn> c, std::function<StatusOr<nlohmann::json>()> work) const;

  const ServerConfig& config_;
  boost::asio::io_context& io_;
  boost::asio::thread_pool* workers_;
  boost::asio::thread_pool* lookups_;
  Manager* manager_;
  Registry* registry_;
  control::SandboxController* sandboxes_;
  control::SecretsService* secrets_;
  control::Admission* admission_;
  control::MemoryGovernor* memory_;
  control::MetricsSampler* metrics_sampler_;
  control::TemplateCatalog* catalog_;
  control::DaemonMetrics& metrics_;
  TemplateApi* templates_;
  TeamDisk* team_disk_;
  VolumeStore* volumes_;
  StreamTable& streams_;
  LifecycleEvents* lifecycle_;
  ApiKeyTable* api_keys_;
  std::shared_ptr<audit::AuditLog> audit_;
  audit::OtlpExporter* otlp_;
  std::string db_dir_;
};

}  // namespace airlock::server
