// The data plane (data_plane.h); the relay itself is gateway/relay.h.
// Access: port 49983 needs the sandbox's X-Access-Token, except GET /health
// and /files with a valid URL signature (spec §2.3, §4.2); port 49999 (the
// code interpreter) needs it on /execute and every route but /health and
// the contexts routes (common/interpreter_access.h). Other ports need
// E2B-Traffic-Access-Token when the sandbox has a traffic token (403 JSON
// otherwise) and are exposed within Sandbox::ExposePort's bounds (429 +
// Retry-After over the rate, 502 JSON over the cap; docs/server.md). Bodies
// have no size limit either way. Unknown (killed) sandbox, any port or path:
// 502 {"code":502,"message":"The sandbox was not found","sandboxId":…} as
// E2B's proxy (the SDK reads it on /health as "not running"). Every relayed
// exchange is tracked per sandbox and dropped when it is killed, dies or
// pauses (StreamTable::Drop), so no stream outlives its sandbox.
#include <strings.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "audit/data_plane_tap.h"
#include "common/log.h"
#include "common/interpreter_access.h"
#include "common/secure_equal.h"
#include "gateway/relay_guard.h"
#include "server/server.h"

namespace airlock::server {

namespace {

// Spec §4.2: "<path>:<read|write>:<user>:<token>[:<expiration>]", on a URL
// that carries nothing its signature does not cover and expires within
// kMaxSignedUrlLifetime, if at all (relay_guard.h).
// Why a signed /files URL is refused for the sandbox with `token` (OK: it
// is not). The system clock itself (NowUnixMs), not time(2): that is the
// vDSO's last tick, which lags the client's clock by a tick or more on a
// loaded host and let a URL be used in the second after it expired.
Status FileSignatureStatus(const HttpConn& c, const std::string& token) {
  if (!c.Query("signature")) return Status(StatusCode::kUnauthenticated, "the URL carries no signature");
  return CheckFileSignature(c, token, NowUnixMs() / 1000);
}

bool ValidFileSignature(const HttpConn& c, const std::string& token) { return FileSignatureStatus(c, token).ok(); }

}  // namespace


void DataPlane::HandleData(std::shared_ptr<HttpConn> c, const std::string& id, uint16_t port) {
  const std::string& path = c->path();
  std::shared_ptr<Sandbox> sb = Visible(id);
  if (!sb) return RespondSandboxNotFound(*c, id);  // as E2B's proxy, on every port and path
  memory_->NoteActivity(id);                       // the memory-pressure policy pauses the longest idle first
  const SandboxAttributes attrs = sb->attributes();
  const std::string token = sb->access_token();
  const std::string& traffic_token = attrs.traffic_token;
  const std::string& mask = attrs.mask_request_host;
  const std::string ip = sb->netns_ip();  // as E2B's proxy, on every port and path
  // A guest port other than the agent's, of a sandbox with
  // network.allowPublicTraffic false: E2B's traffic token is required first
  // (403 as E2B), before anything is exposed or an autoResume starts.
  if (port != kAgentPort && !traffic_token.empty()) {
    std::string got = c->Header("E2B-Traffic-Access-Token");
    if (got.empty()) {
      return c->RespondError(403, "Sandbox is secured with traffic access token. Token header "
                                  "'e2b-traffic-access-token' is missing");
    }
    if (!SecureEqual(got, traffic_token)) {
      return c->RespondError(403, "Sandbox is secured with traffic access token. Provided token in header "
                                  "'e2b-traffic-access-token' is invalid");
    }
  }
  // The code interpreter runs code as the sandbox's user: /execute needs the
  // sandbox's X-Access-Token as the agent's port does (the contexts routes,
  // where the official SDK sends none, take it when sent;
  // common/interpreter_access.h), before an autoResume starts.
  if (port == kInterpreterPort) {
    std::string denied = InterpreterAccessError(c->method_string(), path, c->Header("X-Access-Token"), token);
    if (!denied.empty()) return c->RespondError(401, denied);
  }
  // Pausing too: the registry says "paused" from the commit on, while the VMM
  // is still being stopped; Resume waits for the pause to finish.
  if (sb->state() == SandboxState::kPaused || sb->state() == SandboxState::kResuming ||
      sb->state() == SandboxState::kPausing) {
    if (attrs.auto_resume) {
      // autoResume: bring it back, then serve this request as if it had been running.
      return asio::post(*workers_, [this, c, id, port] {
        auto r = manager_->Resume(id, std::chrono::seconds(60), NowUnixMs() + int64_t{config_.default_timeout_s} * 1000);
        if (r.ok() && r->resumed) AddLog(id, "info", "resumed by data-plane traffic (autoResume)");
        Status st = r.ok() ? OkStatus() : r.status();
        asio::post(c->executor(), [this, c, id, port, st] {
          if (!st.ok()) return c->RespondError(502, "sandbox " + id + " could not be resumed: " + st.message());
          HandleData(c, id, port);
        });
      });
    }
  }
  if (sb->state() != SandboxState::kRunning) {
    return c->RespondError(502, "sandbox " + id + " is " + std::string(SandboxStateName(sb->state())) +
                                    " (connect resumes a paused sandbox)");
  }
  if (port == kAgentPort) {
    bool health = path == "/health" && (c->method() == http::Method::kGet || c->method() == http::Method::kHead);
    std::string got = c->Header("X-Access-Token");
    if (!health && (got.empty() || !SecureEqual(got, token))) {
      const std::string bad_token = got.empty() ? "missing X-Access-Token" : "invalid X-Access-Token";
      if (path != "/files" || !c->Query("signature")) return c->RespondError(401, bad_token);
      // A signed URL, checked once: without a token it is refused for its
      // signature's reason (expired, or not this sandbox's).
      Status signature = FileSignatureStatus(*c, token);
      if (!signature.ok()) return c->RespondError(401, got.empty() ? signature.message() : bad_token);
    }
    if (path == "/process.Process/Start" || path == "/process.Process/Connect") {
      AddLog(id, "info", "exec: " + path.substr(1));
      if (path == "/process.Process/Start") metrics_.Exec();
    }
    audit::TapRequest tr{id, "", c->method_string(), path, {}, c->Header("Authorization"), c->Header("Content-Type")};
    for (const char* q : {"path", "username"}) {
      if (auto v = c->Query(q)) tr.query[q] = *v;
    }
    ForwardExtras extras;
    extras.sandbox_id = id;
    extras.tap = audit::DataPlaneTap::Create(tr, AuditSinkFn());
    const std::string host = c->Header("Host");
    return ForwardRequest(c, ip, port, host, std::move(extras),
                          [this, id](auto w) { streams_.Track(id, std::move(w)); });
  }
  // Another guest port: make it reachable first (a netlink batch for a new
  // port → worker).
  // The Host the guest's server sees: the client's (as E2B's proxy), or the
  // sandbox's network.maskRequestHost with ${PORT} filled in.
  std::string host_header = mask.empty() ? c->Header("Host") : FillMaskPort(mask, std::to_string(port));
  // The code interpreter's /execute is audited like a command (audit/data_plane_tap.h).
  audit::TapRequest tap{id, "", c->method_string(), path, {}, "", c->Header("Content-Type"), port};
  // network.httpsPorts: the guest's server speaks TLS (upstream_tls.h).
  const bool https = std::find(attrs.https_ports.begin(), attrs.https_ports.end(), port) != attrs.https_ports.end();
  asio::post(*workers_, [this, c, sb, id, ip, port, host_header, tap, https] {
    double retry_after = 1;
    Status st = sb->ExposePort(port, &retry_after);
    asio::post(c->executor(), [this, c, st, id, ip, port, retry_after, host_header, tap, https] {
      if (st.code() == StatusCode::kResourceExhausted) {
        int secs = std::max(1, static_cast<int>(std::ceil(retry_after)));
        return c->RespondError(429, st.message(), {{"Retry-After", std::to_string(secs)}});
      }
      if (st.code() == StatusCode::kFailedPrecondition) {
        // The cap: as E2B's answer for a port that is not open (502 JSON),
        // with the reason.
        return c->Respond(502, "application/json",
                          nlohmann::json{{"code", 502},
                                         {"sandboxId", id},
                                         {"port", std::to_string(port)},
                                         {"message", "The sandbox is running but port is not open: " + st.message()}}
                              .dump());
      }
      if (!st.ok()) return c->RespondError(502, "expose port " + std::to_string(port) + ": " + st.message());
      ForwardExtras extras;
      extras.sandbox_id = id;
      extras.tap = audit::DataPlaneTap::Create(tap, AuditSinkFn());
      extras.upstream_tls = https;
      ForwardRequest(c, ip, port, host_header, std::move(extras),
                     [this, id](auto w) { streams_.Track(id, std::move(w)); });
    });
  });
}

std::optional<std::string> DataPlane::SandboxBySignature(const HttpConn& c) {
  if (c.path() != "/files" || !c.Query("signature")) return std::nullopt;
  // The URL's own shape and expiry first: an expired or malformed URL is
  // refused (Router) without a signature computed per sandbox.
  if (!CheckSignedFileQuery(http::SplitTarget(c.target()).second, NowUnixMs() / 1000).ok()) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> tokens;
  for (const auto& sb : manager_->VisibleList()) {
    if (!sb->access_token().empty()) tokens.emplace_back(sb->id(), sb->access_token());
  }
  for (const auto& [id, token] : tokens) {
    if (ValidFileSignature(c, token)) return id;
  }
  return std::nullopt;
}

namespace {

// envd's HTTP routes and Connect services (spec §4): what an SDK sends to
// its sandbox URL.
bool IsEnvdRoute(const std::string& path) {
  for (const char* p : {"/files", "/health", "/init", "/envs", "/metrics"}) {
    if (path == p) return true;
  }
  return path.rfind("/filesystem.Filesystem/", 0) == 0 || path.rfind("/process.Process/", 0) == 0;
}

}  // namespace

bool DataPlane::IsEnvdCallByToken(const HttpConn& c) {
  return !c.Header("X-Access-Token").empty() && IsEnvdRoute(c.path());
}

std::optional<std::string> DataPlane::SandboxByAccessToken(const HttpConn& c) {
  if (!IsEnvdCallByToken(c)) return std::nullopt;
  const std::string got = c.Header("X-Access-Token");
  std::optional<std::string> found;
  for (const auto& sb : manager_->VisibleList()) {
    // Every token compared in full, in constant time each: how many
    // sandboxes there are shows, not which token is near.
    if (!sb->access_token().empty() && SecureEqual(got, sb->access_token()) && !found) found = sb->id();
  }
  return found;
}

}  // namespace airlock::server
