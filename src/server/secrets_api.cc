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
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"
#include "secrets/secret_store.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

constexpr size_t kMaxMetadataEntries = 32, kMaxMetadataKey = 128, kMaxMetadataValue = 1024, kMaxMetadataTotal = 8192;
constexpr int kMaxPage = 100;

int StatusToHttp(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    default: return 500;
  }
}

std::vector<std::string> SplitList(const std::string& v) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= v.size()) {
    size_t c = v.find(',', i);
    if (c == std::string::npos) c = v.size();
    std::string item = v.substr(i, c - i);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    i = c + 1;
  }
  return out;
}

// Crockford base32, 26 characters (the shape of E2B's typeid suffix), random.
std::string NewSecretId() {
  static constexpr char kAlphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
  std::string hex = RandomHex(26);  // one byte per character (5 bits of each used; the first: 3)
  std::string out = "sec_";
  for (size_t i = 0; i < 26; ++i) {
    int v = std::stoi(hex.substr(2 * i, 2), nullptr, 16);
    out += kAlphabet[(i == 0 ? v % 8 : v % 32)];
  }
  return out;
}

json SecretJson(const secrets::SecretInfo& s) {
  return json{{"secretID", s.api.id},
              {"name", s.name},
              {"currentVersion", s.api.version},
              {"metadata", s.api.metadata},
              {"createdAt", FormatRfc3339Ms(s.created_at_ms)},
              {"updatedAt", FormatRfc3339Ms(s.updated_at_ms)}};
}

bool Visible(const secrets::SecretInfo& s, const Caller& caller) {
  return !s.api.id.empty() && (caller.admin || s.api.owner == caller.team);
}

}  // namespace

StatusOr<std::string> NormalizeSecretName(const std::string& input) {
  std::string name = input;
  name.erase(0, name.find_first_not_of(" \t\r\n"));
  name.erase(name.find_last_not_of(" \t\r\n") + 1);
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '-';
  for (char& c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!ok) return InvalidArgument("secret name must be 1 to 128 characters of [A-Za-z0-9_-], not starting with '-'");
  if (name.rfind("sec_", 0) == 0) return InvalidArgument("secret names may not start with sec_ (reserved for secret ids)");
  return name;
}

StatusOr<std::map<std::string, std::string>> ParseSecretMetadata(const json& body) {
  std::map<std::string, std::string> out;
  auto it = body.find("metadata");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) return InvalidArgument("metadata must be an object of strings");
  if (it->size() > kMaxMetadataEntries) return InvalidArgument("metadata has more than 32 entries");
  size_t total = 0;
  for (auto& [k, v] : it->items()) {
    if (!v.is_string()) return InvalidArgument("metadata." + k.substr(0, 128) + " must be a string");
    const std::string& s = v.get_ref<const std::string&>();
    if (k.empty() || k.size() > kMaxMetadataKey) return InvalidArgument("metadata keys must be 1 to 128 bytes");
    if (s.size() > kMaxMetadataValue) return InvalidArgument("metadata." + k + " is longer than 1024 bytes");
    total += k.size() + s.size();
    out[k] = s;
  }
  if (total > kMaxMetadataTotal) return InvalidArgument("metadata is larger than 8192 bytes in total");
  return out;
}

StatusOr<secrets::SecretPolicy> PolicyFromSecretMetadata(const std::map<std::string, std::string>& metadata,
                                                         const std::string& owner_team) {
  secrets::SecretPolicy p;
  p.teams.push_back(owner_team);
  std::string scope;
  for (const auto& [k, v] : metadata) {
    if (k.rfind("airlock.", 0) != 0) continue;
    if (k == "airlock.scope") {
      scope = v;
      if (scope != "env" && scope != "brokered") return InvalidArgument("metadata.airlock.scope must be env or brokered");
    } else if (k == "airlock.hosts") {
      p.hosts = SplitList(v);
      if (p.hosts.empty()) return InvalidArgument("metadata.airlock.hosts names no host");
      if (p.hosts.size() > 32) return InvalidArgument("metadata.airlock.hosts: at most 32 hosts");
    } else if (k == "airlock.teams") {
      for (const auto& t : SplitList(v)) {
        if (t.size() > 64 || t.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                                 std::string::npos) {
          return InvalidArgument("metadata.airlock.teams: team names are 1 to 64 characters of [A-Za-z0-9_.-]");
        }
        if (std::find(p.teams.begin(), p.teams.end(), t) == p.teams.end()) p.teams.push_back(t);
      }
    } else {
      return InvalidArgument("metadata." + k + ": unknown airlock key (airlock.scope, airlock.hosts, airlock.teams)");
    }
  }
  if (scope.empty()) scope = p.hosts.empty() ? "env" : "brokered";
  p.scope = scope == "env" ? secrets::Scope::kEnv : secrets::Scope::kBrokered;
  if (p.scope == secrets::Scope::kEnv && !p.hosts.empty()) {
    return InvalidArgument("metadata.airlock.hosts only applies to airlock.scope brokered");
  }
  if (p.scope == secrets::Scope::kBrokered) {
    if (p.hosts.empty()) return InvalidArgument("metadata.airlock.scope brokered needs airlock.hosts");
    // The same host syntax a create request is held to.
    json probe = {{"probe", {{"scope", "brokered"}, {"hosts", p.hosts}}}};
    if (auto parsed = ParseSecretsSpec(probe); !parsed.ok()) {
      return InvalidArgument("metadata.airlock.hosts: " + parsed.status().message());
    }
  }
  return p;
}

StatusOr<nlohmann::json> LiftSecretPlaceholders(std::map<std::string, std::string>* env_vars, nlohmann::json spec) {
  static constexpr std::string_view kOpen = "${e2b.secrets.";
  if (spec.is_null()) spec = json::object();
  if (!spec.is_object()) return spec;  // ParseSecretsSpec reports it
  for (auto it = env_vars->begin(); it != env_vars->end();) {
    const std::string& v = it->second;
    if (v.size() > kOpen.size() + 1 && v.compare(0, kOpen.size(), kOpen) == 0 && v.back() == '}') {
      std::string name = v.substr(kOpen.size(), v.size() - kOpen.size() - 1);
      RETURN_IF_ERROR(secrets::ValidateSecretName(name).WithContext("envVars." + it->first));
      if (spec.contains(name)) return InvalidArgument("secret " + name + " is named twice (envVars." + it->first + ")");
      spec[name] = {{"env", it->first}};
      it = env_vars->erase(it);
    } else {
      ++it;
    }
  }
  return spec;
}

void Server::HandleSecrets(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& selector) {
  auto verb = c->method();
  auto fail = [c](const Status& st) { c->RespondError(StatusToHttp(st), st.message()); };
  if (selector.empty()) {
    if (verb == http::Method::kGet) return ListSecrets(c, caller);
    if (verb != http::Method::kPost) return c->RespondError(405, "method not allowed");
    return ReadJson(c, [this, c, caller, fail](json body) {
      auto name_field = body.find("name");
      auto value_field = body.find("value");
      if (name_field == body.end() || !name_field->is_string()) return c->RespondError(400, "name (a string) is required");
      if (value_field == body.end() || !value_field->is_string()) return c->RespondError(400, "value (a string) is required");
      auto name = NormalizeSecretName(name_field->get<std::string>());
      if (!name.ok()) return fail(name.status());
      auto metadata = ParseSecretMetadata(body);
      if (!metadata.ok()) return fail(metadata.status());
      auto policy = PolicyFromSecretMetadata(*metadata, caller.team);
      if (!policy.ok()) return fail(policy.status());
      std::string value = value_field->get<std::string>();
      asio::post(*workers_, [this, c, caller, name = *name, value = std::move(value), metadata = *metadata,
                             policy = *policy]() mutable {
        secrets::ApiAttributes api{NewSecretId(), caller.team, 1, metadata};
        Status st;
        StatusOr<secrets::SecretInfo> info = Status(StatusCode::kInternal, "");
        if (auto store = Secrets(); !store.ok()) {
          st = store.status();
        } else {
          std::lock_guard<std::mutex> l(secrets_api_mu_);
          st = (*store)->Create(name, value, policy, api);
          if (st.ok()) {
            (void)redactor_->Add(name, value);
            info = (*store)->Info(name);
            st = info.status();
          }
        }
        std::fill(value.begin(), value.end(), '\0');
        if (st.code() == StatusCode::kAlreadyExists) st = Status(StatusCode::kAlreadyExists, "secret " + name + " already exists");
        if (st.ok()) {
          json r = {{"action", "secret.created"}, {"name", name}, {"secretID", api.id}, {"team", caller.team},
                    {"scope", std::string(secrets::ScopeName(*policy.scope))}, {"api_key_id", caller.key_id}};
          if (!policy.hosts.empty()) r["hosts"] = policy.hosts;
          Audit(std::move(r));
        }
        std::string out = st.ok() ? SecretJson(*info).dump() : JsonError(StatusToHttp(st), st.message());
        int code = st.ok() ? 201 : StatusToHttp(st);
        asio::post(c->executor(), [c, code, out] { c->Respond(code, "application/json", out); });
      });
    });
  }
  if (verb == http::Method::kGet) {
    return asio::post(*workers_, [this, c, caller, selector] {
      auto info = FindVisibleSecret(caller, selector);
      std::string out = info.ok() ? SecretJson(*info).dump() : JsonError(StatusToHttp(info.status()), info.status().message());
      int code = info.ok() ? 200 : StatusToHttp(info.status());
      asio::post(c->executor(), [c, code, out] { c->Respond(code, "application/json", out); });
    });
  }
  if (verb == http::Method::kDelete) {
    return asio::post(*workers_, [this, c, caller, selector] {
      Status st;
      std::string name, id;
      {
        std::lock_guard<std::mutex> l(secrets_api_mu_);
        auto info = FindVisibleSecret(caller, selector);
        st = info.status();
        if (info.ok()) {
          name = info->name;
          id = info->api.id;
          auto store = Secrets();
          st = store.ok() ? (*store)->Remove(name) : store.status();
        }
      }
      if (st.ok()) {
        Audit({{"action", "secret.deleted"}, {"name", name}, {"secretID", id}, {"team", caller.team},
               {"api_key_id", caller.key_id}});
      }
      asio::post(c->executor(), [c, st] {
        if (st.ok()) return c->Respond(204, "", "");
        c->RespondError(StatusToHttp(st), st.message());
      });
    });
  }
  if (verb != http::Method::kPost) return c->RespondError(405, "method not allowed");
  ReadJson(c, [this, c, caller, selector, fail](json body) {
    auto value_field = body.find("value");
    if (value_field == body.end() || !value_field->is_string()) return c->RespondError(400, "value (a string) is required");
    std::optional<std::map<std::string, std::string>> metadata;
    if (body.contains("metadata") && !body["metadata"].is_null()) {
      auto m = ParseSecretMetadata(body);
      if (!m.ok()) return fail(m.status());
      metadata = *m;
    }
    std::string value = value_field->get<std::string>();
    asio::post(*workers_, [this, c, caller, selector, metadata, value = std::move(value)]() mutable {
      StatusOr<secrets::SecretInfo> out_info = Status(StatusCode::kInternal, "");
      secrets::SecretPolicy policy;
      {
        std::lock_guard<std::mutex> l(secrets_api_mu_);
        auto info = FindVisibleSecret(caller, selector);
        out_info = info.status();
        if (info.ok()) {
          secrets::ApiAttributes api = info->api;
          policy = info->policy;
          Status st;
          if (metadata) {
            // A present metadata object replaces the stored one (and the policy it carries).
            auto p = PolicyFromSecretMetadata(*metadata, api.owner);
            if (p.ok()) {
              policy = *p;
              api.metadata = *metadata;
            } else {
              st = p.status();
            }
          }
          ++api.version;
          auto store = Secrets();
          if (st.ok()) st = store.ok() ? (*store)->Set(info->name, value, policy, &api) : store.status();
          if (st.ok()) {
            (void)redactor_->Add(info->name, value);
            out_info = (*store)->Info(info->name);
          } else {
            out_info = st;
          }
        }
      }
      std::fill(value.begin(), value.end(), '\0');
      if (out_info.ok()) {
        Audit({{"action", "secret.updated"}, {"name", out_info->name}, {"secretID", out_info->api.id},
               {"version", out_info->api.version}, {"team", caller.team}, {"api_key_id", caller.key_id},
               {"scope", policy.scope ? std::string(secrets::ScopeName(*policy.scope)) : ""}});
      }
      int code = out_info.ok() ? 200 : StatusToHttp(out_info.status());
      std::string out =
          out_info.ok() ? SecretJson(*out_info).dump() : JsonError(code, out_info.status().message());
      asio::post(c->executor(), [c, code, out] { c->Respond(code, "application/json", out); });
    });
  });
}

StatusOr<secrets::SecretInfo> Server::FindVisibleSecret(const Caller& caller, const std::string& selector) {
  std::string sel = selector;
  sel.erase(0, sel.find_first_not_of(" \t"));
  sel.erase(sel.find_last_not_of(" \t") + 1);
  std::string lower = sel;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const Status not_found = NotFound("secret " + sel.substr(0, 140) + " not found");
  ASSIGN_OR_RETURN(auto* store, Secrets());
  if (lower.rfind("sec_", 0) == 0) {
    ASSIGN_OR_RETURN(auto all, store->List());
    for (auto& s : all) {
      if (s.api.id == lower && Visible(s, caller)) return s;
    }
    return not_found;
  }
  auto name = NormalizeSecretName(sel);
  if (!name.ok()) return name.status();
  auto info = store->Info(*name);
  if (!info.ok()) return info.status().code() == StatusCode::kNotFound ? not_found : info.status();
  if (!Visible(*info, caller)) return not_found;
  return info;
}

void Server::ListSecrets(std::shared_ptr<HttpConn> c, const Caller& caller) {
  int limit = kMaxPage;
  if (auto l = c->Query("limit"); l) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (l->empty() || *end != '\0' || v < 1) return c->RespondError(400, "limit must be a positive integer");
    limit = static_cast<int>(std::min<long>(v, kMaxPage));
  }
  std::string after = c->Query("nextToken").value_or("");
  asio::post(*workers_, [this, c, caller, limit, after] {
    auto store = Secrets();
    auto all = store.ok() ? (*store)->List() : StatusOr<std::vector<secrets::SecretInfo>>(store.status());
    if (!all.ok()) {
      Status st = all.status();
      return asio::post(c->executor(), [c, st] { c->RespondError(500, st.message()); });
    }
    json arr = json::array();
    HeaderList extra;
    std::string last;
    for (const auto& s : *all) {  // ordered by name; the token is the last name of the page
      if (!Visible(s, caller) || (!after.empty() && s.name <= after)) continue;
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
