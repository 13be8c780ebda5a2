// SecretsService: the E2B secrets API's store operations (docs/secrets.md
// "The E2B secrets API"; the routes are in secrets_api.cc).
#include "control/secrets_service.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "common/log.h"
#include "core/registry.h"  // RandomHex
#include "secrets/secret_store.h"
#include "secrets/secret_rules.h"

namespace airlock::control {

namespace {

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

bool Visible(const secrets::SecretInfo& s, const Caller& caller) {
  return !s.api.id.empty() && (caller.admin || s.api.owner == caller.team);
}

}  // namespace

StatusOr<secrets::SecretInfo> SecretsService::CreateSecret(const Caller& caller, const std::string& name,
                                                           std::string value,
                                                           const std::map<std::string, std::string>& metadata,
                                                           const secrets::SecretPolicy& policy) {
  secrets::ApiAttributes api{NewSecretId(), caller.team, 1, metadata};
  Status st;
  StatusOr<secrets::SecretInfo> info = Status(StatusCode::kInternal, "");
  if (auto store = Store(); !store.ok()) {
    st = store.status();
  } else {
    std::lock_guard<std::mutex> l(api_mu_);
    st = (*store)->Create(name, value, policy, api);
    if (st.ok()) {
      (void)redactor_->Add(name, value);
      info = (*store)->Info(name);
      st = info.status();
    }
  }
  std::fill(value.begin(), value.end(), '\0');
  if (st.code() == StatusCode::kAlreadyExists)
    return Status(StatusCode::kAlreadyExists, "secret " + name + " already exists");
  if (!st.ok()) return st;
  nlohmann::json r = {{"action", "secret.created"},
                      {"name", name},
                      {"secretID", api.id},
                      {"team", caller.team},
                      {"scope", std::string(secrets::ScopeName(*policy.scope))},
                      {"api_key_id", caller.key_id}};
  if (!policy.hosts.empty()) r["hosts"] = policy.hosts;
  hooks_.audit(std::move(r));
  return info;
}

StatusOr<secrets::SecretInfo> SecretsService::UpdateSecret(
    const Caller& caller, const std::string& selector, std::string value,
    const std::optional<std::map<std::string, std::string>>& metadata) {
  StatusOr<secrets::SecretInfo> out_info = Status(StatusCode::kInternal, "");
  secrets::SecretPolicy policy;
  {
    std::lock_guard<std::mutex> l(api_mu_);
    auto info = FindVisible(caller, selector);
    out_info = info.status();
    if (info.ok()) {
      secrets::ApiAttributes api = info->api;
      policy = info->policy;
      Status st;
      if (metadata) {
        // A present metadata object replaces the stored one (and the policy it carries).
        auto p = secrets::PolicyFromSecretMetadata(*metadata, api.owner);
        if (p.ok()) {
          policy = *p;
          api.metadata = *metadata;
        } else {
          st = p.status();
        }
      }
      ++api.version;
      auto store = Store();
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
    hooks_.audit({{"action", "secret.updated"},
                  {"name", out_info->name},
                  {"secretID", out_info->api.id},
                  {"version", out_info->api.version},
                  {"team", caller.team},
                  {"api_key_id", caller.key_id},
                  {"scope", policy.scope ? std::string(secrets::ScopeName(*policy.scope)) : ""}});
  }
  return out_info;
}

Status SecretsService::DeleteSecret(const Caller& caller, const std::string& selector) {
  Status st;
  std::string name, id;
  {
    std::lock_guard<std::mutex> l(api_mu_);
    auto info = FindVisible(caller, selector);
    st = info.status();
    if (info.ok()) {
      name = info->name;
      id = info->api.id;
      auto store = Store();
      st = store.ok() ? (*store)->Remove(name) : store.status();
    }
  }
  if (st.ok()) {
    hooks_.audit({{"action", "secret.deleted"},
                  {"name", name},
                  {"secretID", id},
                  {"team", caller.team},
                  {"api_key_id", caller.key_id}});
  }
  return st;
}

StatusOr<std::vector<secrets::SecretInfo>> SecretsService::VisibleSecrets(const Caller& caller) {
  ASSIGN_OR_RETURN(auto* store, Store());
  ASSIGN_OR_RETURN(auto all, store->List());
  std::vector<secrets::SecretInfo> out;
  for (auto& s : all) {
    if (Visible(s, caller)) out.push_back(std::move(s));
  }
  return out;
}

StatusOr<secrets::SecretInfo> SecretsService::FindVisible(const Caller& caller, const std::string& selector) {
  std::string sel = selector;
  sel.erase(0, sel.find_first_not_of(" \t"));
  sel.erase(sel.find_last_not_of(" \t") + 1);
  std::string lower = sel;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const Status not_found = NotFound("secret " + sel.substr(0, 140) + " not found");
  ASSIGN_OR_RETURN(auto* store, Store());
  if (lower.rfind("sec_", 0) == 0) {
    ASSIGN_OR_RETURN(auto all, store->List());
    for (auto& s : all) {
      if (s.api.id == lower && Visible(s, caller)) return s;
    }
    return not_found;
  }
  auto name = secrets::NormalizeSecretName(sel);
  if (!name.ok()) return name.status();
  auto info = store->Info(*name);
  if (!info.ok()) return info.status().code() == StatusCode::kNotFound ? not_found : info.status();
  if (!Visible(*info, caller)) return not_found;
  return info;
}

}  // namespace airlock::control
