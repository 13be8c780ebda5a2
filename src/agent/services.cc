#include "agent/services.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/agent.h"
#include "agent/log.h"
#include "agent/process_table.h"
#include "agent/users.h"

namespace airlock::agent {

namespace {
constexpr auto kYoung = std::chrono::seconds(60);
}  // namespace

std::string ServiceReadyLine(std::string_view name) {
  return "airlock-agent: service " + std::string(name) + " ready";
}
std::string ServiceFailedLine(std::string_view name) {
  return "airlock-agent: service " + std::string(name) + " ended before ready:";
}

struct ServiceSupervisor::Running {
  explicit Running(asio::io_context& io) : restart(io), ready_timer(io) {}
  asio::steady_timer restart;
  asio::steady_timer ready_timer;
  bool ready = false;          // its ready_cmd exited 0 once (this boot)
  bool ready_running = false;  // a ready_cmd is running now
  std::chrono::steady_clock::time_point started;
  int quick_deaths = 0;
  bool running = false;
};

StatusOr<ServiceSpec> ParseServiceSpec(std::string_view text, std::string_view fallback_name) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("service declaration is not a JSON object");
  ServiceSpec s;
  s.name = std::string(fallback_name);
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) return InvalidArgument("\"name\" must be a non-empty string");
    s.name = it->get<std::string>();
  }
  auto argv = j.find("argv");
  if (argv == j.end() || !argv->is_array() || argv->empty()) return InvalidArgument("\"argv\" must be a non-empty array");
  for (const auto& a : *argv) {
    if (!a.is_string()) return InvalidArgument("\"argv\" must hold strings");
    s.argv.push_back(a.get<std::string>());
  }
  if (s.argv[0].empty() || s.argv[0][0] != '/') return InvalidArgument("argv[0] must be an absolute path");
  for (const char* key : {"user", "cwd"}) {
    if (auto it = j.find(key); it != j.end()) {
      if (!it->is_string() || it->get<std::string>().empty()) {
        return InvalidArgument(std::string("\"") + key + "\" must be a non-empty string");
      }
      (std::string_view(key) == "user" ? s.user : s.cwd) = it->get<std::string>();
    }
  }
  if (auto it = j.find("ready_cmd"); it != j.end()) {
    if (!it->is_string()) return InvalidArgument("\"ready_cmd\" must be a string");
    s.ready_cmd = it->get<std::string>();
  }
  if (auto it = j.find("restart"); it != j.end()) {
    if (!it->is_string() || (*it != "always" && *it != "on-failure")) {
      return InvalidArgument("\"restart\" must be \"always\" or \"on-failure\"");
    }
    s.restart_on_success = *it == "always";
  }
  if (auto it = j.find("env"); it != j.end()) {
    if (!it->is_object()) return InvalidArgument("\"env\" must be an object of strings");
    for (const auto& [k, v] : it->items()) {
      if (k.empty() || k.find('=') != std::string::npos || !v.is_string()) {
        return InvalidArgument("\"env\" must be an object of strings with names without '='");
      }
      s.env[k] = v.get<std::string>();
    }
  }
  return s;
}

std::vector<ServiceSpec> LoadServiceSpecs(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::vector<ServiceSpec> out;
  for (const auto& n : names) {
    std::ifstream f(dir + "/" + n);
    std::stringstream ss;
    ss << f.rdbuf();
    auto spec = ParseServiceSpec(ss.str(), n.substr(0, n.size() - 5));
    if (!spec.ok()) {
      LogError("service %s/%s: %s (skipped)", dir.c_str(), n.c_str(), spec.status().message().c_str());
      continue;
    }
    out.push_back(*std::move(spec));
  }
  return out;
}

ServiceSupervisor::ServiceSupervisor(Agent& agent, std::vector<ServiceSpec> specs)
    : agent_(agent), specs_(std::move(specs)) {}

ServiceSupervisor::~ServiceSupervisor() = default;

std::chrono::milliseconds ServiceSupervisor::Backoff(int quick_deaths) {
  std::chrono::milliseconds d(1000);
  for (int i = 1; i < quick_deaths && d < std::chrono::seconds(30); ++i) d *= 2;
  return std::min<std::chrono::milliseconds>(d, std::chrono::seconds(30));
}

void ServiceSupervisor::Start() {
  if (specs_.empty()) return;
  for (size_t i = 0; i < specs_.size(); ++i) state_.push_back(std::make_unique<Running>(agent_.io()));
  agent_.processes().SetOnFinished(
      [this](pid_t, const std::optional<std::string>& tag, const envd::EndEvent& end) {
        if (tag && (tag->rfind(kServiceTagPrefix, 0) == 0 || tag->rfind(kServiceReadyTagPrefix, 0) == 0))
          OnFinished(*tag, end);
      });
  for (size_t i = 0; i < specs_.size(); ++i) Launch(i);
}

void ServiceSupervisor::Launch(size_t i) {
  const ServiceSpec& spec = specs_[i];
  Running& st = *state_[i];
  auto retry = [this, i, &st](const Status& why) {
    LogError("service %s: %s", specs_[i].name.c_str(), why.ToString().c_str());
    ++st.quick_deaths;
    st.restart.expires_after(Backoff(st.quick_deaths));
    st.restart.async_wait([this, i](boost::system::error_code ec) {
      if (!ec) Launch(i);
    });
  };
  auto proc = SpawnFor(spec, spec.argv, std::string(kServiceTagPrefix) + spec.name);
  if (!proc.ok()) return retry(proc.status());
  st.running = true;
  st.started = std::chrono::steady_clock::now();
  LogInfo("service %s started (pid %d)", spec.name.c_str(), (*proc)->pid());
  if (!spec.ready_cmd.empty() && !st.ready && !st.ready_running) PollReady(i);
}

void ServiceSupervisor::Announce(const std::string& line) {
  LogInfo("%s", line.c_str());
  int fd = ::open(kServiceConsole, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_APPEND);
  if (fd < 0) return LogError("open %s: %s", kServiceConsole, std::strerror(errno));
  std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    LogError("write %s: %s", kServiceConsole, std::strerror(errno));
  ::close(fd);
}

void ServiceSupervisor::PollReady(size_t i) {
  const ServiceSpec& spec = specs_[i];
  Running& st = *state_[i];
  if (st.ready) return;
  auto proc = SpawnFor(spec, {"/bin/bash", "-l", "-c", spec.ready_cmd}, std::string(kServiceReadyTagPrefix) + spec.name);
  if (!proc.ok()) {
    LogError("service %s: ready check: %s", spec.name.c_str(), proc.status().ToString().c_str());
    return PollReadyLater(i);
  }
  st.ready_running = true;
}

void ServiceSupervisor::PollReadyLater(size_t i) {
  Running& st = *state_[i];
  st.ready_timer.expires_after(kReadyPollInterval);
  st.ready_timer.async_wait([this, i](boost::system::error_code ec) {
    if (!ec) PollReady(i);
  });
}

StatusOr<std::shared_ptr<Process>> ServiceSupervisor::SpawnFor(const ServiceSpec& spec,
                                                               const std::vector<std::string>& argv,
                                                               const std::string& tag) {
  auto user = agent_.LoadUsers().Lookup(spec.user);
  if (!user.ok()) return user.status();
  SpawnRequest sp = agent_.SpawnAs(*user);
  for (const auto& [k, v] : spec.env) sp.env[k] = v;
  sp.cwd = spec.cwd;
  sp.start.process.cmd = argv[0];
  sp.start.process.args.assign(argv.begin() + 1, argv.end());
  sp.start.tag = tag;
  return agent_.processes().Spawn(std::move(sp));
}

void ServiceSupervisor::OnFinished(const std::string& tag, const envd::EndEvent& end) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (tag == kServiceReadyTagPrefix + specs_[i].name) {
      Running& st = *state_[i];
      st.ready_running = false;
      if (end.exited && end.exit_code == 0) {
        st.ready = true;
        Announce(ServiceReadyLine(specs_[i].name));
        return;
      }
      return PollReadyLater(i);
    }
    if (tag != kServiceTagPrefix + specs_[i].name) continue;
    Running& st = *state_[i];
    if (!st.running) return;
    st.running = false;
    const bool succeeded = end.exited && end.exit_code == 0;
    if (!specs_[i].restart_on_success && succeeded) {
      // A start command that did its work (E2B runs it once): not restarted,
      // and not a failure; its ready check goes on.
      LogInfo("service %s finished (exit 0); not restarted", specs_[i].name.c_str());
      return;
    }
    if (!specs_[i].ready_cmd.empty() && !st.ready) Announce(ServiceFailedLine(specs_[i].name) + " " + end.status);
    bool young = std::chrono::steady_clock::now() - st.started < kYoung;
    st.quick_deaths = young ? st.quick_deaths + 1 : 1;
    auto wait = Backoff(st.quick_deaths);
    LogError("service %s ended; restarting in %lld ms", specs_[i].name.c_str(), static_cast<long long>(wait.count()));
    st.restart.expires_after(wait);
    st.restart.async_wait([this, i](boost::system::error_code ec) {
      if (!ec) Launch(i);
    });
    return;
  }
}

}  // namespace airlock::agent
