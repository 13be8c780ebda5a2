// A test daemon (`airlock serve` on a free port, temp registry/audit/secrets
// beside --db, the real state dir for images) and data-plane helpers, for the
// audit, secrets and limits integration tests.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/subprocess.h"
#include "core/http_client.h"
#include "envd/envelope.h"
#include "envd/proto_json.h"
#include "tests/integration/harness.h"

namespace airlock::testing {

inline uint16_t FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class TestDaemon {
 public:
  // stderr goes to <dir>/daemon.log. kill_on_exit false: its sandboxes
  // outlive it, for the next daemon on `dir` to adopt. port 0: a free one.
  // env: added to its environment (test hooks such as AIRLOCK_TEST_HOLD_ROLLBACK).
  TestDaemon(std::string dir, std::vector<std::string> extra = {}, bool kill_on_exit = true, uint16_t port = 0,
             const std::map<std::string, std::string>& env = {})
      : dir_(std::move(dir)), port_(port ? port : FreeTcpPort()) {
    SpawnOptions so;
    so.argv = {AirlockBin(), "--state-dir",        StateDir(),
               "serve",      "--listen",           "127.0.0.1:" + std::to_string(port_),
               "--db",       dir_ + "/airlock.db", "--runtime", RuntimeName()};
    if (kill_on_exit) so.argv.push_back("--kill-on-exit");
    // No warm pool unless a test asks for one (parked guests share the CPU with every test).
    if (std::find(extra.begin(), extra.end(), "--pool") == extra.end()) so.argv.insert(so.argv.end(), {"--pool", "0"});
    so.argv.insert(so.argv.end(), extra.begin(), extra.end());
    so.stdout_to_devnull = true;
    log_fd_ = ::open((dir_ + "/daemon.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    so.stderr_fd = log_fd_;
    so.env = std::map<std::string, std::string>{{"AIRLOCK_LOG", "debug"}, {"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}};
    for (const auto& [k, v] : env) (*so.env)[k] = v;
    auto c = Spawn(so);
    if (c.ok()) child_ = std::move(c).value();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = Do("GET", "/health", "", false);
      if (r.ok() && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::ifstream f(dir_ + "/cli.key");
    std::getline(f, key_);
  }
  ~TestDaemon() {
    if (child_.running()) {
      (void)child_.Signal(SIGTERM);
      (void)child_.WaitFor(std::chrono::seconds(120));
    }
    if (log_fd_ >= 0) ::close(log_fd_);
  }
  uint16_t port() const { return port_; }
  const std::string& key() const { return key_; }
  const std::string& dir() const { return dir_; }
  pid_t pid() const { return child_.pid(); }
  // A daemon that dies without cleaning up (its sandboxes stay).
  void Kill9() {
    (void)child_.Signal(SIGKILL);
    (void)child_.Wait();
  }
  // The data plane of sandbox `id` (agent port); empty token: none sent.
  StatusOr<HttpReply> Data(const std::string& id, const std::string& token, const std::string& method,
                           const std::string& target, const std::string& body = "") const {
    std::vector<std::pair<std::string, std::string>> h = {{"E2b-Sandbox-Id", id}};
    if (!token.empty()) h.push_back({"X-Access-Token", token});
    if (!body.empty()) h.push_back({"Content-Type", "application/octet-stream"});
    return Do(method, target, body, false, h);
  }
  StatusOr<HttpReply> Data(const std::string& id, const std::string& token, const std::string& target) const {
    return Data(id, token, "GET", target);
  }

  StatusOr<HttpReply> Do(const std::string& method, const std::string& target, const std::string& body = "",
                         bool with_key = true, std::vector<std::pair<std::string, std::string>> headers = {},
                         const std::string& key = "") const {
    HttpCall c;
    c.host = "127.0.0.1";
    c.port = port_;
    c.method = method;
    c.target = target;
    c.body = body;
    c.headers = std::move(headers);
    if (with_key) c.headers.push_back({"X-API-Key", key.empty() ? key_ : key});
    if (!body.empty() && c.headers.end() == std::find_if(c.headers.begin(), c.headers.end(),
                                                         [](auto& h) { return h.first == "Content-Type"; })) {
      c.headers.push_back({"Content-Type", "application/json"});
    }
    c.timeout = std::chrono::seconds(180);
    return HttpDo(c);
  }

  struct Exec {
    int exit_code = -1;
    std::string signal;
    std::string out, err;
    bool ended = false;  // an end event came
    Status end_of_stream;  // the stream's end-of-stream error, if any
  };
  // process.Process/Start through the data plane; `timeout_ms` > 0 sets
  // Connect-Timeout-Ms (the agent kills the process group when it elapses
  // and ends the stream with deadline_exceeded, no end event, as envd).
  StatusOr<Exec> Run(const std::string& id, const std::string& token, const std::string& script, int timeout_ms = 0,
                     const std::string& user = "") const {
    nlohmann::json req = {{"process", {{"cmd", "/bin/bash"}, {"args", {"-c", script}}}}, {"stdin", false}};
    std::vector<std::pair<std::string, std::string>> h = {{"E2b-Sandbox-Id", id},
                                                          {"X-Access-Token", token},
                                                          {"Content-Type", "application/connect+json"},
                                                          {"Connect-Protocol-Version", "1"}};
    if (timeout_ms > 0) h.push_back({"Connect-Timeout-Ms", std::to_string(timeout_ms)});
    if (!user.empty()) h.push_back({"Authorization", "Basic " + envd::Base64Encode(user + ":")});
    ASSIGN_OR_RETURN(auto r, Do("POST", "/process.Process/Start", envd::EncodeEnvelope(req.dump()), false, h));
    if (r.status != 200) return Internal("start: HTTP " + std::to_string(r.status) + " " + r.body);
    envd::EnvelopeDecoder dec;
    RETURN_IF_ERROR(dec.Feed(r.body));
    Exec e;
    while (auto env = dec.Next()) {
      if (env->end_stream()) {
        e.end_of_stream = envd::ParseEndStream(env->payload);
        continue;
      }
      auto j = nlohmann::json::parse(env->payload, nullptr, false);
      if (!j.is_object() || !j.contains("event")) continue;
      auto& ev = j["event"];
      if (ev.contains("data")) {
        for (const char* s : {"stdout", "stderr"}) {
          if (ev["data"].contains(s)) {
            auto b = envd::Base64Decode(ev["data"][s].get<std::string>());
            if (b.ok()) (std::string(s) == "stdout" ? e.out : e.err) += *b;
          }
        }
      }
      if (ev.contains("end")) {
        e.ended = true;
        auto& end = ev["end"];
        std::string status = end.value("status", "");
        if (status.rfind("signal: ", 0) == 0) e.signal = status.substr(8);
        e.exit_code = end.contains("exitCode") ? end["exitCode"].get<int>() : 0;
      }
    }
    return e;
  }

 private:
  std::string dir_;
  uint16_t port_;
  std::string key_;
  int log_fd_ = -1;
  Child child_;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// POST /v2/sandboxes with `body`; the created sandbox's JSON, or an error
// naming the status and body when it is not 201.
inline StatusOr<nlohmann::json> CreateSandbox(const TestDaemon& d, const nlohmann::json& body) {
  ASSIGN_OR_RETURN(auto r, d.Do("POST", "/v2/sandboxes", body.dump()));
  if (r.status != 201) return Internal("create: " + std::to_string(r.status) + " " + r.body);
  return nlohmann::json::parse(r.body);
}

}  // namespace airlock::testing
