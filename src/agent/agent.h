// The agent: owns the HTTP server, the process table and the SIGCHLD
// reaper, and routes each request to one handler (spec §3, §4):
//   /process.Process/*        process_service.cc
//   /filesystem.Filesystem/*  filesystem_service.cc
//   /files                    files_handler.cc
//   /health /envs /metrics    agent.cc, metrics.cc
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "agent/process_table.h"
#include "agent/users.h"
#include "common/status.h"
#include "http/conn.h"
#include "http/listener.h"

namespace airlock::agent {

namespace asio = boost::asio;

class WatchRegistry;
class ServiceSupervisor;

struct AgentOptions {
  std::string listen = "0.0.0.0:49983";
  std::string root_prefix;          // where etc/passwd and etc/group are read ("" = /)
  std::string default_user = "user";
  bool verbose = false;
  // cgroup2 mount under which started processes get their limits
  // (cgroups.h); "" = no cgroups. main() sets /sys/fs/cgroup as PID 1.
  std::string cgroup_root;
  // Request deadlines (http/conn.h): the head within header_timeout (else
  // 408), each piece of a body (an upload) within body_idle_timeout. A
  // response, however long it streams, is never cut.
  std::chrono::milliseconds header_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds body_idle_timeout{std::chrono::minutes(5)};
  // http::Limits::passive_close: set under gVisor (main.cc), whose runsc
  // cannot checkpoint a guest holding a TCP endpoint in TIME_WAIT.
  std::chrono::milliseconds passive_close{0};
  // Where the template's service declarations are (services.h); "" = none.
  std::string services_dir = "/etc/airlock/services";
  // A custom template's defaults (src/templates, written by its build's
  // finalize step): {"user": NAME, "workdir": ABSOLUTE PATH}, either
  // optional. "user" replaces default_user; "workdir" is the cwd of a
  // process started without one (else the user's home). "" or a missing
  // file: none. An unreadable file is logged and ignored.
  std::string template_defaults = "/etc/airlock/template.json";
  // Where the access token set at POST /init is written for the code
  // interpreter (common/interpreter_access.h): root, 0600, replaced
  // atomically at each change, removed when cleared; "" = nowhere. main()
  // sets kGuestAccessTokenFile as PID 1 (never on a host).
  std::string access_token_file;
};

// Reads AgentOptions::template_defaults into `options` (default_user,
// default_workdir). InvalidArgument naming the field when it is malformed.
struct TemplateDefaults {
  std::string user;
  std::string workdir;
};
StatusOr<TemplateDefaults> ParseTemplateDefaults(std::string_view json);

inline constexpr const char* kChildPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
inline constexpr size_t kMaxRequestBody = 1 << 20;

class Agent {
 public:
  Agent(asio::io_context& io, AgentOptions options);
  ~Agent();
  // Starts the reaper and listens. Errors: the listen failure.
  Status Start();
  uint16_t port() const { return server_.port(); }

  asio::io_context& io() { return io_; }
  ProcessTable& processes() { return processes_; }
  // Directory watchers (watch_service.h).
  WatchRegistry& watches() { return *watches_; }
  const AgentOptions& options() const { return options_; }
  // True when the agent may change uid/gid (it runs as root).
  bool can_switch_user() const { return is_root_; }
  // A spawn as `user` with the environment every child starts from: PATH
  // (kChildPath), HOME, USER, LOGNAME; the caller adds the rest.
  SpawnRequest SpawnAs(const User& user) const {
    SpawnRequest sp;
    sp.user = user;
    sp.change_user = can_switch_user();
    sp.env["PATH"] = kChildPath;
    sp.env["HOME"] = user.home;
    sp.env["USER"] = user.name;
    sp.env["LOGNAME"] = user.name;
    return sp;
  }
  UserDb LoadUsers() const { return UserDb::Load(options_.root_prefix); }
  // User named by `Authorization: Basic base64(user:)`, else the default
  // user. unauthenticated when the header is malformed or the user unknown.
  StatusOr<User> UserFromAuthHeader(const http::Conn& s) const;
  StatusOr<User> UserByName(const std::string& name) const;

  // Set by POST /init (agent/auth.h).
  const std::string& access_token() const { return access_token_; }
  // Writes access_token_file first (auth.cc): on failure the token is not
  // changed, and /init fails, so the interpreter never runs with an old or
  // no token while the agent holds a new one.
  Status SetAccessToken(std::string token);
  // Sandbox-wide env of every process (below each request's own envs).
  const std::map<std::string, std::string>& env_vars() const { return env_vars_; }
  void MergeEnvVars(const std::map<std::string, std::string>& envs) {
    for (const auto& [k, v] : envs) env_vars_[k] = v;
  }
  void SetDefaultUser(std::string user) { default_user_ = std::move(user); }
  // The cwd of a process started without one ("" = the user's home).
  const std::string& default_workdir() const { return default_workdir_; }

 private:
  void Handle(std::shared_ptr<http::Conn> s);
  void ReapChildren();
  void SetupCgroups();

  asio::io_context& io_;
  AgentOptions options_;
  bool is_root_;
  ProcessTable processes_;
  std::unique_ptr<WatchRegistry> watches_;
  std::unique_ptr<ServiceSupervisor> services_;
  http::Listener server_;
  asio::signal_set sigchld_;
  std::string access_token_;
  std::map<std::string, std::string> env_vars_;
  std::string default_user_;
  std::string default_workdir_;
};

// Handlers (one file each).
void HandleProcessRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method);
void HandleFilesystemRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method);
void HandleFilesGet(Agent& agent, std::shared_ptr<http::Conn> s);
void HandleFilesPost(Agent& agent, std::shared_ptr<http::Conn> s);
void HandleFilesCompose(Agent& agent, std::shared_ptr<http::Conn> s);
void HandleRootChanges(Agent& agent, std::shared_ptr<http::Conn> s);
std::string MetricsJson();

// JSON error of the plain HTTP endpoints: {"code":<http status>,"message":...}.
void RespondHttpError(http::Conn& s, int status, const std::string& message);

}  // namespace airlock::agent
