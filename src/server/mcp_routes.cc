// MCP's streamable HTTP transport at /mcp (docs/mcp.md; spec revision
// 2025-06-18 "Transports"). The key is X-API-Key or "Authorization: Bearer
// <key>", checked like any control-plane call (HandleControl).
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
// and act through this daemon's own API with the caller's key (mcp/tools.h).
// Each call is audited as mcp.tool_call with the client's name from
// initialize; sessions are memory only (at most kMaxMcpSessionsPerKey per
// key and kMaxMcpSessions in all, the least recently used dropped first).
// A team (all its keys together) holds at most mcp_calls_->per_team()
// requests, running or waiting (more: 429 at once); when every thread is
// busy, waiting teams take turns (mcp/call_queue.h).
#include <openssl/rand.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "mcp/protocol.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

constexpr size_t kMaxMcpBody = 16u << 20;  // write_file takes up to 10 MiB, base64 in JSON

std::string NewSessionId() {
  unsigned char raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) return "";
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned char b : raw) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

}  // namespace

std::string PresentedApiKey(const HttpConn& c, bool allow_bearer) {
  std::string key = c.Header("X-API-Key");
  if (key.empty() && allow_bearer) {
    std::string auth = c.Header("Authorization");
    if (auth.size() > 7 && (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0)) key = auth.substr(7);
  }
  return key;
}

void Server::HandleMcp(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& key) {
  if (std::string origin = c->Header("Origin"); !origin.empty() && !mcp_origins_.Allows(origin))
    return c->RespondError(403, "MCP requests from origin " + origin.substr(0, 256) +
                                    " are refused (allowed: this server's --listen address and --public-url)");
  const std::string session_id = c->Header("Mcp-Session-Id");
  if (c->method() == http::Method::kGet)
    return c->RespondError(405, "this server sends no stream of its own; POST JSON-RPC messages",
                           {{"Allow", "POST, DELETE"}});
  if (c->method() == http::Method::kDelete) {
    std::lock_guard<std::mutex> l(mcp_mu_);
    auto it = mcp_sessions_.find(session_id);
    if (it == mcp_sessions_.end() || it->second.key_id != caller.key_id)
      return c->RespondError(404, "no such MCP session");
    mcp_sessions_.erase(it);
    return c->Respond(204, "", "");
  }
  if (c->method() != http::Method::kPost) return c->RespondError(405, "method not allowed", {{"Allow", "POST, DELETE"}});
  c->ReadBodyToString(kMaxMcpBody, [this, c, caller, key, session_id](StatusOr<std::string> body) {
    if (!body.ok()) return c->RespondError(413, body.status().message());
    json message = json::parse(*body, nullptr, false);
    if (message.is_discarded())
      return c->Respond(400, "application/json", mcp::ErrorResponse(nullptr, mcp::kParseError, "parse error: the body is not JSON").dump());
    const bool is_initialize =
        message.is_object() && message.value("method", "") == "initialize" && message.contains("id");
    std::string sid = session_id;
    if (is_initialize) {
      sid = NewSessionId();
      if (sid.empty()) return c->RespondError(500, "no randomness for a session id");
      std::lock_guard<std::mutex> l(mcp_mu_);
      // A key that opens too many sessions loses its own oldest; the global
      // cap (least recently used of all) is only a backstop.
      auto oldest_of = [&](bool same_key) {
        auto oldest = mcp_sessions_.end();
        size_t mine = 0;
        for (auto it = mcp_sessions_.begin(); it != mcp_sessions_.end(); ++it) {
          if (same_key && it->second.key_id != caller.key_id) continue;
          ++mine;
          if (oldest == mcp_sessions_.end() || it->second.last_used_ms < oldest->second.last_used_ms) oldest = it;
        }
        return std::make_pair(oldest, mine);
      };
      if (auto [oldest, mine] = oldest_of(true); mine >= kMaxMcpSessionsPerKey) mcp_sessions_.erase(oldest);
      if (mcp_sessions_.size() >= kMaxMcpSessions) mcp_sessions_.erase(oldest_of(false).first);
      mcp_sessions_[sid] = McpSession{{}, caller.key_id, NowUnixMs()};
    } else {
      if (sid.empty())
        return c->Respond(400, "application/json",
                          mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                             "Mcp-Session-Id header required (send initialize first)")
                              .dump());
      std::lock_guard<std::mutex> l(mcp_mu_);
      auto it = mcp_sessions_.find(sid);
      if (it == mcp_sessions_.end() || it->second.key_id != caller.key_id)
        return c->RespondError(404, "no such MCP session (it ended, or the server restarted): initialize again");
      it->second.last_used_ms = NowUnixMs();
    }
    if (!message.is_object() && !message.is_array())
      return c->Respond(400, "application/json",
                        mcp::ErrorResponse(nullptr, mcp::kInvalidRequest, "a JSON-RPC message is an object").dump());
    const bool batch = message.is_array();
    bool any_request = false;
    for (const auto& m : batch ? message : json::array({message})) any_request = any_request || mcp::IsRequest(m);
    if (!any_request) {
      // Notifications and responses only: nothing to answer.
      return c->Respond(202, "", "", {{"Mcp-Session-Id", sid}});
    }
    auto access = self_api_;
    access.api_key = key;
    std::string peer = c->peer();
    // The pool outlives the Server when a call is still running at shutdown
    // (~Server): every touch of the Server happens under life->mu, once
    // life->alive says it is still there.
    json first_id = !batch && message.contains("id") ? message["id"] : json(nullptr);
    // One team cannot hold every tool thread: past per_team() calls running
    // or waiting, more are refused at once (429) instead of queued.
    Status admitted = mcp_calls_->Submit(caller.team, [this, life = mcp_life_, c, caller, access, sid,
                                                       message = std::move(message), batch, peer]() mutable {
      // After ~Server the connection's io_context is gone: its socket must
      // never be destroyed, so it is let go with the thread.
      auto abandon = [&] { new std::shared_ptr<HttpConn>(std::move(c)); };
      auto audit = [&](json r) {
        std::lock_guard<std::mutex> l(life->mu);
        if (life->alive) Audit(std::move(r));
      };
      mcp::SessionState state;
      {
        std::lock_guard<std::mutex> life_lock(life->mu);
        if (!life->alive) return abandon();
        std::lock_guard<std::mutex> l(mcp_mu_);
        if (auto it = mcp_sessions_.find(sid); it != mcp_sessions_.end()) state = it->second.state;
      }
      auto invoke = [&](const std::string& tool, const json& args) {
        const int64_t t0 = NowUnixMs();
        mcp::ToolOutcome o = mcp::CallTool(access, tool, args);
        json r = {{"action", "mcp.tool_call"},
                  {"api_key_id", caller.key_id},
                  {"client", state.client_name},
                  {"client_version", state.client_version},
                  {"session", sid},
                  {"tool", tool},
                  {"is_error", o.result.value("isError", false)},
                  {"ms", NowUnixMs() - t0},
                  {"peer", peer}};
        if (!o.sandbox.empty()) r["sandbox"] = o.sandbox;
        if (!o.error.empty()) r["error"] = o.error.substr(0, 512);
        audit(std::move(r));
        return o;
      };
      json responses = json::array();
      for (const auto& m : batch ? message : json::array({message})) {
        auto resp = mcp::HandleMessage(state, m, invoke, kAirlockVersion);
        if (m.is_object() && m.value("method", "") == "initialize") {
          audit({{"action", "mcp.initialize"},
                 {"api_key_id", caller.key_id},
                 {"client", state.client_name},
                 {"client_version", state.client_version},
                 {"protocol_version", state.protocol_version},
                 {"session", sid},
                 {"peer", peer}});
          std::lock_guard<std::mutex> life_lock(life->mu);
          if (!life->alive) return abandon();
          std::lock_guard<std::mutex> l(mcp_mu_);
          if (auto it = mcp_sessions_.find(sid); it != mcp_sessions_.end()) it->second.state = state;
        }
        if (resp) responses.push_back(std::move(*resp));
      }
      std::lock_guard<std::mutex> life_lock(life->mu);
      if (!life->alive) return abandon();
      if (responses.empty()) {
        return asio::post(c->executor(), [c, sid] { c->Respond(202, "", "", {{"Mcp-Session-Id", sid}}); });
      }
      std::string out = (batch ? responses : responses[0]).dump(-1, ' ', false, json::error_handler_t::replace);
      asio::post(c->executor(), [c, out, sid] { c->Respond(200, "application/json", out, {{"Mcp-Session-Id", sid}}); });
    });
    if (!admitted.ok())
      return c->Respond(429, "application/json", mcp::ErrorResponse(first_id, -32000, admitted.message()).dump(),
                        {{"Retry-After", "1"}, {"Mcp-Session-Id", sid}});
  });
}

}  // namespace airlock::server
