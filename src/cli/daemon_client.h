// Blocking client of a running daemon, shared by `airlock sandbox ...` and the
// daemon path of `airlock run`. Control-plane calls carry X-API-Key; data-
// plane calls carry E2b-Sandbox-Id and the sandbox's X-Access-Token.
// Errors: NotFound for 404, Unknown "HTTP <status>: <message>" for other
// non-2xx answers, Unavailable for transport failures.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "core/http_client.h"

namespace airlock::cli {

StatusOr<HttpReply> DaemonApi(const DaemonTarget& t, const std::string& method, const std::string& target,
                              const std::string& body = "");

struct DaemonSandbox {
  std::string id;
  std::string token;
};
// POST /v2/sandboxes; `timeout_s` 0: the daemon's default.
// `extra`: more top-level fields of the body (e.g. network, allow_internet_access).
StatusOr<DaemonSandbox> DaemonCreate(const DaemonTarget& t, const std::string& template_name, int timeout_s,
                                     const std::map<std::string, std::string>& env_vars = {},
                                     const nlohmann::json& extra = nlohmann::json::object());
// GET /sandboxes/{id} → its envdAccessToken.
StatusOr<std::string> DaemonToken(const DaemonTarget& t, const std::string& id);

struct DaemonExecSpec {
  std::vector<std::string> argv;  // argv[0] is the program
  std::map<std::string, std::string> envs;
  std::string cwd;   // empty: the user's home
  std::string user;  // empty: the sandbox's default user
  int timeout_s = 0; // 0: no limit
};
// process.Process/Start; stdout/stderr are copied to ours as they arrive.
// Returns the shell-style exit code (128+N when killed by signal N).
StatusOr<int> DaemonExec(const DaemonTarget& t, const DaemonSandbox& sb, const DaemonExecSpec& spec);
// POST /files?path=guest (octet-stream, streamed from disk) / a guest file
// or directory tree copied to `local` (files streamed to disk; EnvdClient::
// Download), both through the daemon's data plane.
Status DaemonUpload(const DaemonTarget& t, const DaemonSandbox& sb, const std::string& local, const std::string& guest);
Status DaemonDownload(const DaemonTarget& t, const DaemonSandbox& sb, const std::string& guest,
                      const std::string& local);

}  // namespace airlock::cli
