#include "agent/rpc.h"

#include <strings.h>

#include <cstdlib>

#include "agent/agent.h"
#include "envd/connect_error.h"
#include "envd/envelope.h"

namespace airlock::agent {

void RespondUnaryError(http::Conn& s, const Status& st) {
  s.Respond(envd::HttpStatusForCode(st.code()), "application/json", envd::ErrorJsonBody(st));
}

void ServeUnary(std::shared_ptr<http::Conn> s, UnaryFn fn) {
  s->ReadBodyToString(kMaxRequestBody, [s, fn = std::move(fn)](StatusOr<std::string> body) {
    if (s->closed()) return;
    if (!body.ok()) return RespondUnaryError(*s, body.status());
    std::string_view text = *body;
    if (text.empty()) text = "{}";
    auto j = envd::ParseJsonObject(text);
    if (!j.ok()) return RespondUnaryError(*s, j.status());
    StatusOr<envd::OJson> reply = Internal("unset");
    try {
      reply = fn(*j);
    } catch (const std::exception& e) {
      reply = Internal(std::string("handler error: ") + e.what());
    }
    if (!reply.ok()) return RespondUnaryError(*s, reply.status());
    s->Respond(200, "application/json", envd::Dump(*reply));
  });
}

bool IsStreamRequest(const http::Conn& s) {
  std::string ct = s.Header("Content-Type");
  return strncasecmp(ct.c_str(), "application/connect+json", 24) == 0;
}

void BeginStream(http::Conn& s) { s.BeginResponse(200, "application/connect+json", std::nullopt); }

void RespondStreamStatus(http::Conn& s, const Status& st) {
  BeginStream(s);
  s.Write(envd::EncodeEndStream(st));
  s.EndResponse();
}

void ReadStreamRequest(std::shared_ptr<http::Conn> s, std::function<void(const envd::Json&)> done) {
  s->ReadBodyToString(kMaxRequestBody + envd::kEnvelopeHeaderBytes,
                      [s, done = std::move(done)](StatusOr<std::string> body) {
    if (s->closed()) return;
    if (!body.ok()) return RespondStreamStatus(*s, body.status());
    std::string payload;
    if (IsStreamRequest(*s)) {
      envd::EnvelopeDecoder dec(kMaxRequestBody);
      Status st = dec.Feed(*body);
      if (!st.ok()) return RespondStreamStatus(*s, st);
      auto env = dec.Next();
      if (!env || !dec.AtBoundary() || env->end_stream()) {
        return RespondStreamStatus(*s, InvalidArgument("streaming request must be exactly one message envelope"));
      }
      payload = std::move(env->payload);
    } else {
      payload = std::move(*body);  // lenient: a bare JSON body
    }
    if (payload.empty()) payload = "{}";
    auto j = envd::ParseJsonObject(payload);
    if (!j.ok()) return RespondStreamStatus(*s, j.status());
    try {
      done(*j);
    } catch (const std::exception& e) {
      RespondStreamStatus(*s, Internal(std::string("handler error: ") + e.what()));
    }
  });
}

std::chrono::milliseconds KeepaliveInterval(const http::Conn& s) {
  std::string v = s.Header("Keepalive-Ping-Interval");
  if (!v.empty()) {
    char* end;
    long secs = std::strtol(v.c_str(), &end, 10);
    if (*end == '\0' && secs > 0 && secs < 86400) return std::chrono::seconds(secs);
  }
  return std::chrono::seconds(90);
}

std::optional<std::chrono::milliseconds> ConnectTimeout(const http::Conn& s) {
  std::string v = s.Header("Connect-Timeout-Ms");
  if (v.empty()) return std::nullopt;
  char* end;
  long long ms = std::strtoll(v.c_str(), &end, 10);
  if (*end != '\0' || ms <= 0) return std::nullopt;
  return std::chrono::milliseconds(ms);
}

}  // namespace airlock::agent
