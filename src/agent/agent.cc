#include "agent/agent.h"
#include "agent/services.h"

#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "agent/auth.h"
#include "agent/init.h"
#include "agent/log.h"
#include "agent/rpc.h"
#include "agent/watch_service.h"
#include "envd/proto_json.h"

namespace airlock::agent {

void RespondHttpError(http::Conn& s, int status, const std::string& message) {
  envd::OJson j = {{"code", status}, {"message", message}};
  s.Respond(status, "application/json", envd::Dump(j));
}

namespace {

http::Limits HttpLimits(const AgentOptions& o) {
  http::Limits limits;
  limits.header_timeout = o.header_timeout;
  limits.body_idle_timeout = o.body_idle_timeout;
  limits.passive_close = o.passive_close;
  limits.log = [](http::LogLevel level, const std::string& msg) {
    if (level == http::LogLevel::kDebug)
      LogDebug("%s", msg.c_str());
    else
      LogError("%s", msg.c_str());
  };
  return limits;
}

}  // namespace

Agent::Agent(asio::io_context& io, AgentOptions options)
    : io_(io),
      options_(std::move(options)),
      is_root_(geteuid() == 0),
      processes_(io),
      watches_(std::make_unique<WatchRegistry>()),
      server_(
          io, [this](std::shared_ptr<http::Conn> s) { Handle(std::move(s)); }, HttpLimits(options_)),
      sigchld_(io, SIGCHLD),
      default_user_(options_.default_user) {}

Agent::~Agent() = default;

StatusOr<TemplateDefaults> ParseTemplateDefaults(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("template defaults are not a JSON object");
  TemplateDefaults d;
  if (auto it = j.find("user"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("\"user\" must be a string");
    d.user = it->get<std::string>();
  }
  if (auto it = j.find("workdir"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("\"workdir\" must be a string");
    d.workdir = it->get<std::string>();
    if (!d.workdir.empty() && d.workdir[0] != '/') return InvalidArgument("\"workdir\" must be an absolute path");
  }
  return d;
}

// The agent outside every limit it sets: processes it starts go to leaf
// cgroups below <cgroup_root>/commands, and the OOM killer never picks the
// agent (PID 1 is exempt anyway; this covers --init off PID 1). A failed
// setup is logged and commands then run unlimited (the guest still works).
void Agent::SetupCgroups() {
  if (options_.cgroup_root.empty() || !is_root_) return;
  auto read_number = [](const char* path, const char* key) -> int64_t {
    std::ifstream f(path);
    std::string word;
    while (f >> word) {
      if (key[0] == '\0' || word == key) {
        int64_t v = 0;
        if (key[0] != '\0') f >> v;
        else v = std::atoll(word.c_str());
        return v;
      }
    }
    return 0;
  };
  int64_t threads_max = read_number("/proc/sys/kernel/threads-max", "");
  int64_t mem_total = read_number("/proc/meminfo", "MemTotal:") * 1024;
  CgroupLimits limits = DefaultCgroupLimits(threads_max, mem_total);
  auto cg = CommandCgroups::Setup(options_.cgroup_root, limits);
  if (!cg.ok()) {
    LogError("cgroups: %s (commands run without limits)", cg.status().ToString().c_str());
    return;
  }
  bool oom_protected = false;
  if (std::ofstream f("/proc/self/oom_score_adj"); f << "-1000" << std::flush) oom_protected = true;
  LogInfo("cgroups: %s pids.max=%lld per command=%lld memory.max=%lld", (*cg)->commands_dir().c_str(),
          static_cast<long long>((*cg)->limits().total_pids),
          static_cast<long long>((*cg)->limits().pids_per_command),
          static_cast<long long>((*cg)->limits().memory_max));
  processes_.SetCgroups(std::move(*cg), oom_protected);
}

Status Agent::Start() {
  if (!options_.template_defaults.empty()) {
    std::ifstream f(options_.template_defaults);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      auto d = ParseTemplateDefaults(ss.str());
      if (!d.ok()) {
        LogError("%s: %s (ignored)", options_.template_defaults.c_str(), d.status().message().c_str());
      } else {
        if (!d->user.empty()) default_user_ = d->user;
        default_workdir_ = d->workdir;
      }
    }
  }
  SetupCgroups();
  ReapChildren();  // arms the SIGCHLD wait and collects anything already dead
  RETURN_IF_ERROR(server_.Listen(options_.listen, "0.0.0.0"));
  if (!options_.services_dir.empty() && !services_) {
    services_ = std::make_unique<ServiceSupervisor>(*this, LoadServiceSpecs(options_.services_dir));
    services_->Start();
  }
  return OkStatus();
}

void Agent::ReapChildren() {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) processes_.OnChildExit(pid, status);
  sigchld_.async_wait([this](boost::system::error_code ec, int) {
    if (ec == asio::error::operation_aborted) return;
    ReapChildren();
  });
}

StatusOr<User> Agent::UserByName(const std::string& name) const {
  auto u = LoadUsers().Lookup(name);
  if (!u.ok()) return Status(StatusCode::kUnauthenticated, "invalid username: '" + name + "'");
  return u;
}

StatusOr<User> Agent::UserFromAuthHeader(const http::Conn& s) const {
  std::string auth = s.Header("Authorization");
  if (auth.empty()) return UserByName(default_user_);
  if (auth.size() < 6 || strncasecmp(auth.c_str(), "basic ", 6) != 0) {
    return Status(StatusCode::kUnauthenticated, "unsupported Authorization scheme");
  }
  auto decoded = envd::Base64Decode(std::string_view(auth).substr(6));
  if (!decoded.ok()) return Status(StatusCode::kUnauthenticated, "malformed Basic credentials");
  std::string name = decoded->substr(0, decoded->find(':'));
  if (name.empty()) return UserByName(default_user_);
  return UserByName(name);
}

void Agent::Handle(std::shared_ptr<http::Conn> s) {
  const std::string& path = s->path();
  LogDebug("%s %s", s->method_string().c_str(), path.c_str());
  if (Status access = CheckAccess(*this, *s); !access.ok()) return RespondHttpError(*s, 401, access.message());
  if (path == "/init") return HandleInit(*this, s);
  constexpr std::string_view kProcess = "/process.Process/";
  constexpr std::string_view kFilesystem = "/filesystem.Filesystem/";
  if (path.rfind(kProcess, 0) == 0 || path.rfind(kFilesystem, 0) == 0) {
    if (s->method() != http::Method::kPost) {
      return RespondUnaryError(*s, Unimplemented("Connect RPCs must use POST"));
    }
    if (path.rfind(kProcess, 0) == 0) return HandleProcessRpc(*this, s, path.substr(kProcess.size()));
    return HandleFilesystemRpc(*this, s, path.substr(kFilesystem.size()));
  }
  if (path == "/health") {
    if (s->method() != http::Method::kGet && s->method() != http::Method::kHead) {
      return RespondHttpError(*s, 405, "method not allowed");
    }
    return s->Respond(204, "", "");
  }
  if (path == "/airlock/root-changes") return HandleRootChanges(*this, s);
  if (path == "/files/compose") {
    if (s->method() == http::Method::kPost) return HandleFilesCompose(*this, s);
    return RespondHttpError(*s, 405, "method not allowed");
  }
  if (path == "/files") {
    if (s->method() == http::Method::kGet) return HandleFilesGet(*this, s);
    if (s->method() == http::Method::kPost) return HandleFilesPost(*this, s);
    return RespondHttpError(*s, 405, "method not allowed");
  }
  if (path == "/envs" && s->method() == http::Method::kGet) {
    return s->Respond(200, "application/json", envd::Dump(envd::OJson(env_vars_)));
  }
  if (path == "/metrics" && s->method() == http::Method::kGet) {
    return s->Respond(200, "application/json", MetricsJson());
  }
  RespondHttpError(*s, 404, "no route for " + s->method_string() + " " + path);
}

}  // namespace airlock::agent
