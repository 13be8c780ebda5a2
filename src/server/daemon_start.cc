// The daemon's start (Server::Init) as a named checklist (common/checklist.h):
// each step opens one owner, in the order the owners depend on each other,
// and a failing step's error names it ("registry: ... in use by pid N").
// What a step made stays in the Server, whose destructor takes down
// whatever exists (every member is checked before use), so no step needs an
// undo of its own. No request is served before Server::Run, so the router
// is made last.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>

#include "common/checklist.h"
#include "common/log.h"
#include "image/image.h"
#include "secrets/egress_broker.h"
#include "server/mcp_service.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

// serve --team-disk-budget -1: a quarter of the state dir's filesystem, at least 4 GiB.
int64_t DefaultTeamDiskBudgetMib(const std::string& state_dir) {
  struct statvfs vfs;
  if (::statvfs(state_dir.c_str(), &vfs) != 0) return 4096;
  const int64_t total_mib = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  return std::max<int64_t>(4096, total_mib / 4);
}

}  // namespace

class DaemonStart {
 public:
  explicit DaemonStart(Server* server) : server_(server), state_dir(server->config_.manager.state_dir) {}

  Status Run() {
    Server* const s = server_;
    using Step = Status (DaemonStart::*)();
    const std::pair<const char*, Step> steps[] = {
        {"registry", &DaemonStart::OpenRegistry},
        {"audit", &DaemonStart::OpenAudit},
        {"secrets", &DaemonStart::OpenSecrets},
        {"egress", &DaemonStart::WireEgress},
        {"manager settings", &DaemonStart::ConfigureManager},
        {"manager", &DaemonStart::OpenManager},
        {"team disk", &DaemonStart::OpenTeamDisk},
        {"templates", &DaemonStart::OpenTemplates},
        {"sandbox controller", &DaemonStart::OpenController},
        {"api keys", &DaemonStart::OpenApiKeys},
        {"listeners", &DaemonStart::Listen},
        {"timers", &DaemonStart::StartTimers},
        {"warm up", &DaemonStart::WarmUp},
        {"router", &DaemonStart::OpenRouter},
    };
    Checklist start;
    for (const auto& [name, step] : steps) RETURN_IF_ERROR(start.Do(name, [&] { return (this->*step)(); }, nullptr));
    LOG_WARN("airlock serve listening on {} (port {}), {} sandbox(es) adopted", s->config_.listen, s->port(), adopted.size());
    if (s->front_.console_listener) LOG_WARN("airlock serve: web console on {} (port {})", s->config_.console_listen, s->console_port());
    return OkStatus();
  }

 private:
  Status OpenRegistry() {
    Server* const s = server_;
    ::mkdir(state_dir.c_str(), 0700);
    const std::string db = s->config_.db_path.empty() ? state_dir + "/airlock.db" : s->config_.db_path;
    // One daemon per registry, for its whole life: a second one would adopt the
    // same sandboxes and interleave the same audit trail (docs/security.md).
    RETURN_IF_ERROR(s->registry_.Open(db));
    {
      // What this daemon owns on the host (run dirs, address leases) is tagged
      // with its registry, so its clean-up never touches another daemon's.
      std::error_code ec;
      auto canon = std::filesystem::weakly_canonical(db, ec);
      s->config_.manager.owner = ec ? db : canon.string();
    }
    return OkStatus();
  }

  Status OpenAudit() {
    Server* const s = server_;
    if (!s->audit_.redactor) s->audit_.redactor = std::make_shared<secrets::Redactor>();
    std::string audit_dir = s->config_.audit_dir.empty() ? s->registry_.db_dir() + "/audit" : s->config_.audit_dir;
    ASSIGN_OR_RETURN(s->audit_.log, audit::AuditLog::Open(audit_dir, s->audit_.redactor));
    std::weak_ptr<secrets::Redactor> weak = s->audit_.redactor;
    s->config_.limits.redact = [weak](std::string_view text) {
      auto r = weak.lock();
      return r ? r->Redact(text) : std::string(text);
    };
    // One level for "short of memory": admission's, the pressure policy's and the warm pool's.
    s->config_.admission.memory_pressure_mib = s->config_.pressure.refuse_below_mib;
    if (s->config_.memory_sample_interval.count() <= 0) s->config_.admission.memory_pressure_mib = 0;
    s->admission_ = std::make_unique<control::Admission>(s->config_.admission);
    if (!s->config_.otlp.endpoint.empty()) {
      ASSIGN_OR_RETURN(s->audit_.otlp, audit::OtlpExporter::Start(s->config_.otlp));
    }
    s->audit_.log->SetObserver([s](const nlohmann::json& r) {
      s->metrics_.AuditRecord();
      if (s->audit_.otlp) s->audit_.otlp->Enqueue(r);
    });
    return OkStatus();
  }

  Status OpenSecrets() {
    Server* const s = server_;
    // Secrets: the egress proxy asks the broker about brokered secrets and the sandbox CA.
    {
      SecretsService::Options so;
      so.db_path = s->registry_.db_path();
      so.db_dir = s->registry_.db_dir();
      // The CA's validity covers the sandbox's life: the longest lifetime
      // cap of any team, a day more; with a team uncapped, whose sandboxes
      // may live for ever on TTL extensions, ten years. Each CA is trusted
      // by one guest only and signs only its sandbox's brokered hosts, so a
      // long validity gives nothing to anyone else.
      const int longest_s = s->config_.lifetime.Longest();
      const int64_t life_s = longest_s > 0 ? int64_t{longest_s} + 86400 : int64_t{3650} * 86400;
      so.ca_lifetime = std::chrono::seconds(life_s);
      SecretsService::Hooks hooks;
      hooks.audit = [s](json r) { s->audit_.Append(std::move(r)); };
      hooks.sandbox_log = [s](const std::string& id, std::string level, std::string message) {
        if (auto sb = s->fleet_.manager->Get(id)) sb->AddLog(std::move(level), std::move(message));
      };
      hooks.run_later = [s](std::chrono::milliseconds delay, std::function<void()> fn) {
        if (delay.count() <= 0) return asio::post(*s->loop_.workers, std::move(fn));
        auto timer = std::make_shared<asio::steady_timer>(s->loop_.io, delay);
        timer->async_wait([s, timer, fn = std::move(fn)](boost::system::error_code ec) {
          if (!ec) asio::post(*s->loop_.workers, fn);
        });
      };
      s->secrets_ = std::make_unique<SecretsService>(std::move(so), s->audit_.redactor, std::move(hooks));
      if (s->config_.cluster.secrets) s->secrets_->SetClusterSource(s->config_.cluster.secrets(*s->secrets_));
    }
    {
      LifecycleEvents::Options lo;
      lo.allow_private_targets = s->config_.webhook_allow_private;
      lo.retry_delay = std::chrono::milliseconds(std::max<int64_t>(0, s->config_.webhook_retry_delay_ms));
      s->lifecycle_ = std::make_unique<LifecycleEvents>(s->registry_.db(), AuditSinkOf(s->audit_.log), lo);
    }
    return OkStatus();
  }

  Status WireEgress() {
    Server* const s = server_;
    if (!s->config_.manager.egress_request_broker)
      s->config_.manager.egress_request_broker = secrets::NewEgressBroker(s->secrets_->broker());
    if (!s->config_.manager.egress_audit_sink) {
      // Every egress decision (rate-limited per sandbox by the egress service)
      // goes to the audit trail and the egress counters of /metrics.
      s->config_.manager.egress_audit_sink = [s, log = AuditSinkOf(s->audit_.log)](const nlohmann::json& j) {
        const std::string decision = j.value("decision", "");
        if (decision == "allow" || decision == "deny") s->metrics_.EgressDecision(decision == "allow");
        if (j.contains("bytesOut") && j["bytesOut"].is_number_unsigned() && j.contains("bytesIn") &&
            j["bytesIn"].is_number_unsigned()) {
          s->metrics_.EgressBytes(j["bytesOut"].get<uint64_t>(), j["bytesIn"].get<uint64_t>());
        }
        nlohmann::json r = j;
        r["action"] = "egress";
        if (j.contains("sandboxID")) r["sandbox"] = j["sandboxID"];
        log(r);
        // One secret.use record per secret per proxied connection: name and
        // host, never the value.
        if (auto names = j.find("secrets"); names != j.end() && names->is_array()) {
          for (const auto& name : *names) {
            log({{"action", "secret.use"},
                 {"sandbox", j.value("sandboxID", "")},
                 {"name", name},
                 {"host", j.contains("destination") ? j["destination"].value("name", "") : ""},
                 {"requests", j.value("requests", 0)}});
          }
        }
      };
    }
    return OkStatus();
  }

  Status ConfigureManager() {
    Server* const s = server_;
    s->config_.manager.template_snapshots = !s->config_.no_template_snapshot;
    s->config_.manager.pool.size = s->config_.no_template_snapshot ? 0
                                : s->config_.pool_size < 0    ? PoolSizeForHost()
                                                           : s->config_.pool_size;
    // The Manager owns sandbox state and writes the registry; the server hears
    // of ends and pauses (SandboxEvents) and runs their blocking work on its workers.
    s->loop_.workers = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, s->config_.workers)));
    // MCP tool calls get their own pool once the listener is bound; their
    // numbers are refused now, before anything is adopted.
    RETURN_IF_ERROR(McpService::Check(s->config_.mcp_threads, s->config_.mcp_calls_per_team));
    s->config_.manager.registry = &s->registry_.db();
    s->config_.manager.pool.min_available_mib = s->config_.pressure.refuse_below_mib;
    if (s->config_.memory_sample_interval.count() > 0)
      s->config_.manager.pool.memory_short = [s] { return s->fleet_.memory && s->fleet_.memory->under(); };
    s->config_.manager.events.ending = [s](Sandbox& sb, const SandboxEnd& end) { s->OnSandboxEnding(sb, end); };
    s->config_.manager.events.ended = [s](const std::string& id, const SandboxEnd& end) { s->OnSandboxEnded(id, end); };
    // Its guest is stopping: no stream may wait on it.
    s->config_.manager.events.paused = [s](Sandbox& sb) {
      s->fleet_.streams.Drop(sb.id());
      s->lifecycle_->Emit("sandbox.lifecycle.paused", sb.Record(), sb.attributes().owner_team);
    };
    // Adopted while paused: its CA is minted now.
    s->config_.manager.events.resumed = [s](Sandbox& sb) {
      s->secrets_->EnsureSandboxCa(sb.id());
      s->lifecycle_->Emit("sandbox.lifecycle.resumed", sb.Record(), sb.attributes().owner_team);
    };
    return OkStatus();
  }

  Status OpenManager() {
    Server* const s = server_;
    // Sandboxes of a previous daemon: adopt the live ones, forget the rest.
    ASSIGN_OR_RETURN(auto records, s->registry_.db().ListSandboxes());
    for (const auto& r : records) adopt.push_back({r, r.env_vars});
    s->secrets_->AddSecretEnvToAdopt(&adopt);
    ASSIGN_OR_RETURN(s->fleet_.manager, Manager::Open(s->config_.manager, adopt));
    ReaperConfig reaper{s->config_.reaper_interval, s->config_.lifetime,
                        [s](std::function<void()> work) { asio::post(*s->loop_.workers, std::move(work)); }};
    // Idle sleep: the data plane's last request and open streams say who is idle.
    reaper.last_active_ms = [s](const std::string& id) -> int64_t {
      return s->fleet_.memory ? s->fleet_.memory->LastActive(id) : 0;
    };
    reaper.kept_awake = [s](const std::string& id, bool processes) {
      if (s->fleet_.streams.Live().count(id)) return true;
      if (!processes) return false;
      auto sb = s->fleet_.manager->Get(id);
      if (!sb) return false;
      auto n = sb->agent().CountProcesses();
      return !n.ok() || *n > 0;  // an agent that does not answer is not idle
    };
    s->fleet_.reaper = std::make_unique<Reaper>(*s->fleet_.manager, std::move(reaper));
    for (const auto& sb : s->fleet_.manager->List()) {
      s->admission_->Adopt(sb->id(), "", sb->memory_mib());
      adopted.push_back(sb->id());
    }
    RETURN_IF_ERROR(s->secrets_->Init(s->fleet_.manager.get(), adopted));
    return OkStatus();
  }

  Status OpenTeamDisk() {
    Server* const s = server_;
    if (!s->config_.build_allow_set) s->config_.build_allow = DefaultBuildAllow();
    // Custom templates (template_api.h) write within the team disk budget,
    // which counts their uploads, layers and images (DiskHoldingsOf).
    TeamDisk::Options o;
    o.budget_mib = s->config_.team_disk_budget_mib < 0 ? DefaultTeamDiskBudgetMib(state_dir)
                                                       : s->config_.team_disk_budget_mib;
    o.list = [s] { return DiskHoldingsOf(*s->fleet_.manager, s->templates_.api.get()); };
    s->team_disk_ = std::make_unique<TeamDisk>(std::move(o));
    if (s->team_disk_->enabled()) LOG_INFO("disk budget per team: {} MiB", s->team_disk_->budget_mib());
    // Volumes (core/volumes.h): each one mounted on the host (after a
    // reboot they are not), leftovers of a cut-short create removed.
    VolumeStore::Options vo;
    vo.state_dir = std::filesystem::absolute(s->registry_.db_dir()).lexically_normal().string();
    while (vo.state_dir.size() > 1 && vo.state_dir.back() == '/') vo.state_dir.pop_back();
    vo.default_size_mib = s->config_.volume_size_mib;
    vo.team_budget_mib = s->config_.team_volume_budget_mib < 0 ? DefaultTeamDiskBudgetMib(state_dir)
                                                               : s->config_.team_volume_budget_mib;
    vo.max_per_team = s->config_.max_volumes_per_team;
    s->volumes_ = std::make_unique<VolumeStore>(&s->registry_.db(), vo);
    s->volumes_->RemoveOrphans();
    if (auto all = s->volumes_->List(""); all.ok()) {
      for (const auto& v : *all) {
        if (auto root = s->volumes_->MountedRoot(v); !root.ok()) {
          LOG_WARN("volume {}: {}", v.id, root.status().message());
        }
      }
    }
    return OkStatus();
  }

  Status OpenTemplates() {
    Server* const s = server_;
    {
      TemplateApi::Config tc;
      tc.state_dir = s->config_.manager.state_dir;
      tc.owner = s->config_.manager.owner;
      tc.db_path = s->registry_.db_path();
      tc.max_builds = s->config_.max_builds;
      tc.build_timeout_s = s->config_.build_timeout_s;
      tc.build_allow = s->config_.build_allow;
      tc.insecure_registries = s->config_.insecure_registries;
      tc.registry_allow = s->config_.registry_allow;
      tc.max_image_unpack_mib = s->config_.max_image_unpack_mib;
      tc.max_vcpus = s->config_.max_vcpus;
      tc.max_memory_mib = s->config_.max_memory_mib;
      tc.max_disk_mib = s->config_.max_disk_mib;
      tc.max_upload_mib = s->config_.max_upload_mib;
      tc.upload_ttl_s = s->config_.upload_ttl_s;
      tc.public_url = s->config_.public_url;
      tc.listen = s->config_.listen;
      TemplateApi::Deps deps{
          .manager = *s->fleet_.manager,
          .workers = *s->loop_.workers,
          .team_disk = s->team_disk_.get(),
          .check_team_disk = [s](const std::string& team) { return CheckTeamDisk(s->team_disk_.get(), team); },
          .audit = [s](json r) { s->audit_.Append(std::move(r)); },
          .read_json = [s](std::shared_ptr<HttpConn> c,
                              std::function<void(json)> then) {
            ReadJsonBody(c, s->config_.max_json_body, std::move(then));
          },
          .delete_snapshot = [s](std::shared_ptr<HttpConn> c, const std::string& ref,
                                    const Caller& caller) { s->front_.router->snapshots().DeleteSnapshot(std::move(c), ref, caller); },
          .named_snapshot = [s](const std::string& ref, const std::string& team,
                                   bool admin) { return s->templates_.catalog->NamedSnapshotDir(ref, team, admin); },
          .image_installed = s->config_.cluster.template_image_installed,
      };
      ASSIGN_OR_RETURN(s->templates_.api, TemplateApi::Open(std::move(tc), std::move(deps)));
    }
    return OkStatus();
  }

  Status OpenController() {
    Server* const s = server_;
    s->templates_.catalog = std::make_unique<control::TemplateCatalog>(*s->fleet_.manager, s->registry_.db(), s->templates_.api->store(),
                                                          s->config_.manager.state_dir, s->fleet_.manager->config().runtime);
    if (s->config_.cluster.templates)
      s->templates_.catalog->SetClusterSource(s->config_.cluster.templates(s->templates_.api->store(), s->config_.manager.owner));
    {
      control::SandboxController::Hooks hooks;
      hooks.run_blocking = [s](std::function<void()> work) { asio::post(*s->loop_.workers, std::move(work)); };
      hooks.audit = [s](json r) { s->audit_.Append(std::move(r)); };
      if (s->config_.cluster.sandbox_added) hooks.record_in_cluster = s->config_.cluster.sandbox_added;
      if (s->config_.cluster.claim_reservation) hooks.claim_reservation = s->config_.cluster.claim_reservation;
      if (s->config_.cluster.release_reservation) hooks.release_reservation = s->config_.cluster.release_reservation;
      hooks.check_team_disk = [s](const std::string& team) { return CheckTeamDisk(s->team_disk_.get(), team); };
      hooks.disk_changed = [s] {
        if (s->team_disk_) s->team_disk_->Invalidate();
      };
      s->fleet_.controller = std::make_unique<control::SandboxController>(
          control::SandboxController::Deps{*s->fleet_.manager, *s->admission_, *s->secrets_, s->registry_.db(), s->metrics_,
                                           &s->templates_.api->store(), s->config_.manager.state_dir, s->config_.disk_reserve_mib,
                                           s->registry_.db_dir(), s->config_.disk_per_create_mib, !s->config_.no_template_snapshot},
          std::move(hooks), s->loop_.io);
    }
    return OkStatus();
  }

  Status OpenApiKeys() {
    Server* const s = server_;
    if (s->config_.write_cli_key) {
      std::string path = s->registry_.db_dir() + "/cli.key";
      std::string existing;
      if (std::ifstream f(path); f) std::getline(f, existing);
      auto valid = s->registry_.db().CheckApiKey(existing);
      if (!valid.ok() || !*valid) {
        (void)s->registry_.db().RemoveApiKey("cli");
        ASSIGN_OR_RETURN(auto created, s->registry_.db().CreateApiKey("cli", "", /*admin=*/true));
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) return ErrnoError("open " + path);
        std::string line = created.second + "\n";
        bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
        ::close(fd);
        if (!ok) return ErrnoError("write " + path);
      }
    }
    s->front_.api_keys = s->config_.cluster.keys ? std::make_unique<ApiKeyTable>(*s->config_.cluster.keys)
                                     : std::make_unique<ApiKeyTable>(&s->registry_.db());
    RETURN_IF_ERROR(s->front_.api_keys->Reload());
    s->loop_.lookups = std::make_unique<asio::thread_pool>(2);
    return OkStatus();
  }

  Status Listen() {
    Server* const s = server_;
    HttpLimits limits = s->config_.limits;
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
    s->front_.listener = std::make_unique<HttpListener>(
        s->loop_.io, [s](std::shared_ptr<HttpConn> c) { s->front_.router->Handle(std::move(c)); }, limits);
    RETURN_IF_ERROR(s->front_.listener->Listen(s->config_.listen));
    // The web console's own origin (docs/console.md): never the API's, where
    // signed URLs relay guest bytes.
    if (!s->config_.console_listen.empty()) {
      s->front_.console_listener = std::make_unique<HttpListener>(
          s->loop_.io, [s](std::shared_ptr<HttpConn> c) { s->front_.router->HandleConsoleOrigin(std::move(c)); }, std::move(limits));
      RETURN_IF_ERROR(s->front_.console_listener->Listen(s->config_.console_listen).WithContext("--console-listen"));
    }
    // TLS in front of the API listener (gateway/tls_front.h).
    if (!s->config_.tls_listen.empty()) {
      if (s->config_.tls_cert.empty() || s->config_.tls_key.empty())
        return InvalidArgument("--tls-listen needs --tls-cert and --tls-key");
      std::string host = s->config_.listen.substr(0, s->config_.listen.rfind(':'));
      if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
      s->front_.tls = std::make_unique<gateway::TlsFront>(s->loop_.io, host, s->port());
      RETURN_IF_ERROR(s->front_.tls
                          ->Start(s->config_.tls_listen, s->config_.tls_cert, s->config_.tls_key,
                                  s->config_.tls_client_auth)
                          .WithContext(s->config_.tls_client_auth ? "cluster TLS" : "--tls-listen"));
      LOG_WARN("airlock serve: TLS on {} (port {})", s->config_.tls_listen, s->front_.tls->port());
    }
    // MCP tools reach this daemon's API (or --mcp-api's) with the caller's key.
    ASSIGN_OR_RETURN(s->mcp_, McpService::Create({.listen = s->config_.listen,
                                               .port = s->port(),
                                               .public_url = s->config_.public_url,
                                               .api = s->config_.mcp_api,
                                               .threads = s->config_.mcp_threads,
                                               .calls_per_team = s->config_.mcp_calls_per_team,
                                               .server_version = kAirlockVersion},
                                              [s](json r) { s->audit_.Append(std::move(r)); }));
    return OkStatus();
  }

  Status StartTimers() {
    Server* const s = server_;
    s->loop_.signals = std::make_unique<asio::signal_set>(s->loop_.io, SIGINT, SIGTERM);
    s->loop_.signals->async_wait([s](boost::system::error_code ec, int sig) {
      if (!ec) {
        LOG_WARN("signal {} received, stopping", sig);
        s->Stop();
      }
    });
    // API keys changed by `airlock apikey` reach the table within a
    // reaper_interval; uploads no build uses expire (the upload TTL).
    s->front_.api_keys->RefreshEvery(s->loop_.io, *s->loop_.lookups, s->config_.reaper_interval);
    s->templates_.api->SweepEvery(s->loop_.io, s->config_.reaper_interval);
    s->fleet_.sampler = std::make_unique<control::MetricsSampler>(
        *s->fleet_.manager, s->loop_.io, s->config_.metrics_interval, [s](std::function<void()> work) { asio::post(*s->loop_.workers, std::move(work)); });
    s->fleet_.sampler->Start();
    {
      std::vector<std::string> running;
      for (const auto& sb : s->fleet_.manager->VisibleList()) {
        if (sb->api_state() == "running") running.push_back(sb->id());
      }
      s->secrets_->ReinstallCas(running);
    }
    s->fleet_.reaper->Start();
    return OkStatus();
  }

  Status WarmUp() {
    Server* const s = server_;
    if (image::FindImage(state_dir, "base").ok()) {
      s->fleet_.controller->EnsureTemplateSnapshot("base", s->config_.default_vcpus, s->config_.default_memory_mib);
      s->fleet_.manager->warm_pool().Warm("base", s->config_.default_vcpus, s->config_.default_memory_mib);
    }
    // The code interpreter's snapshot (its kernel warm in it) is made at start
    // too, so the first Sandbox.create() of @e2b/code-interpreter restores it.
    if (image::FindImage(state_dir, "code-interpreter").ok()) {
      const image::MachineShape shape = DefaultShapeFor(s->config_, "code-interpreter");
      s->fleet_.controller->EnsureTemplateSnapshot("code-interpreter", shape.vcpus, shape.memory_mib);
    }
    // A first memory reading before the warm pool starts (it follows the
    // pressure verdict from its first round) and before any create: here, at
    // start, on this thread (adopted VMMs are measured too; milliseconds).
    {
      control::MemoryGovernor::Hooks hooks;
      hooks.run_blocking = [s](std::function<void()> work) { asio::post(*s->loop_.workers, std::move(work)); };
      hooks.streaming = [s] { return s->fleet_.streams.Live(); };
      hooks.paused = [s](const std::string& id, const std::string& why) {
        s->metrics_.PressurePause();
        if (auto sb = s->fleet_.manager->Get(id))
          sb->AddLog("warn", "paused by the host's memory-pressure policy (" + why + "); it resumes on connect");
        s->audit_.Append({{"action", "sandbox.pressure_pause"}, {"sandbox", id}, {"reason", why}});
      };
      s->fleet_.memory = std::make_unique<control::MemoryGovernor>(
          *s->fleet_.manager, *s->admission_, s->loop_.io, control::MemoryGovernorConfig{s->config_.memory_sample_interval, s->config_.pressure},
          control::ProcMemoryProbe(), std::move(hooks));
    }
    s->fleet_.memory->Start();
    s->fleet_.manager->warm_pool().Start();
    s->fleet_.controller->Start();  // admission's tick
    return OkStatus();
  }

  Status OpenRouter() {
    Server* const s = server_;
    {
      // The HTTP handlers, over every owner made above (no request is served
      // before Run()).
      Services sv;
      sv.config = &s->config_;
      sv.io = &s->loop_.io;
      sv.workers = s->loop_.workers.get();
      sv.lookups = s->loop_.lookups.get();
      sv.manager = s->fleet_.manager.get();
      sv.registry = &s->registry_.db();
      sv.sandboxes = s->fleet_.controller.get();
      sv.secrets = s->secrets_.get();
      sv.admission = s->admission_.get();
      sv.memory = s->fleet_.memory.get();
      sv.metrics_sampler = s->fleet_.sampler.get();
      sv.catalog = s->templates_.catalog.get();
      sv.metrics = &s->metrics_;
      sv.templates = s->templates_.api.get();
      sv.team_disk = s->team_disk_.get();
      sv.volumes = s->volumes_.get();
      sv.streams = &s->fleet_.streams;
      sv.lifecycle = s->lifecycle_.get();
      sv.api_keys = s->front_.api_keys.get();
      sv.audit = s->audit_.log;
      sv.otlp = s->audit_.otlp.get();
      sv.db_dir = s->registry_.db_dir();
      s->front_.router = std::make_unique<Router>(sv, s->mcp_.get(), [s] { return s->console_port(); });
    }
    return OkStatus();
  }

  Server* const server_;  // what each step opens is its; lambdas capture it, never this
  const std::string state_dir;
  std::vector<AdoptRequest> adopt;        // the registry's sandboxes, for the Manager
  std::vector<std::string> adopted;       // what the Manager took over
};

Status Server::Init() { return DaemonStart(this).Run(); }

}  // namespace airlock::server
