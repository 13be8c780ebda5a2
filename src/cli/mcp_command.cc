// `airlock mcp`: MCP over stdio for MCP clients that start a command (desktop
// assistants, IDE agents). A bridge to a running daemon's /mcp (streamable
// HTTP, src/server/mcp_service.cc), so the tools, their audit records and the
// key checks live in one place: each newline-delimited JSON-RPC message from
// stdin is POSTed to /mcp with the key (AIRLOCK_API_KEY, else
// <state dir>/cli.key) and the session from initialize; each answer is one
// line on stdout. Nothing else is ever written to stdout; diagnostics go to
// stderr.
//
// initialize is forwarded alone and answered before the next line is read;
// later requests run concurrently (a long run_command does not hold up a
// ping). A daemon that restarted (404 for the session) is re-initialized with
// the client's own initialize, and the request retried once. When the daemon
// cannot be reached, each request gets a JSON-RPC error (-32000) naming it.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "core/http_client.h"
#include "mcp/protocol.h"

namespace airlock::cli {

using nlohmann::json;

namespace {

constexpr int kMaxInFlight = 16;
constexpr auto kCallTimeout = std::chrono::hours(2);  // run_command may take an hour

class Bridge {
 public:
  explicit Bridge(DaemonTarget t) : t_(std::move(t)) {}

  void Run() {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json m = json::parse(line, nullptr, false);
      if (m.is_discarded()) {
        Emit(mcp::ErrorResponse(nullptr, mcp::kParseError, "parse error: a line on stdin is not JSON"));
        continue;
      }
      if (m.is_object() && m.value("method", "") == "initialize") {
        init_line_ = line;
        Forward(line, m, /*initialize=*/true);
        continue;
      }
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return in_flight_ < kMaxInFlight; });
        ++in_flight_;
      }
      // Detached: a long session would otherwise keep every finished
      // thread until the end; the in-flight count is what is waited for.
      std::thread([this, line, m] {
        Forward(line, m, false);
        std::lock_guard<std::mutex> l(mu_);
        --in_flight_;
        cv_.notify_all();
      }).detach();
    }
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return in_flight_ == 0; });
    }
    // The session ends with the client (stdin closed).
    std::string sid = Session();
    if (!sid.empty()) (void)Post("DELETE", "", sid);  // best effort: past its caps the daemon drops the oldest sessions
  }

 private:
  StatusOr<HttpReply> Post(const std::string& method, const std::string& body, const std::string& sid) {
    HttpCall call;
    call.host = t_.host;
    call.port = t_.port;
    call.method = method;
    call.target = "/mcp";
    call.headers = {{"X-API-Key", t_.api_key},
                    {"Content-Type", "application/json"},
                    {"Accept", "application/json, text/event-stream"}};
    if (!sid.empty()) call.headers.push_back({"Mcp-Session-Id", sid});
    call.body = body;
    call.timeout = kCallTimeout;
    call.max_body = 64u << 20;
    return HttpDo(call);
  }

  std::string Session() {
    std::lock_guard<std::mutex> l(mu_);
    return session_;
  }

  void Forward(const std::string& line, const json& m, bool initialize) {
    const bool request = mcp::IsRequest(m);
    const json id = m.is_object() && m.contains("id") ? m["id"] : json(nullptr);
    std::string sid = initialize ? "" : Session();
    auto r = Post("POST", line, sid);
    if (r.ok() && r->status == 404 && !initialize && !init_line_.empty()) {
      // The daemon forgot the session (it restarted): open a new one and retry.
      auto again = Post("POST", init_line_, "");
      if (again.ok() && again->status == 200) {
        sid = again->Header("mcp-session-id");
        {
          std::lock_guard<std::mutex> l(mu_);
          session_ = sid;
        }
        (void)Post("POST", json{{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}.dump(), sid);
      }
      r = Post("POST", line, sid);
    }
    if (!r.ok()) {
      std::fprintf(stderr, "airlock mcp: %s\n", r.status().message().c_str());
      if (request)
        Emit(mcp::ErrorResponse(id, -32000, "the airlock daemon at " + t_.host + ":" + std::to_string(t_.port) +
                                                " did not answer: " + r.status().message()));
      return;
    }
    if (initialize && r->status == 200) {
      std::lock_guard<std::mutex> l(mu_);
      session_ = r->Header("mcp-session-id");
    }
    if (r->status == 202) return;
    json answer = json::parse(r->body, nullptr, false);
    if (r->status == 200 && !answer.is_discarded()) return Emit(answer);
    if (answer.is_object() && answer.contains("jsonrpc")) return Emit(answer);  // a JSON-RPC error with a 4xx
    std::string message = answer.is_object() ? answer.value("message", r->body) : r->body.substr(0, 300);
    std::fprintf(stderr, "airlock mcp: HTTP %d: %s\n", r->status, message.c_str());
    if (request) Emit(mcp::ErrorResponse(id, -32000, "HTTP " + std::to_string(r->status) + ": " + message));
  }

  void Emit(const json& j) {
    std::string out = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::lock_guard<std::mutex> l(out_mu_);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }

  DaemonTarget t_;
  std::string init_line_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  std::string session_;  // guarded by mu_
  std::mutex out_mu_;
};

}  // namespace

int CmdMcp(const std::string& state_dir, const std::vector<std::string>& args) {
  std::string server;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--server" && i + 1 < args.size()) {
      server = args[++i];
    } else if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(
          "usage: airlock mcp [--server HOST:PORT]\n"
          "MCP over stdio, bridged to a running daemon's /mcp. The daemon: --server, else AIRLOCK_SERVER, else\n"
          "E2B_API_URL (as the E2B SDKs), else 127.0.0.1:3000. The key: AIRLOCK_API_KEY, else E2B_API_KEY with\n"
          "E2B_API_URL, else <state dir>/cli.key. docs/mcp.md has client configs.\n",
          stdout);
      return 0;
    } else {
      std::fprintf(stderr, "airlock mcp: unknown argument %s (see --help)\n", args[i].c_str());
      return 2;
    }
  }
  DaemonTarget t = ResolveDaemon(state_dir, server);
  if (t.api_key.empty()) {
    std::fprintf(stderr, "airlock mcp: no API key: set AIRLOCK_API_KEY, or run as a user who can read %s/cli.key\n",
                 state_dir.c_str());
    return 2;
  }
  Bridge(std::move(t)).Run();
  return 0;
}

}  // namespace airlock::cli
