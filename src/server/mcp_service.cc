// McpService (mcp_service.h): /mcp's sessions and tool calls.
#include "server/mcp_service.h"

#include <openssl/rand.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "http/client.h"
#include "mcp/protocol.h"

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

Status McpService::Check(int threads, int calls_per_team) {
  return mcp::FairCallQueue::Check(static_cast<size_t>(std::max(0, threads)),
                                   static_cast<size_t>(std::max(0, calls_per_team)));
}

StatusOr<std::unique_ptr<McpService>> McpService::Create(Config config, AuditFn audit) {
  RETURN_IF_ERROR(Check(config.threads, config.calls_per_team));
  // The tools reach the API on loopback (a wildcard listen address is
  // reached on the loopback address of its family), or --mcp-api's.
  mcp::ApiAccess api;
  mcp::AllowedOrigins origins;
  if (auto hp = http::ParseHostPort(config.listen); hp.ok()) {
    api.host = hp->first == "0.0.0.0" || hp->first.empty() ? "127.0.0.1" : hp->first == "::" ? "::1" : hp->first;
    origins = mcp::AllowedOrigins::For(hp->first, config.port, config.public_url);
  }
  api.port = config.port;
  if (!config.api.empty()) {
    ASSIGN_OR_RETURN(auto hp, http::ParseHostPort(config.api));
    api.host = hp.first;
    api.port = hp.second;
  }
  std::unique_ptr<McpService> s(
      new McpService(std::move(api), std::move(origins), std::move(config.server_version), std::move(audit)));
  // Tool calls: their own pool, admitted per team (FairCallQueue checks the numbers).
  s->workers_ = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(3, config.threads)));
  auto* pool = s->workers_.get();  // let go, never destroyed, by Shutdown
  ASSIGN_OR_RETURN(s->calls_,
                   mcp::FairCallQueue::Create(static_cast<size_t>(std::max(0, config.threads)),
                                              static_cast<size_t>(std::max(0, config.calls_per_team)),
                                              [pool](mcp::FairCallQueue::Task t) { asio::post(*pool, std::move(t)); }));
  return s;
}

McpService::McpService(mcp::ApiAccess api, mcp::AllowedOrigins origins, std::string server_version, AuditFn audit)
    : api_(std::move(api)),
      origins_(std::move(origins)),
      server_version_(std::move(server_version)),
      audit_(std::move(audit)) {}

McpService::~McpService() { Shutdown(); }

void McpService::Shutdown() {
  // Tool calls block on the daemon's API, which no longer answers: their
  // threads are let go (each drops its answer, Life) rather than waited for.
  {
    std::lock_guard<std::mutex> l(life_->mu);
    life_->alive = false;
  }
  if (workers_) {
    workers_->stop();
    (void)workers_.release();
  }
}

void McpService::Handle(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& key) {
  if (std::string origin = c->Header("Origin"); !origin.empty() && !origins_.Allows(origin))
    return c->RespondError(403, "MCP requests from origin " + origin.substr(0, 256) +
                                    " are refused (allowed: this server's --listen address and --public-url)");
  const std::string session_id = c->Header("Mcp-Session-Id");
  if (c->method() == http::Method::kGet)
    return c->RespondError(405, "this server sends no stream of its own; POST JSON-RPC messages",
                           {{"Allow", "POST, DELETE"}});
  if (c->method() == http::Method::kDelete) return EndSession(c, caller, session_id);
  if (c->method() != http::Method::kPost) return c->RespondError(405, "method not allowed", {{"Allow", "POST, DELETE"}});
  c->ReadBodyToString(kMaxMcpBody, [this, c, caller, key, session_id](StatusOr<std::string> body) {
    if (!body.ok()) return c->RespondError(413, body.status().message());
    json message = json::parse(*body, nullptr, false);
    if (message.is_discarded())
      return c->Respond(400, "application/json", mcp::ErrorResponse(nullptr, mcp::kParseError, "parse error: the body is not JSON").dump());
    const bool is_initialize =
        message.is_object() && message.value("method", "") == "initialize" && message.contains("id");
    std::optional<std::string> sid = SessionFor(c, caller, session_id, is_initialize);
    if (!sid) return;  // answered
    if (!message.is_object() && !message.is_array())
      return c->Respond(400, "application/json",
                        mcp::ErrorResponse(nullptr, mcp::kInvalidRequest, "a JSON-RPC message is an object").dump());
    Dispatch(c, caller, key, *sid, std::move(message));
  });
}

void McpService::EndSession(const std::shared_ptr<HttpConn>& c, const Caller& caller, const std::string& session_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end() || it->second.key_id != caller.key_id) return c->RespondError(404, "no such MCP session");
  sessions_.erase(it);
  c->Respond(204, "", "");
}

std::optional<std::string> McpService::SessionFor(const std::shared_ptr<HttpConn>& c, const Caller& caller,
                                                  const std::string& session_id, bool is_initialize) {
  if (!is_initialize) {
    if (session_id.empty()) {
      c->Respond(400, "application/json",
                 mcp::ErrorResponse(nullptr, mcp::kInvalidRequest,
                                    "Mcp-Session-Id header required (send initialize first)")
                     .dump());
      return std::nullopt;
    }
    std::lock_guard<std::mutex> l(mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end() || it->second.key_id != caller.key_id) {
      c->RespondError(404, "no such MCP session (it ended, or the server restarted): initialize again");
      return std::nullopt;
    }
    it->second.last_used_ms = NowUnixMs();
    return session_id;
  }
  std::string sid = NewSessionId();
  if (sid.empty()) {
    c->RespondError(500, "no randomness for a session id");
    return std::nullopt;
  }
  std::lock_guard<std::mutex> l(mu_);
  // A key that opens too many sessions loses its own oldest; the global
  // cap (least recently used of all) is only a backstop.
  auto oldest_of = [&](bool same_key) {
    auto oldest = sessions_.end();
    size_t mine = 0;
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
      if (same_key && it->second.key_id != caller.key_id) continue;
      ++mine;
      if (oldest == sessions_.end() || it->second.last_used_ms < oldest->second.last_used_ms) oldest = it;
    }
    return std::make_pair(oldest, mine);
  };
  if (auto [oldest, mine] = oldest_of(true); mine >= kMaxSessionsPerKey) sessions_.erase(oldest);
  if (sessions_.size() >= kMaxSessions) sessions_.erase(oldest_of(false).first);
  sessions_[sid] = Session{{}, caller.key_id, NowUnixMs()};
  return sid;
}

void McpService::Dispatch(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& key,
                          const std::string& sid, json message) {
  const bool batch = message.is_array();
  bool any_request = false;
  for (const auto& m : batch ? message : json::array({message})) any_request = any_request || mcp::IsRequest(m);
  // Notifications and responses only: nothing to answer.
  if (!any_request) return c->Respond(202, "", "", {{"Mcp-Session-Id", sid}});
  json first_id = !batch && message.contains("id") ? message["id"] : json(nullptr);
  CallJob job{c, caller, api_, sid, server_version_, std::move(message), c->peer()};
  job.access.api_key = key;
  // One team cannot hold every tool thread: past per_team() calls running
  // or waiting, more are refused at once (429) instead of queued.
  Status admitted = calls_->Submit(
      caller.team, mcp::FairCallQueue::FinishingTask(
                       [this, life = life_, job = std::move(job)](const std::function<void()>& finish) mutable {
                         RunCalls(this, life, std::move(job), finish);
                       }));
  if (!admitted.ok())
    c->Respond(429, "application/json", mcp::ErrorResponse(first_id, -32000, admitted.message()).dump(),
               {{"Retry-After", "1"}, {"Mcp-Session-Id", sid}});
}

void McpService::RunCalls(McpService* self, const std::shared_ptr<Life>& life, CallJob job,
                          const std::function<void()>& finish) {
  // After Shutdown (the daemon is going) the connection's io_context may be
  // gone: its socket must never be destroyed, so it is let go with the thread.
  auto abandon = [&] { new std::shared_ptr<HttpConn>(std::move(job.c)); };
  auto audit = [&](json r) {
    std::lock_guard<std::mutex> l(life->mu);
    if (life->alive) self->audit_(std::move(r));
  };
  const Caller& caller = job.caller;
  const std::string& sid = job.sid;
  mcp::SessionState state;
  {
    std::lock_guard<std::mutex> life_lock(life->mu);
    if (!life->alive) return abandon();
    std::lock_guard<std::mutex> l(self->mu_);
    if (auto it = self->sessions_.find(sid); it != self->sessions_.end()) state = it->second.state;
  }
  auto invoke = [&](const std::string& tool, const json& args) {
    const int64_t t0 = NowUnixMs();
    mcp::ToolOutcome o = mcp::CallTool(job.access, tool, args);
    json r = {{"action", "mcp.tool_call"},
              {"api_key_id", caller.key_id},
              {"client", state.client_name},
              {"client_version", state.client_version},
              {"session", sid},
              {"tool", tool},
              {"is_error", o.result.value("isError", false)},
              {"ms", NowUnixMs() - t0},
              {"peer", job.peer}};
    if (!o.sandbox.empty()) r["sandbox"] = o.sandbox;
    if (!o.error.empty()) r["error"] = o.error.substr(0, 512);
    audit(std::move(r));
    return o;
  };
  const bool batch = job.message.is_array();
  json responses = json::array();
  for (const auto& m : batch ? job.message : json::array({job.message})) {
    auto resp = mcp::HandleMessage(state, m, invoke, job.server_version);
    if (m.is_object() && m.value("method", "") == "initialize") {
      audit({{"action", "mcp.initialize"},
             {"api_key_id", caller.key_id},
             {"client", state.client_name},
             {"client_version", state.client_version},
             {"protocol_version", state.protocol_version},
             {"session", sid},
             {"peer", job.peer}});
      std::lock_guard<std::mutex> life_lock(life->mu);
      if (!life->alive) return abandon();
      std::lock_guard<std::mutex> l(self->mu_);
      if (auto it = self->sessions_.find(sid); it != self->sessions_.end()) it->second.state = state;
    }
    if (resp) responses.push_back(std::move(*resp));
  }
  std::lock_guard<std::mutex> life_lock(life->mu);
  if (!life->alive) return abandon();
  auto c = job.c;
  // Its place goes back before the answer does: the client's next call,
  // sent the moment it has this answer, must not find this one counted.
  finish();
  if (responses.empty()) {
    return asio::post(c->executor(), [c, sid] { c->Respond(202, "", "", {{"Mcp-Session-Id", sid}}); });
  }
  std::string out = (batch ? responses : responses[0]).dump(-1, ' ', false, json::error_handler_t::replace);
  asio::post(c->executor(), [c, out, sid] { c->Respond(200, "application/json", out, {{"Mcp-Session-Id", sid}}); });
}

}  // namespace airlock::server
