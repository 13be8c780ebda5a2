// Idempotency-Key (idempotency.h).
#include "server/idempotency.h"

#include <openssl/evp.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

#include "common/clock.h"
#include "common/hex.h"
#include "common/log.h"
#include "core/registry.h"
#include "server/http_status.h"

namespace airlock::server {

namespace {

std::string Fingerprint(const HttpConn& c, const std::string& body) {
  std::string what = c.method_string() + " " + c.path() + "\n" + body;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(what.data(), what.size(), md, &n, EVP_sha256(), nullptr);
  return HexEncode(std::string(reinterpret_cast<const char*>(md), n));
}

}  // namespace



bool Idempotency::Applies(RouteId id) {
  switch (id) {
    case RouteId::kCreateSandbox:
    case RouteId::kConnect:  // connect and resume
    case RouteId::kPause:
    case RouteId::kFork:
    case RouteId::kCreateSnapshot:
    case RouteId::kCreateCheckpoint:
    case RouteId::kKillSandbox: return true;
    default: return false;
  }
}

void Idempotency::Run(std::shared_ptr<HttpConn> c, const control::Caller& caller, std::function<void()> call) {
  std::string key = c->Header("Idempotency-Key");
  if (!gateway::ValidIdempotencyKey(key)) return c->RespondError(400, "Idempotency-Key must be 1 to 255 visible ASCII characters");
  c->ReadBodyToString(max_body_, [this, c, team = caller.team, key, call = std::move(call)](
                                     StatusOr<std::string> body) mutable {
    if (!body.ok())
      return c->RespondError(HttpStatusFor(body.status(), HttpStatusContext::kRequestBody), body.status().message());
    std::string fingerprint = Fingerprint(*c, *body);
    boost::asio::post(lookups_, [this, c, team, key, fingerprint, body = std::move(*body),
                                 call = std::move(call)]() mutable {
      auto held = registry_.ClaimIdempotencyKey(team, key, fingerprint, NowUnixMs(),
                                                std::chrono::milliseconds(kWindow).count(),
                                                std::chrono::milliseconds(kStale).count());
      boost::asio::post(c->executor(), [this, c, team, key, fingerprint, held = std::move(held),
                                        body = std::move(body), call = std::move(call)]() mutable {
        if (!held.ok()) return c->RespondError(500, held.status().message());
        if (const auto& first = *held) {
          if (first->fingerprint != fingerprint) {
            return c->RespondError(422, "Idempotency-Key '" + key +
                                            "' was used with another request (method, path or body) in the last 24 h");
          }
          if (!first->answered) {
            return c->RespondError(409, "a request with Idempotency-Key '" + key + "' is still in progress",
                                   {{"Retry-After", "1"}});
          }
          return c->Respond(first->status, first->content_type, first->body, {{"Idempotent-Replayed", "true"}});
        }
        // Held: run the call once and keep what it answers.
        c->SetOnResponse([this, team, key](int status, std::string_view content_type, const std::string* sent) {
          // Transient answers (a 5xx, 408, 425, 429: try again later) are
          // not the call's answer: the key is freed for the retry.
          const bool keep = sent && status < 500 && status != 408 && status != 425 && status != 429;
          boost::asio::post(lookups_, [this, team, key, keep, status, content_type = std::string(content_type),
                                       sent = keep ? *sent : std::string()] {
            Status st = keep ? registry_.AnswerIdempotencyKey(team, key, status, content_type, sent)
                             : registry_.ReleaseIdempotencyKey(team, key);
            if (!st.ok()) LOG_WARN("idempotency key of team {}: {}", team, st.ToString());
          });
        });
        c->ReplayBody(std::move(body));
        try {
          call();
        } catch (const std::exception& e) {  // as the router's own handlers: never out of the io loop
          c->RespondError(500, std::string("internal error: ") + e.what());
        }
      });
    });
  });
}

}  // namespace airlock::server
