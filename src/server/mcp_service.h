// McpService: MCP's streamable HTTP transport at /mcp (docs/mcp.md; spec
// revision 2025-06-18 "Transports"): the sessions, the tool-call pool and its
// per-team admission. Server owns one and hands it every /mcp request once
// the key is checked, like any control-plane call (Router::HandleControl;
// the key is X-API-Key or "Authorization: Bearer <key>", PresentedApiKey).
//
//   POST /mcp    one JSON-RPC message (or a batch, 2025-03-26): 200
//                application/json with the response(s); 202 when it held
//                only notifications or responses. initialize opens a session
//                (Mcp-Session-Id in the answer); every later POST must carry
//                it (400 without, 404 for one unknown or of another key).
//   GET /mcp     405: the server starts no streams of its own.
//   DELETE /mcp  ends the session (204).
// A request with an Origin header is refused (403) unless that origin is
// one the daemon was configured as (--listen, --public-url: mcp/origin.h),
// as the spec asks of servers (DNS rebinding). It is never compared with
// the request's Host, which a rebinding page sets too.
//
// Tool calls run on their own thread pool (a command may run for an hour)
// and act through this daemon's own API (or --mcp-api's) with the caller's
// key (mcp/tools.h). Each call is audited as mcp.tool_call with the client's
// name from initialize; sessions are memory only (at most
// kMaxSessionsPerKey per key and kMaxSessions in all, the least recently
// used dropped first). A team (all its keys together) holds at most
// calls_per_team requests, running or waiting (more: 429 at once); when
// every thread is busy, waiting teams take turns (mcp/call_queue.h).
//
// Threads: Handle runs on the connection's io thread and answers on it; the
// tools run on the service's pool, which posts each answer back to the
// connection's executor. The session table is guarded by a mutex.
// Shutdown() (also the destructor) lets the pool's threads go instead of
// waiting for them (a tool call blocks on an API that no longer answers):
// a call that ends later drops its answer and its audit record, and never
// touches the service again.
//
// Errors: Create and Check return InvalidArgument for a pool and per-team
// cap FairCallQueue refuses, or --mcp-api's parse error. Handle answers
// every error itself: HTTP 400/403/404/405/413/429/500, a JSON-RPC error
// object where the transport asks for one.
#pragma once

#include <boost/asio/thread_pool.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "mcp/call_queue.h"
#include "mcp/origin.h"
#include "mcp/protocol.h"
#include "mcp/tools.h"
#include "control/caller.h"
#include "server/http_conn.h"

namespace airlock::server {

using control::Caller;

class McpService {
 public:
  struct Config {
    std::string listen;          // serve --listen ("host:port"): the API's host and the allowed origins
    uint16_t port = 0;           // the port the API's listener bound
    std::string public_url;      // serve --public-url: one more allowed origin ("" none)
    std::string api;             // serve --mcp-api ("host:port"); "" this daemon's port on loopback
    int threads = 16;            // serve --mcp-threads (the pool has at least 3)
    int calls_per_team = 0;      // serve --mcp-calls-per-team (0: FairCallQueue::DefaultPerTeam)
    std::string server_version;  // serverInfo.version in initialize's answer
  };
  // Appends a record to the audit trail (thread-safe).
  using AuditFn = std::function<void(nlohmann::json)>;

  // OK, or the InvalidArgument Create would return for these numbers (the
  // daemon checks them before it opens anything).
  static Status Check(int threads, int calls_per_team);
  // Starts the pool. Errors: Check's, or --mcp-api's parse error.
  static StatusOr<std::unique_ptr<McpService>> Create(Config config, AuditFn audit);
  ~McpService();  // Shutdown()
  McpService(const McpService&) = delete;
  McpService& operator=(const McpService&) = delete;

  // One request to /mcp from `caller`; `key`: the API key it presented,
  // which the tools act with. Io thread.
  void Handle(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& key);
  // From now on no tool call touches the service or answers; the pool is
  // stopped and let go, never joined. Idempotent (~Server calls it, then
  // the destructor does); not concurrently with itself.
  void Shutdown();

 private:
  static constexpr size_t kMaxSessions = 1024;
  static constexpr size_t kMaxSessionsPerKey = 64;
  struct Session {
    mcp::SessionState state;
    std::string key_id;  // the key that opened it; no other key may use it
    int64_t last_used_ms = 0;
  };
  // Shared with every tool call: alive is false once Shutdown began, and a
  // late call then drops its answer.
  struct Life {
    std::mutex mu;
    bool alive = true;
  };

  // One POST's tool-call job, run on a worker.
  struct CallJob {
    std::shared_ptr<HttpConn> c;
    Caller caller;
    mcp::ApiAccess access;  // api_ with the caller's key
    std::string sid;
    std::string server_version;
    nlohmann::json message;  // an object, or a batch (array)
    std::string peer;
  };

  McpService(mcp::ApiAccess api, mcp::AllowedOrigins origins, std::string server_version, AuditFn audit);

  // DELETE /mcp: ends the caller's key's session `session_id` (404 when it
  // is none of that key's).
  void EndSession(const std::shared_ptr<HttpConn>& c, const Caller& caller, const std::string& session_id);
  // The session a POST runs in: a new one for initialize (the key's oldest
  // session, then the oldest of all, make room past the caps), else
  // `session_id` of the caller's key, touched. nullopt: answered here (400,
  // 404, 500).
  std::optional<std::string> SessionFor(const std::shared_ptr<HttpConn>& c, const Caller& caller,
                                        const std::string& session_id, bool is_initialize);
  // A POST's message in session `sid`: 202 when it holds no request, else
  // one job on the caller's team's share of the pool (429 when it is full).
  void Dispatch(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& key, const std::string& sid,
                nlohmann::json message);
  // The job, on a worker: every message through mcp::HandleMessage, each
  // tool call and initialize audited, the answers posted to the connection.
  // Static: `self` is touched only under life->mu while life->alive (the
  // pool may outlive the service, Shutdown).
  static void RunCalls(McpService* self, const std::shared_ptr<Life>& life, CallJob job,
                       const std::function<void()>& finish);

  const mcp::ApiAccess api_;           // where the tools call (its api_key set per call)
  const mcp::AllowedOrigins origins_;  // browser origins /mcp accepts
  const std::string server_version_;
  const AuditFn audit_;
  std::unique_ptr<asio::thread_pool> workers_;  // tool calls (blocking, possibly long)
  std::shared_ptr<mcp::FairCallQueue> calls_;   // admission per team onto workers_
  std::mutex mu_;
  std::map<std::string, Session> sessions_;  // guarded by mu_
  std::shared_ptr<Life> life_ = std::make_shared<Life>();
};

}  // namespace airlock::server
