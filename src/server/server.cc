#include "server/server.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/log.h"
#include "core/template_runtime.h"
#include "http/client.h"
#include "image/image.h"
#include "secrets/egress_broker.h"
#include "server/mcp_service.h"
#include "server/relay_guard.h"

namespace airlock::server {

using nlohmann::json;

Server::Server(ServerConfig config) : config_(std::move(config)) {}

StatusOr<std::unique_ptr<Server>> Server::Open(ServerConfig config) {
  std::unique_ptr<Server> s(new Server(std::move(config)));
  RETURN_IF_ERROR(s->Init());
  return s;
}

Status Server::Init() {
  const std::string& dir = config_.manager.state_dir;
  ::mkdir(dir.c_str(), 0700);
  std::string db = config_.db_path.empty() ? dir + "/airlock.db" : config_.db_path;
  std::string db_dir = db.find('/') == std::string::npos ? "." : db.substr(0, db.rfind('/'));
  // One daemon per registry, for its whole life: a second one would adopt the
  // same sandboxes and interleave the same audit trail (docs/security.md).
  ASSIGN_OR_RETURN(registry_lock_, StateLock::Acquire(db + ".lock", StateLock::Mode::kExclusive, "registry"));
  ASSIGN_OR_RETURN(registry_, Registry::Open(db));
  {
    // What this daemon owns on the host (run dirs, address leases) is tagged
    // with its registry, so its clean-up never touches another daemon's.
    std::error_code ec;
    auto canon = std::filesystem::weakly_canonical(db, ec);
    config_.manager.owner = ec ? db : canon.string();
  }
  db_path_ = db;
  db_dir_ = db_dir;
  RETURN_IF_ERROR(InitAudit(db_dir));
  // One level for "short of memory": admission's, the pressure policy's and the warm pool's.
  config_.admission.memory_pressure_mib = config_.pressure.refuse_below_mib;
  if (config_.memory_sample_interval.count() <= 0) config_.admission.memory_pressure_mib = 0;
  admission_ = std::make_unique<control::Admission>(config_.admission);
  if (!config_.otlp.endpoint.empty()) {
    ASSIGN_OR_RETURN(otlp_, audit::OtlpExporter::Start(config_.otlp));
  }
  audit_->SetObserver([this](const nlohmann::json& r) {
    metrics_.AuditRecord();
    if (otlp_) otlp_->Enqueue(r);
  });
  // Sandboxes of a previous daemon: adopt the live ones, forget the rest.
  ASSIGN_OR_RETURN(auto records, registry_->ListSandboxes());
  std::vector<AdoptRequest> adopt;
  for (const auto& r : records) adopt.push_back({r, r.env_vars});
  // Secrets: the egress proxy asks the broker about brokered secrets and the sandbox CA.
  {
    SecretsService::Options so;
    so.db_path = db;
    so.db_dir = db_dir;
    int64_t life_s = config_.max_lifetime_s > 0 ? config_.max_lifetime_s : config_.max_timeout_s;
    so.ca_lifetime = std::chrono::seconds(life_s + 86400);
    SecretsService::Hooks hooks;
    hooks.audit = [this](json r) { AppendAudit(audit_.get(), std::move(r)); };
    hooks.sandbox_log = [this](const std::string& id, std::string level, std::string message) {
      if (auto sb = manager_->Get(id)) sb->AddLog(std::move(level), std::move(message));
    };
    hooks.run_later = [this](std::chrono::milliseconds delay, std::function<void()> fn) {
      if (delay.count() <= 0) return asio::post(*workers_, std::move(fn));
      auto timer = std::make_shared<asio::steady_timer>(io_, delay);
      timer->async_wait([this, timer, fn = std::move(fn)](boost::system::error_code ec) {
        if (!ec) asio::post(*workers_, fn);
      });
    };
    secrets_ = std::make_unique<SecretsService>(std::move(so), redactor_, std::move(hooks));
  }
  if (!config_.manager.egress_request_broker)
    config_.manager.egress_request_broker = secrets::NewEgressBroker(secrets_->broker());
  if (!config_.manager.egress_audit_sink) {
    // Every egress decision (rate-limited per sandbox by the egress service)
    // goes to the audit trail and the egress counters of /metrics.
    config_.manager.egress_audit_sink = [this, log = AuditSinkOf(audit_)](const nlohmann::json& j) {
      const std::string decision = j.value("decision", "");
      if (decision == "allow" || decision == "deny") metrics_.EgressDecision(decision == "allow");
      if (j.contains("bytesOut") && j["bytesOut"].is_number_unsigned() && j.contains("bytesIn") &&
          j["bytesIn"].is_number_unsigned()) {
        metrics_.EgressBytes(j["bytesOut"].get<uint64_t>(), j["bytesIn"].get<uint64_t>());
      }
      nlohmann::json r = j;
      r["action"] = "egress";
      if (j.contains("sandboxID")) r["sandbox"] = j["sandboxID"];
      log(r);
      // One secret.use record per secret per proxied connection: name and
      // host, never the value.
      if (auto s = j.find("secrets"); s != j.end() && s->is_array()) {
        for (const auto& name : *s) {
          log({{"action", "secret.use"},
               {"sandbox", j.value("sandboxID", "")},
               {"name", name},
               {"host", j.contains("destination") ? j["destination"].value("name", "") : ""},
               {"requests", j.value("requests", 0)}});
        }
      }
    };
  }
  config_.manager.template_snapshots = !config_.no_template_snapshot;
  config_.manager.pool.size = config_.no_template_snapshot ? 0
                              : config_.pool_size < 0    ? PoolSizeForHost()
                                                         : config_.pool_size;
  // The Manager owns sandbox state and writes the registry; the server hears
  // of ends and pauses (SandboxEvents) and runs their blocking work on its workers.
  workers_ = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, config_.workers)));
  // MCP tool calls get their own pool once the listener is bound; their
  // numbers are refused now, before anything is adopted.
  RETURN_IF_ERROR(McpService::Check(config_.mcp_threads, config_.mcp_calls_per_team));
  config_.manager.registry = registry_.get();
  config_.manager.pool.min_available_mib = config_.pressure.refuse_below_mib;
  if (config_.memory_sample_interval.count() > 0)
    config_.manager.pool.memory_short = [this] { return memory_ && memory_->under(); };
  config_.manager.events.ending = [this](Sandbox& sb, const SandboxEnd& end) { OnSandboxEnding(sb, end); };
  config_.manager.events.ended = [this](const std::string& id, const SandboxEnd& end) { OnSandboxEnded(id, end); };
  // Its guest is stopping: no stream may wait on it.
  config_.manager.events.paused = [this](Sandbox& sb) { streams_.Drop(sb.id()); };
  // Adopted while paused: its CA is minted now.
  config_.manager.events.resumed = [this](Sandbox& sb) { secrets_->EnsureSandboxCa(sb.id()); };
  secrets_->AddSecretEnvToAdopt(&adopt);
  ASSIGN_OR_RETURN(manager_, Manager::Open(config_.manager, adopt));
  reaper_ = std::make_unique<Reaper>(
      *manager_, ReaperConfig{config_.reaper_interval, config_.max_lifetime_s,
                              [this](std::function<void()> work) { asio::post(*workers_, std::move(work)); }});
  std::vector<std::string> adopted;
  for (const auto& sb : manager_->List()) {
    admission_->Adopt(sb->id(), "", sb->memory_mib());
    adopted.push_back(sb->id());
  }
  RETURN_IF_ERROR(secrets_->Init(manager_.get(), adopted));
  if (!config_.build_allow_set) config_.build_allow = DefaultBuildAllow();
  // Custom templates (template_api.h): they write within the team disk budget,
  // which counts their uploads, layers and images (DiskHoldings).
  InitTeamDisk();
  {
    TemplateApi::Config tc;
    tc.state_dir = config_.manager.state_dir;
    tc.owner = config_.manager.owner;
    tc.db_path = db_path_;
    tc.max_builds = config_.max_builds;
    tc.build_timeout_s = config_.build_timeout_s;
    tc.build_allow = config_.build_allow;
    tc.insecure_registries = config_.insecure_registries;
    tc.registry_allow = config_.registry_allow;
    tc.max_image_unpack_mib = config_.max_image_unpack_mib;
    tc.max_vcpus = config_.max_vcpus;
    tc.max_memory_mib = config_.max_memory_mib;
    tc.max_disk_mib = config_.max_disk_mib;
    tc.max_upload_mib = config_.max_upload_mib;
    tc.upload_ttl_s = config_.upload_ttl_s;
    tc.public_url = config_.public_url;
    tc.listen = config_.listen;
    TemplateApi::Deps deps{
        .manager = *manager_,
        .workers = *workers_,
        .team_disk = team_disk_.get(),
        .check_team_disk = [this](const std::string& team) { return CheckTeamDisk(team_disk_.get(), team); },
        .audit = [this](json r) { AppendAudit(audit_.get(), std::move(r)); },
        .read_json = [this](std::shared_ptr<HttpConn> c,
                            std::function<void(json)> then) {
          ReadJsonBody(c, config_.max_json_body, std::move(then));
        },
        .delete_snapshot = [this](std::shared_ptr<HttpConn> c, const std::string& ref,
                                  const Caller& caller) { router_->snapshots().DeleteSnapshot(std::move(c), ref, caller); },
        .named_snapshot = [this](const std::string& ref, const std::string& team,
                                 bool admin) { return catalog_->NamedSnapshotDir(ref, team, admin); },
    };
    ASSIGN_OR_RETURN(templates_, TemplateApi::Open(std::move(tc), std::move(deps)));
  }
  catalog_ = std::make_unique<control::TemplateCatalog>(*manager_, *registry_, templates_->store(),
                                                        config_.manager.state_dir, manager_->config().runtime);
  {
    control::SandboxController::Hooks hooks;
    hooks.run_blocking = [this](std::function<void()> work) { asio::post(*workers_, std::move(work)); };
    hooks.audit = [this](json r) { AppendAudit(audit_.get(), std::move(r)); };
    if (config_.cluster.sandbox_added) hooks.record_in_cluster = config_.cluster.sandbox_added;
    hooks.check_team_disk = [this](const std::string& team) { return CheckTeamDisk(team_disk_.get(), team); };
    hooks.disk_changed = [this] {
      if (team_disk_) team_disk_->Invalidate();
    };
    sandboxes_ = std::make_unique<control::SandboxController>(
        control::SandboxController::Deps{*manager_, *admission_, *secrets_, *registry_, metrics_,
                                         &templates_->store(), config_.manager.state_dir, config_.disk_reserve_mib,
                                         db_dir_, config_.disk_per_create_mib, !config_.no_template_snapshot},
        std::move(hooks), io_);
  }
  if (config_.write_cli_key) {
    std::string path = db_dir + "/cli.key";
    std::string existing;
    if (std::ifstream f(path); f) std::getline(f, existing);
    auto valid = registry_->CheckApiKey(existing);
    if (!valid.ok() || !*valid) {
      (void)registry_->RemoveApiKey("cli");
      ASSIGN_OR_RETURN(auto created, registry_->CreateApiKey("cli", "", /*admin=*/true));
      int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd < 0) return ErrnoError("open " + path);
      std::string line = created.second + "\n";
      bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      ::close(fd);
      if (!ok) return ErrnoError("write " + path);
    }
  }
  api_keys_ = config_.cluster.keys ? std::make_unique<ApiKeyTable>(*config_.cluster.keys)
                                   : std::make_unique<ApiKeyTable>(registry_.get());
  RETURN_IF_ERROR(api_keys_->Reload());
  lookups_ = std::make_unique<asio::thread_pool>(2);
  HttpLimits limits = config_.limits;
  if (!limits.log) {
    limits.log = [](http::LogLevel level, const std::string& msg) {
      if (level == http::LogLevel::kError)
        LOG_ERROR("{}", msg);
      else if (level == http::LogLevel::kWarning)
        LOG_WARN("{}", msg);
      else
        LOG_DEBUG("{}", msg);
    };
  }
  listener_ = std::make_unique<HttpListener>(
      io_, [this](std::shared_ptr<HttpConn> c) { router_->Handle(std::move(c)); }, limits);
  RETURN_IF_ERROR(listener_->Listen(config_.listen));
  // The web console's own origin (docs/console.md): never the API's, where
  // signed URLs relay guest bytes.
  if (!config_.console_listen.empty()) {
    console_listener_ = std::make_unique<HttpListener>(
        io_, [this](std::shared_ptr<HttpConn> c) { router_->HandleConsoleOrigin(std::move(c)); }, std::move(limits));
    RETURN_IF_ERROR(console_listener_->Listen(config_.console_listen).WithContext("--console-listen"));
  }
  // MCP tools reach this daemon's API (or --mcp-api's) with the caller's key.
  ASSIGN_OR_RETURN(mcp_, McpService::Create({.listen = config_.listen,
                                             .port = port(),
                                             .public_url = config_.public_url,
                                             .api = config_.mcp_api,
                                             .threads = config_.mcp_threads,
                                             .calls_per_team = config_.mcp_calls_per_team,
                                             .server_version = kAirlockVersion},
                                            [this](json r) { AppendAudit(audit_.get(), std::move(r)); }));
  signals_ = std::make_unique<asio::signal_set>(io_, SIGINT, SIGTERM);
  signals_->async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      LOG_WARN("signal {} received, stopping", sig);
      Stop();
    }
  });
  // API keys changed by `airlock apikey` reach the table within a
  // reaper_interval; uploads no build uses expire (the upload TTL).
  api_keys_->RefreshEvery(io_, *lookups_, config_.reaper_interval);
  templates_->SweepEvery(io_, config_.reaper_interval);
  metrics_sampler_ = std::make_unique<control::MetricsSampler>(
      *manager_, io_, config_.metrics_interval, [this](std::function<void()> work) { asio::post(*workers_, std::move(work)); });
  metrics_sampler_->Start();
  {
    std::vector<std::string> running;
    for (const auto& sb : manager_->VisibleList()) {
      if (sb->api_state() == "running") running.push_back(sb->id());
    }
    secrets_->ReinstallCas(running);
  }
  reaper_->Start();
  if (image::FindImage(dir, "base").ok()) {
    sandboxes_->EnsureTemplateSnapshot("base", config_.default_vcpus, config_.default_memory_mib);
    manager_->warm_pool().Warm("base", config_.default_vcpus, config_.default_memory_mib);
  }
  // The code interpreter's snapshot (its kernel warm in it) is made at start
  // too, so the first Sandbox.create() of @e2b/code-interpreter restores it.
  if (image::FindImage(dir, "code-interpreter").ok()) {
    const image::MachineShape shape = DefaultShapeFor(config_, "code-interpreter");
    sandboxes_->EnsureTemplateSnapshot("code-interpreter", shape.vcpus, shape.memory_mib);
  }
  // A first memory reading before the warm pool starts (it follows the
  // pressure verdict from its first round) and before any create: here, at
  // start, on this thread (adopted VMMs are measured too; milliseconds).
  {
    control::MemoryGovernor::Hooks hooks;
    hooks.run_blocking = [this](std::function<void()> work) { asio::post(*workers_, std::move(work)); };
    hooks.streaming = [this] { return streams_.Live(); };
    hooks.paused = [this](const std::string& id, const std::string& why) {
      metrics_.PressurePause();
      if (auto sb = manager_->Get(id))
        sb->AddLog("warn", "paused by the host's memory-pressure policy (" + why + "); it resumes on connect");
      AppendAudit(audit_.get(), {{"action", "sandbox.pressure_pause"}, {"sandbox", id}, {"reason", why}});
    };
    memory_ = std::make_unique<control::MemoryGovernor>(
        *manager_, *admission_, io_, control::MemoryGovernorConfig{config_.memory_sample_interval, config_.pressure},
        control::ProcMemoryProbe(), std::move(hooks));
  }
  memory_->Start();
  manager_->warm_pool().Start();
  sandboxes_->Start();  // admission's tick
  {
    // The HTTP handlers, over every owner made above (no request is served
    // before Run()).
    Services sv;
    sv.config = &config_;
    sv.io = &io_;
    sv.workers = workers_.get();
    sv.lookups = lookups_.get();
    sv.manager = manager_.get();
    sv.registry = registry_.get();
    sv.sandboxes = sandboxes_.get();
    sv.secrets = secrets_.get();
    sv.admission = admission_.get();
    sv.memory = memory_.get();
    sv.metrics_sampler = metrics_sampler_.get();
    sv.catalog = catalog_.get();
    sv.metrics = &metrics_;
    sv.templates = templates_.get();
    sv.team_disk = team_disk_.get();
    sv.streams = &streams_;
    sv.api_keys = api_keys_.get();
    sv.audit = audit_;
    sv.otlp = otlp_.get();
    sv.db_dir = db_dir_;
    router_ = std::make_unique<Router>(sv, mcp_.get(), [this] { return console_port(); });
  }
  LOG_WARN("airlock serve listening on {} (port {}), {} sandbox(es) adopted", config_.listen, port(), adopted.size());
  if (console_listener_) LOG_WARN("airlock serve: web console on {} (port {})", config_.console_listen, console_port());
  return OkStatus();
}

Server::~Server() {
  Stop();
  // MCP tool calls block on this daemon's own API, which no longer answers:
  // their threads are let go (each drops its answer) rather than waited for.
  if (mcp_) mcp_->Shutdown();
  // A running template build ends (its build sandbox is destroyed) before
  // anything it uses goes.
  if (templates_) templates_->Stop();
  // No reaper decision once the workers stop taking work.
  if (reaper_) reaper_->Stop();
  // A template snapshot waiting on its guest (minutes, under TCG) gives up.
  if (manager_) manager_->template_snapshots().Cancel();
  if (workers_) workers_->join();
  if (lookups_) lookups_->join();
  if (manager_) {
    if (config_.kill_on_exit) {
      manager_->DestroyAll();  // each end forgets the sandbox's secrets (OnSandboxEnding)
    } else {
      manager_->ReleaseAll();
    }
  }
}

void Server::Run() { io_.run(); }

void Server::Stop() {
  asio::post(io_, [this] {
    if (listener_) listener_->Stop();
    if (console_listener_) console_listener_->Stop();
    if (api_keys_) api_keys_->StopRefresh();
    if (templates_) templates_->StopSweeps();
    if (metrics_sampler_) metrics_sampler_->Stop();
    if (sandboxes_) sandboxes_->Stop();
    if (memory_) memory_->Stop();
    if (signals_) signals_->cancel();
    io_.stop();
  });
}

int PoolSizeForHost() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  int64_t gib = pages > 0 && page > 0 ? (int64_t{pages} * page) >> 30 : 0;
  return static_cast<int>(std::clamp<int64_t>(gib / 8, 1, 4));
}

std::vector<std::string> Server::CustomTemplateNames() {
  if (!templates_) return {};
  return templates_->CustomTemplateNames();
}

void Server::OnSandboxEnding(Sandbox& sb, const SandboxEnd& end) {
  const std::string& id = sb.id();
  streams_.Drop(id);
  secrets_->Forget(id);
  if (end.outcome == SandboxOutcome::kCreateFailed) return;  // audited as sandbox.create_failed
  if (end.outcome == SandboxOutcome::kVmmExited) {
    sb.AddLog("warn", "sandbox died: " + end.Describe());
    AppendAudit(audit_.get(), {{"action", "sandbox.died"}, {"sandbox", id}, {"outcome", end.Describe()}});
    metrics_.SandboxDied();
  }
  AppendAudit(audit_.get(), {{"action", "sandbox.ended"},
         {"sandbox", id},
         {"outcome", SandboxOutcomeName(end.outcome)},
         {"detail", end.detail},
         {"reason", end.Describe()}});
}

void Server::OnSandboxEnded(const std::string& id, const SandboxEnd& end) {
  if (metrics_sampler_) metrics_sampler_->Forget(id);
  if (end.outcome != SandboxOutcome::kCreateFailed) admission_->SandboxGone(id, control::Admission::Clock::now());
  if (config_.cluster.sandbox_removed) {
    asio::post(*workers_, [this, id] { config_.cluster.sandbox_removed(id); });
  }
}

}  // namespace airlock::server
