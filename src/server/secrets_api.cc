// E2B's secrets API (spec: E2B infra spec/openapi.yml /secrets; the SDK's
// Secret.create/update/getInfo/list/exists/destroy) over airlock's encrypted
// store (docs/secrets.md "The E2B secrets API"):
//   POST   /secrets              {name, value, metadata?}   201 Secret
//   GET    /secrets?limit=&nextToken=                      200 [Secret] + X-Next-Token
//   GET    /secrets/{id|name}                              200 Secret
//   POST   /secrets/{id|name}    {value, metadata?}        200 Secret (version + 1)
//   DELETE /secrets/{id|name}                              204
// Secret: {secretID, name, currentVersion, metadata, createdAt, updatedAt};
// never the value. A secret belongs to the team of the key that created it;
// another team's is answered 404 like one that does not exist (admin keys
// see every team's). Secrets set with `airlock secret set` are not part of
// this API (they have no id; their names answer 409 at create).
//
// Policy: the reserved metadata keys airlock.scope (env|brokered),
// airlock.hosts and airlock.teams (comma-separated) become the secret's use
// policy, exactly what `airlock secret set --scope/--host/--team` stores; the
// owning team is always one of its teams.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "secrets/secret_store.h"
#include "server/http_status.h"
#include "gateway/list_query.h"
#include "server/requests/secret.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

json SecretJson(const secrets::SecretInfo& s) {
  return json{{"secretID", s.api.id},
              {"name", s.name},
              {"currentVersion", s.api.version},
              {"metadata", s.api.metadata},
              {"createdAt", FormatRfc3339Ms(s.created_at_ms)},
              {"updatedAt", FormatRfc3339Ms(s.updated_at_ms)}};
}

// A secret (or the error) as the answer: status and JSON body.
std::pair<int, std::string> SecretAnswer(const StatusOr<secrets::SecretInfo>& info, int ok_status) {
  if (info.ok()) return {ok_status, SecretJson(*info).dump()};
  int code = HttpStatusFor(info.status());
  return {code, JsonError(code, info.status().message())};
}

}  // namespace

void SecretsApi::HandleSecrets(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& selector) {
  auto verb = c->method();
  auto respond = [c](std::pair<int, std::string> answer) {
    asio::post(c->executor(),
               [c, answer = std::move(answer)] { c->Respond(answer.first, "application/json", answer.second); });
  };
  if (selector.empty()) {
    if (verb == http::Method::kGet) return ListSecrets(c, caller);
    if (verb != http::Method::kPost) return c->RespondError(405, "method not allowed");
    return ReadJson(c, [this, c, caller, respond](json body) {
      auto req = requests::ParseCreateSecret(body, caller.team);
      if (!req.ok()) return c->RespondError(HttpStatusFor(req.status()), req.status().message());
      asio::post(*workers_, [this, caller, respond, req = std::move(req).value()]() mutable {
        auto info = secrets_->CreateSecret(caller, req.name, std::move(req.value), req.metadata, req.policy);
        respond(SecretAnswer(info, 201));
      });
    });
  }
  if (verb == http::Method::kGet) {
    return asio::post(*workers_, [this, caller, selector, respond] {
      respond(SecretAnswer(secrets_->FindVisible(caller, selector), 200));
    });
  }
  if (verb == http::Method::kDelete) {
    return asio::post(*workers_, [this, c, caller, selector] {
      Status st = secrets_->DeleteSecret(caller, selector);
      asio::post(c->executor(), [c, st] {
        if (st.ok()) return c->Respond(204, "", "");
        c->RespondError(HttpStatusFor(st), st.message());
      });
    });
  }
  if (verb != http::Method::kPost) return c->RespondError(405, "method not allowed");
  ReadJson(c, [this, c, caller, selector, respond](json body) {
    auto req = requests::ParseUpdateSecret(body);
    if (!req.ok()) return c->RespondError(HttpStatusFor(req.status()), req.status().message());
    asio::post(*workers_, [this, caller, selector, respond, req = std::move(req).value()]() mutable {
      auto info = secrets_->UpdateSecret(caller, selector, std::move(req.value), req.metadata);
      respond(SecretAnswer(info, 200));
    });
  });
}

void SecretsApi::ListSecrets(std::shared_ptr<HttpConn> c, const Caller& caller) {
  auto req = gateway::ParseListSecrets([&c](const std::string& name) { return c->Query(name); });
  if (!req.ok()) return c->RespondError(400, req.status().message());
  asio::post(*workers_, [this, c, caller, limit = req->limit, after = req->after] {
    auto all = secrets_->VisibleSecrets(caller);
    if (!all.ok()) {
      Status st = all.status();
      return asio::post(c->executor(), [c, st] { c->RespondError(500, st.message()); });
    }
    json arr = json::array();
    HeaderList extra;
    std::string last;
    for (const auto& s : *all) {  // ordered by name; the token is the last name of the page
      if (!after.empty() && s.name <= after) continue;
      if (static_cast<int>(arr.size()) == limit) {
        extra.push_back({"X-Next-Token", last});
        break;
      }
      arr.push_back(SecretJson(s));
      last = s.name;
    }
    std::string out = arr.dump();
    asio::post(c->executor(), [c, out, extra] { c->Respond(200, "application/json", out, extra); });
  });
}

}  // namespace airlock::server
