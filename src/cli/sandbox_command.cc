// `airlock sandbox ...`: a client of the daemon's HTTP API (control plane
// with X-API-Key; exec and cp through the data plane with the sandbox's
// envdAccessToken and E2b-Sandbox-Id routing headers).
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "core/http_client.h"
#include "envd/envelope.h"
#include "envd/messages.h"

namespace airlock::cli {

using nlohmann::json;
namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

DaemonTarget ResolveDaemon(const std::string& state_dir, const std::string& server_flag) {
  DaemonTarget t{"127.0.0.1", 3000, ""};
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  // The address: --server, else $AIRLOCK_SERVER, else $E2B_API_URL as the
  // E2B SDKs read it (http://host:port: the daemon serves the API and the
  // data plane on one port). One that cannot be used is said, not skipped
  // quietly.
  std::string addr = server_flag, from = "--server";
  if (addr.empty()) addr = env((from = "AIRLOCK_SERVER").c_str());
  if (addr.empty()) addr = env((from = "E2B_API_URL").c_str());
  bool e2b_pair = false;
  if (addr.rfind("https://", 0) == 0) {
    std::fprintf(stderr, "airlock: %s=%s: this client speaks plain HTTP; using %s:%u\n", from.c_str(), addr.c_str(),
                 t.host.c_str(), t.port);
  } else if (!addr.empty()) {
    if (auto hp = ParseHostPort(addr); hp.ok()) {
      t.host = hp->first;
      t.port = hp->second;
      e2b_pair = from == "E2B_API_URL";
    } else {
      std::fprintf(stderr, "airlock: %s: %s; using %s:%u\n", from.c_str(), hp.status().message().c_str(),
                   t.host.c_str(), t.port);
    }
  }
  // The key: $AIRLOCK_API_KEY; $E2B_API_KEY only with the $E2B_API_URL it
  // belongs to (never an E2B key sent to some other daemon); else the admin
  // key `airlock serve` wrote beside its database.
  if (std::string k = env("AIRLOCK_API_KEY"); !k.empty()) {
    t.api_key = k;
  } else if (k = env("E2B_API_KEY"); e2b_pair && !k.empty()) {
    t.api_key = k;
  } else if (std::ifstream f(state_dir + "/cli.key"); f) {
    std::getline(f, t.api_key);
  }
  return t;
}

bool DaemonAnswers(const DaemonTarget& t) {
  HttpCall call;
  call.host = t.host;
  call.port = t.port;
  call.target = "/health";
  call.timeout = std::chrono::milliseconds(300);
  call.max_body = 4096;
  auto r = HttpDo(call);
  return r.ok() && r->status == 200;
}

namespace {

StatusOr<HttpReply> Api(const DaemonTarget& t, const std::string& method, const std::string& target,
                        const std::string& body = "") {
  return DaemonApi(t, method, target, body);
}

int Fail(const char* what, const Status& st) {
  std::fprintf(stderr, "airlock sandbox %s: %s\n", what, st.message().c_str());
  return 1;
}

// cp: "ID:/guest/path" on one side, a host path on the other.
int Copy(const DaemonTarget& t, const std::string& src, const std::string& dst) {
  auto split = [](const std::string& s, std::string* id, std::string* path) {
    size_t colon = s.find(':');
    if (colon == std::string::npos || colon == 0 || s[0] == '/' || s[0] == '.') return false;
    *id = s.substr(0, colon);
    *path = s.substr(colon + 1);
    return true;
  };
  std::string id, guest;
  bool upload = split(dst, &id, &guest);
  if (!upload && !split(src, &id, &guest)) {
    std::fprintf(stderr, "airlock sandbox cp: one side must be ID:/guest/path\n");
    return 2;
  }
  auto token = DaemonToken(t, id);
  if (!token.ok()) return Fail("cp", token.status());
  DaemonSandbox sb{id, *token};
  Status st = upload ? DaemonUpload(t, sb, src, guest) : DaemonDownload(t, sb, guest, dst);
  if (!st.ok()) return Fail("cp", st);
  return 0;
}

// checkpoint ID | checkpoint ls ID | checkpoint rm ID CKPT | rollback ID CKPT
// (docs/snapshots.md "Checkpoints and rollback").
int Checkpoints(const DaemonTarget& t, const std::vector<std::string>& args, const char* usage) {
  auto base = [](const std::string& id) { return "/sandboxes/" + UrlEncodeComponent(id); };
  if (args[0] == "rollback" && args.size() == 3) {
    auto r = Api(t, "POST", base(args[1]) + "/rollback", json{{"checkpointID", args[2]}}.dump());
    if (!r.ok()) return Fail("rollback", r.status());
    auto j = json::parse(r->body, nullptr, false);
    double ms =
        j.is_object() && j.contains("rollbackMs") && j["rollbackMs"].is_number() ? j["rollbackMs"].get<double>() : 0;
    std::printf("%s rolled back to %s in %.0f ms\n", args[1].c_str(), args[2].c_str(), ms);
    return 0;
  }
  if (args[0] == "checkpoint" && args.size() == 2) {
    auto r = Api(t, "POST", base(args[1]) + "/checkpoints", "{}");
    if (!r.ok()) return Fail("checkpoint", r.status());
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object()) return Fail("checkpoint", Internal("bad reply: " + r->body));
    std::printf("%s\n", j.value("checkpointID", "").c_str());
    return 0;
  }
  if (args[0] == "checkpoint" && args.size() == 3 && args[1] == "ls") {
    auto r = Api(t, "GET", base(args[2]) + "/checkpoints");
    if (!r.ok()) return Fail("checkpoint ls", r.status());
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%-22s %-26s %12s %12s\n", "CHECKPOINT", "CREATED AT", "MEMORY B", "DISK B");
    if (j.is_array()) {
      for (auto& c : j) {
        std::printf("%-22s %-26s %12llu %12llu\n", c.value("checkpointID", "").c_str(),
                    c.value("createdAt", "").c_str(),
                    static_cast<unsigned long long>(c.value("memoryBytes", uint64_t{0})),
                    static_cast<unsigned long long>(c.value("diskBytes", uint64_t{0})));
      }
    }
    return 0;
  }
  if (args[0] == "checkpoint" && args.size() == 4 && args[1] == "rm") {
    auto r = Api(t, "DELETE", base(args[2]) + "/checkpoints/" + UrlEncodeComponent(args[3]));
    if (!r.ok()) return Fail("checkpoint rm", r.status());
    return 0;
  }
  std::fputs(usage, stderr);
  return 2;
}

}  // namespace

int CmdSandbox(const std::string& state_dir, const std::vector<std::string>& in) {
  const char* usage =
      "usage: airlock sandbox [--server ADDR] ls | info ID | kill ID | exec ID -- CMD [ARGS...] |\n"
      "                        cp SRC DST (one side ID:/guest/path) | timeout ID SECONDS |\n"
      "                        log ID | network ID [--allow RULE]... [--deny RULE]... [--internet|--no-internet] |\n"
      "                        checkpoint ID | checkpoint ls ID | checkpoint rm ID CHECKPOINT |\n"
      "                        rollback ID CHECKPOINT\n";
  std::vector<std::string> args = in;
  std::string server;
  if (args.size() >= 2 && args[0] == "--server") {
    server = args[1];
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  DaemonTarget t = ResolveDaemon(state_dir, server);
  const std::string& verb = args[0];
  if (verb == "ls") {
    auto r = Api(t, "GET", "/v2/sandboxes?limit=100");
    if (!r.ok()) return Fail("ls", r.status());
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%-22s %-24s %-8s %-8s %-26s %s\n", "ID", "TEMPLATE", "RUNTIME", "STATE", "ENDS AT", "METADATA");
    if (j.is_array()) {
      for (auto& s : j) {
        // "runtime": airlock's extension (a daemon before it: qemu, the only one then).
        std::printf("%-22s %-24s %-8s %-8s %-26s %s\n", s.value("sandboxID", "").c_str(),
                    s.value("templateID", "").c_str(), s.value("runtime", "qemu").c_str(), s.value("state", "").c_str(),
                    s.value("endAt", "").c_str(), s["metadata"].dump().c_str());
      }
    }
    return 0;
  }
  if (verb == "info" && args.size() == 2) {
    auto r = Api(t, "GET", "/sandboxes/" + UrlEncodeComponent(args[1]));
    if (!r.ok()) return Fail("info", r.status());
    auto j = json::parse(r->body, nullptr, false);
    std::printf("%s\n", j.is_discarded() ? r->body.c_str() : j.dump(2).c_str());
    return 0;
  }
  if (verb == "kill" && args.size() == 2) {
    auto r = Api(t, "DELETE", "/sandboxes/" + UrlEncodeComponent(args[1]));
    if (!r.ok()) return Fail("kill", r.status());
    return 0;
  }
  if (verb == "timeout" && args.size() == 3) {
    char* end = nullptr;
    long s = std::strtol(args[2].c_str(), &end, 10);
    if (*end != '\0' || s < 0) {
      std::fputs(usage, stderr);
      return 2;
    }
    auto r = Api(t, "POST", "/sandboxes/" + UrlEncodeComponent(args[1]) + "/timeout", json{{"timeout", s}}.dump());
    if (!r.ok()) return Fail("timeout", r.status());
    return 0;
  }
  if (verb == "exec" && args.size() >= 4 && args[2] == "--") {
    auto token = DaemonToken(t, args[1]);
    if (!token.ok()) return Fail("exec", token.status());
    DaemonExecSpec spec;
    spec.argv.assign(args.begin() + 3, args.end());
    auto code = DaemonExec(t, DaemonSandbox{args[1], *token}, spec);
    if (!code.ok()) return Fail("exec", code.status());
    return *code;
  }
  if (verb == "cp" && args.size() == 3) return Copy(t, args[1], args[2]);
  if (verb == "log" && args.size() == 2) {
    // The newest 1000 (the API's page), printed oldest first.
    auto r = Api(t, "GET", "/v2/sandboxes/" + UrlEncodeComponent(args[1]) + "/logs?direction=backward&limit=1000");
    if (!r.ok()) return Fail("log", r.status());
    auto j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("logs") || !j["logs"].is_array()) return Fail("log", Internal("bad logs reply"));
    for (auto e = j["logs"].rbegin(); e != j["logs"].rend(); ++e) {
      std::printf("%s %-5s %s\n", e->value("timestamp", "").c_str(), e->value("level", "").c_str(),
                  e->value("message", "").c_str());
    }
    return 0;
  }
  if (verb == "checkpoint" || verb == "rollback") return Checkpoints(t, args, usage);
  if (verb == "network" && args.size() >= 2) {
    json allow = json::array(), deny = json::array(), body = json::object();
    for (size_t i = 2; i < args.size(); ++i) {
      if ((args[i] == "--allow" || args[i] == "--deny") && i + 1 < args.size()) {
        (args[i] == "--allow" ? allow : deny).push_back(args[i + 1]);
        ++i;
      } else if (args[i] == "--internet" || args[i] == "--no-internet") {
        body["allow_internet_access"] = args[i] == "--internet";
      } else {
        std::fputs(usage, stderr);
        return 2;
      }
    }
    body["allowOut"] = allow;
    body["denyOut"] = deny;
    auto r = Api(t, "PUT", "/sandboxes/" + UrlEncodeComponent(args[1]) + "/network", body.dump());
    if (!r.ok()) return Fail("network", r.status());
    return 0;
  }
  std::fputs(usage, stderr);
  return 2;
}

}  // namespace airlock::cli
