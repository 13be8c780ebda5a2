#include "agent/agent.h"

#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/auth.h"
#include "agent/log.h"
#include "agent/rpc.h"
#include "envd/proto_json.h"

namespace airlock::agent {

void RespondHttpError(Session& s, int status, const std::string& message) {
  envd::OJson j = {{"code", status}, {"message", message}};
  s.Respond(status, "application/json", envd::Dump(j));
}

Agent::Agent(asio::io_context& io, AgentOptions options)
    : io_(io),
      options_(std::move(options)),
      is_root_(geteuid() == 0),
      processes_(io),
      server_(io, [this](std::shared_ptr<Session> s) { Handle(std::move(s)); }),
      sigchld_(io, SIGCHLD),
      default_user_(options_.default_user) {}

Status Agent::Start() {
  ReapChildren();  // arms the SIGCHLD wait and collects anything already dead
  return server_.Listen(options_.listen);
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

StatusOr<User> Agent::UserFromAuthHeader(const Session& s) const {
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

void Agent::Handle(std::shared_ptr<Session> s) {
  const std::string& path = s->path();
  LogDebug("%s %s", std::string(http::to_string(s->method())).c_str(), path.c_str());
  if (Status access = CheckAccess(*this, *s); !access.ok()) return RespondHttpError(*s, 401, access.message());
  if (path == "/init") return HandleInit(*this, s);
  constexpr std::string_view kProcess = "/process.Process/";
  constexpr std::string_view kFilesystem = "/filesystem.Filesystem/";
  if (path.rfind(kProcess, 0) == 0 || path.rfind(kFilesystem, 0) == 0) {
    if (s->method() != http::verb::post) {
      return RespondUnaryError(*s, Unimplemented("Connect RPCs must use POST"));
    }
    if (path.rfind(kProcess, 0) == 0) return HandleProcessRpc(*this, s, path.substr(kProcess.size()));
    return HandleFilesystemRpc(*this, s, path.substr(kFilesystem.size()));
  }
  if (path == "/health") {
    if (s->method() != http::verb::get && s->method() != http::verb::head) {
      return RespondHttpError(*s, 405, "method not allowed");
    }
    return s->Respond(204, "", "");
  }
  if (path == "/files") {
    if (s->method() == http::verb::get) return HandleFilesGet(*this, s);
    if (s->method() == http::verb::post) return HandleFilesPost(*this, s);
    return RespondHttpError(*s, 405, "method not allowed");
  }
  if (path == "/envs" && s->method() == http::verb::get) {
    return s->Respond(200, "application/json", envd::Dump(envd::OJson(env_vars_)));
  }
  if (path == "/metrics" && s->method() == http::verb::get) {
    return s->Respond(200, "application/json", MetricsJson());
  }
  RespondHttpError(*s, 404, "no route for " + std::string(http::to_string(s->method())) + " " + path);
}

}  // namespace airlock::agent
