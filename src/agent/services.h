// Services a template declares: long-running processes the agent starts at
// boot and restarts when they die (the code interpreter's server on port
// 49999, docs/code-interpreter.md).
//
// Declaration: one JSON file per service in /etc/airlock/services/ (put
// there by the image builder, src/image), e.g.
//   {"name": "interpreter", "argv": ["/usr/local/bin/airlock-interpreter"],
//    "user": "root", "cwd": "/", "env": {"K": "V"}}
// `argv` is required (argv[0] an absolute path); `user` defaults to root,
// `cwd` to "/". A service runs like a command started through the process
// API (the same leaf cgroup limits, PATH, HOME and USER), with the tag
// "airlock-service:<name>", so `commands.list()` shows it; its output is
// read and dropped (a service that wants a log writes one).
//
// Readiness (a custom template's start command, src/templates): with
// "ready_cmd", the agent runs `/bin/bash -l -c <ready_cmd>` as the service's
// user, in its cwd and env, every kReadyPollInterval from the service's
// start until it exits 0, then writes ServiceReadyLine(name) on the console
// (once per boot). Each time the service ends before that (an "on-failure"
// service: fails), it writes ServiceFailedLine(name) + " <status>". The host waits for either line
// before it takes the template's memory snapshot (no TCP is needed to
// know; docs/templates.md).
//
// Restart: after an exit ("on-failure": after a failing one only), wait 1 s, doubling up to 30 s while it keeps dying
// within 60 s of its start; a run longer than that resets the wait.
// Errors: a declaration that does not parse is logged and skipped; the
// agent never stops for a service.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

class Agent;
class Process;

inline constexpr char kServicesDir[] = "/etc/airlock/services";
inline constexpr char kServiceTagPrefix[] = "airlock-service:";

inline constexpr char kServiceReadyTagPrefix[] = "airlock-service-ready:";
inline constexpr std::chrono::milliseconds kReadyPollInterval{1000};
inline constexpr char kServiceConsole[] = "/dev/console";

// The console lines of readiness: "airlock-agent: service <name> ready" and
// "airlock-agent: service <name> ended before ready:" (+ " <status>").
std::string ServiceReadyLine(std::string_view name);
std::string ServiceFailedLine(std::string_view name);

struct ServiceSpec {
  std::string name;
  std::vector<std::string> argv;
  std::string user = "root";
  std::string cwd = "/";
  std::map<std::string, std::string> env;
  std::string ready_cmd;  // "": no readiness line
  // "restart": "always" (the default: a server such as the interpreter) or
  // "on-failure" (a template's start command, which E2B runs once: an exit 0
  // ends it for this boot and is no failure; its ready check goes on).
  bool restart_on_success = true;
};

// Parses one declaration. InvalidArgument naming what is wrong.
StatusOr<ServiceSpec> ParseServiceSpec(std::string_view json, std::string_view fallback_name);

// The declarations in `dir` (*.json, sorted by name); unreadable or invalid
// files are logged and skipped. A missing directory is no services.
std::vector<ServiceSpec> LoadServiceSpecs(const std::string& dir);

class ServiceSupervisor {
 public:
  ServiceSupervisor(Agent& agent, std::vector<ServiceSpec> specs);
  ~ServiceSupervisor();
  // Starts every service; hooks the process table's end notifications.
  void Start();
  // The wait before a restart, given how many times in a row it died young.
  static std::chrono::milliseconds Backoff(int quick_deaths);

 private:
  struct Running;
  void Launch(size_t index);
  void OnFinished(const std::string& tag, const envd::EndEvent& end);
  void PollReady(size_t index);
  void PollReadyLater(size_t index);  // PollReady after kReadyPollInterval
  // Starts `argv` as the service's user, in its cwd and env, tagged `tag`.
  StatusOr<std::shared_ptr<Process>> SpawnFor(const ServiceSpec& spec, const std::vector<std::string>& argv,
                                             const std::string& tag);
  void Announce(const std::string& line);

  Agent& agent_;
  std::vector<ServiceSpec> specs_;
  std::vector<std::unique_ptr<Running>> state_;
};

}  // namespace airlock::agent
