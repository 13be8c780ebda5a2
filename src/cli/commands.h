// The daemon-related verbs of the CLI (serve_command.cc, apikey_command.cc,
// sandbox_command.cc). Each returns the process exit code: 0 success, 1 the
// operation failed, 2 usage error.
#pragma once

#include <string>
#include <vector>

namespace airlock::cli {

// airlock serve [--listen ADDR] [--max-timeout S] ...: runs the daemon.
int CmdServe(const std::string& state_dir, const std::string& agent_binary, const std::vector<std::string>& args);
// airlock apikey create --name N | ls | rm ID|NAME (local SQLite, root).
int CmdApiKey(const std::string& state_dir, const std::vector<std::string>& args);
// airlock sandbox ls | info ID | kill ID | exec ID -- CMD | cp SRC DST | timeout ID S
int CmdSandbox(const std::string& state_dir, const std::vector<std::string>& args);

// airlock audit [verify] [--sandbox ID] [--since T] (reads the trail on disk).
int CmdAudit(const std::string& state_dir, const std::vector<std::string>& args);
// airlock secret set NAME (value on stdin) | ls | rm NAME (local store, root).
int CmdSecret(const std::string& state_dir, const std::vector<std::string>& args);
// airlock cluster certs --out DIR [--node N[,IP...]]... [--front N]... [--both N[,IP...]]... [--days N]
// (cluster_command.cc): a dev CA and certificates for the cluster's mutual TLS.
int CmdCluster(const std::string& state_dir, const std::vector<std::string>& args);
// airlock template ls | build NAME -f Dockerfile | rm NAME | logs NAME
// (template_command.cc; a client of a running daemon).
// `airlock mcp`: MCP over stdio, bridged to a daemon's /mcp (mcp_command.cc).
int CmdMcp(const std::string& state_dir, const std::vector<std::string>& args);
int CmdTemplate(const std::string& state_dir, const std::vector<std::string>& args);
// Takes "--db PATH" out of `args` (into *db, which holds the default) and
// returns the rest, in order.
std::vector<std::string> TakeDbFlag(const std::vector<std::string>& args, std::string* db);

// The daemon's address (--server, $AIRLOCK_SERVER, $E2B_API_URL, default
// 127.0.0.1:3000) and API key ($AIRLOCK_API_KEY; $E2B_API_KEY when the
// address is $E2B_API_URL's; else <state_dir>/cli.key). An address that
// cannot be used is reported on stderr and the default taken.
struct DaemonTarget {
  std::string host;
  uint16_t port = 3000;
  std::string api_key;
};
DaemonTarget ResolveDaemon(const std::string& state_dir, const std::string& server_flag);
// True when a daemon answers GET /health at `t` within ~300 ms.
bool DaemonAnswers(const DaemonTarget& t);

}  // namespace airlock::cli
