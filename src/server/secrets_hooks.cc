// Secrets in the daemon (docs/secrets.md): the create-request extension
//   "secrets": {"NAME": {"scope": "brokered"|"env", "hosts": ["api.x.com", "*.y.com"], "env": "VAR"}}
// resolved against the encrypted store, the broker table for the egress
// proxy, the redactor fed with every stored value, and the audit records.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "common/log.h"
#include "core/agent_init.h"
#include "secrets/broker.h"
#include "secrets/egress_broker.h"
#include "secrets/log_sink.h"
#include "secrets/redactor.h"
#include "secrets/secret_store.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {
constexpr const char* kSandboxCaPath = "/usr/local/share/ca-certificates/airlock-sandbox.crt";
constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";
constexpr size_t kMaxSecretsPerSandbox = 64;
constexpr size_t kMaxHostsPerSecret = 32;

// Runtimes that ignore the system bundle (Node, requests' certifi) are
// pointed at it.
const std::map<std::string, std::string>& CaEnvVars() {
  static const std::map<std::string, std::string> v = {
      {"NODE_EXTRA_CA_CERTS", kSandboxCaPath}, {"REQUESTS_CA_BUNDLE", kSystemBundle}, {"SSL_CERT_FILE", kSystemBundle}};
  return v;
}

}  // namespace


StatusOr<secrets::SecretStore*> Server::Secrets() {
  std::lock_guard<std::mutex> l(secrets_mu_);
  if (!secret_store_) {
    ASSIGN_OR_RETURN(secret_store_, secrets::SecretStore::Open(db_path_, db_dir_ + "/secrets.key"));
  }
  return secret_store_.get();
}

Status Server::InitSecrets() {
  if (!broker_) broker_ = std::make_shared<secrets::Broker>();
  secrets::InstallRedactingLogger(redactor_);
  struct stat st;
  if (::stat((db_dir_ + "/secrets.key").c_str(), &st) != 0) return OkStatus();  // no secret was ever set
  RETURN_IF_ERROR(RefreshRedactor());
  // Adopted sandboxes get their brokered secrets back.
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, e] : sandboxes_) ids.push_back(id);
  }
  ASSIGN_OR_RETURN(auto* store, Secrets());
  for (const auto& id : ids) {
    ASSIGN_OR_RETURN(auto bindings, store->BindingsOf(id));
    ASSIGN_OR_RETURN(auto brokered, BrokeredFromStore(bindings));
    broker_->Register(id, std::move(brokered));  // the CA: ReinstallCasAsync / EnsureSandboxCa
  }
  DropStaleBindings();
  return OkStatus();
}

Status Server::RefreshRedactor() {
  ASSIGN_OR_RETURN(auto* store, Secrets());
  ASSIGN_OR_RETURN(auto list, store->List());
  for (const auto& s : list) {
    auto v = store->Get(s.name);
    if (v.ok()) (void)redactor_->Add(s.name, *v);
  }
  return OkStatus();
}

StatusOr<std::vector<secrets::Binding>> ParseSecretsSpec(const json& spec) {
  std::vector<secrets::Binding> out;
  if (spec.is_null()) return out;
  if (!spec.is_object()) return InvalidArgument("secrets must be an object {NAME: {scope, hosts, env}}");
  if (spec.size() > kMaxSecretsPerSandbox) return InvalidArgument("at most 64 secrets per sandbox");
  for (auto& [name, v] : spec.items()) {
    RETURN_IF_ERROR(secrets::ValidateSecretName(name));
    if (!v.is_object()) return InvalidArgument("secrets." + name + " must be an object");
    secrets::Binding b;
    b.name = name;
    b.env = name;
    std::string scope = "brokered";
    b.scope_given = false;
    for (auto& [k, f] : v.items()) {
      if (k == "scope") {
        if (!f.is_string()) return InvalidArgument("secrets." + name + ".scope must be \"brokered\" or \"env\"");
        scope = f.get<std::string>();
        b.scope_given = true;
      } else if (k == "env") {
        if (!f.is_string()) return InvalidArgument("secrets." + name + ".env must be a string");
        b.env = f.get<std::string>();
        RETURN_IF_ERROR(secrets::ValidateEnvName(b.env).WithContext("secrets." + name + ".env"));
      } else if (k == "hosts") {
        if (!f.is_array() || f.size() > kMaxHostsPerSecret) {
          return InvalidArgument("secrets." + name + ".hosts must be an array of at most 32 host names");
        }
        for (auto& h : f) {
          std::string host = h.is_string() ? h.get<std::string>() : "";
          bool ok = !host.empty() && host.size() <= 253 &&
                    host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*") ==
                        std::string::npos &&
                    host.find('*', host.rfind("*.", 0) == 0 ? 1 : 0) == std::string::npos && host != "*.";
          if (!ok)
            return InvalidArgument("secrets." + name + ".hosts: '" + host.substr(0, 64) +
                                   "' is not a host name or *.domain pattern");
          b.hosts.push_back(host);
        }
      } else {
        return InvalidArgument("secrets." + name + ": unknown field '" + k + "' (scope, hosts, env)");
      }
    }
    if (!secrets::ValidateEnvName(b.env).ok()) {
      return InvalidArgument("secrets." + name + ": the name is no environment variable name; give \"env\"");
    }
    // Omitted scope / hosts come from the secret's stored policy (CheckUse).
    if (scope == "env") {
      b.scope = secrets::Scope::kEnv;
      if (!b.hosts.empty()) return InvalidArgument("secrets." + name + ": hosts only apply to scope \"brokered\"");
    } else if (scope == "brokered") {
      b.scope = secrets::Scope::kBrokered;
    } else {
      return InvalidArgument("secrets." + name + ".scope must be \"brokered\" or \"env\"");
    }
    out.push_back(std::move(b));
  }
  return out;
}

StatusOr<SecretAttachment> Server::AttachSecrets(const json& spec, const Caller& caller, CreateOptions* opts) {
  SecretAttachment att;
  ASSIGN_OR_RETURN(att.bindings, ParseSecretsSpec(spec));
  if (!opts->egress_policy.header_rules().empty()) {
    for (const auto& [k, v] : CaEnvVars()) opts->env_vars.emplace(k, v);
  }
  if (att.bindings.empty()) return att;
  ASSIGN_OR_RETURN(auto* store, Secrets());
  for (auto& b : att.bindings) {
    // Existence is an admin's business: another team learns only that it may not use the name.
    auto policy = store->PolicyOf(b.name);
    if (!policy.ok()) {
      if (policy.status().code() != StatusCode::kNotFound) return policy.status();
      if (!caller.admin) {
        return PermissionDenied("secret " + b.name + ": no such secret for this key's team (it does not exist, or "
                                "this team may not use it)");
      }
      return InvalidArgument(policy.status().message());
    }
    RETURN_IF_ERROR(secrets::CheckUse(*policy, caller.team, caller.admin, &b));
    if (b.scope == secrets::Scope::kBrokered && b.placeholder.empty()) b.placeholder = secrets::Broker::NewPlaceholder();
    auto v = store->Get(b.name);
    if (!v.ok()) {
      if (v.status().code() == StatusCode::kNotFound) return InvalidArgument(v.status().message());
      return v.status();
    }
    (void)redactor_->Add(b.name, *v);
    if (opts->env_vars.count(b.env)) return InvalidArgument("envVars." + b.env + " collides with secret " + b.name);
    if (b.scope == secrets::Scope::kEnv) {
      opts->env_vars[b.env] = *v;
    } else {
      opts->env_vars[b.env] = b.placeholder;
      att.brokered.push_back({b.name, b.placeholder, *v, b.hosts});
    }
  }
  if (!att.brokered.empty()) {
    for (const auto& [k, v] : CaEnvVars()) opts->env_vars.emplace(k, v);
  }
  return att;
}

Status Server::InstallSandboxCa(const Sandbox& sb, const egress::EgressPolicy& policy, SecretAttachment* att) {
  if (att->brokered.empty() && policy.header_rules().empty()) return OkStatus();
  ASSIGN_OR_RETURN(att->ca, MintSandboxCa(sb.id(), att->brokered, policy.HeaderRulePatterns()));
  return InstallCaCert(sb, att->ca->cert_pem(), std::chrono::seconds(30));
}

Status Server::CoverRuleHosts(const std::string& id, const egress::EgressPolicy& policy) {
  auto wanted = policy.HeaderRulePatterns();
  if (wanted.empty()) return OkStatus();
  auto current = broker_->CaFor(id);
  std::vector<std::string> hosts = current ? current->hosts() : std::vector<std::string>();
  bool covered = true;
  for (const auto& w : wanted) {
    if (std::find(hosts.begin(), hosts.end(), w) == hosts.end()) {
      hosts.push_back(w);
      covered = false;
    }
  }
  if (covered) return OkStatus();
  auto sb = manager_->Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  ASSIGN_OR_RETURN(auto ca, MintSandboxCa(id, {}, hosts));
  RETURN_IF_ERROR(InstallCaCert(*sb, ca->cert_pem(), std::chrono::seconds(30))
                      .WithContext("network.rules need the sandbox CA in the guest"));
  // New processes get the variables that point runtimes at the bundle.
  AgentInitRequest init;
  init.host = sb->netns_ip();
  init.auth_token = sb->access_token();
  init.env_vars = CaEnvVars();
  RETURN_IF_ERROR(PostAgentInit(init).WithContext("network.rules: CA environment for new processes"));
  broker_->SetCa(id, ca);
  Audit({{"action", "sandbox.ca"}, {"sandbox", id}, {"hosts", hosts}});
  return OkStatus();
}

void Server::CommitSecrets(const std::string& id, SecretAttachment att, const std::string& key_id) {
  if (att.ca) broker_->SetCa(id, att.ca);
  if (att.bindings.empty()) return;
  for (auto& b : att.bindings) b.sandbox = id;
  if (auto store = Secrets(); store.ok()) {
    if (Status st = (*store)->PutBindings(att.bindings); !st.ok()) LOG_WARN("sandbox={} secrets: {}", id, st.message());
  }
  broker_->Register(id, std::move(att.brokered));
  for (const auto& b : att.bindings) {
    json r = {{"action", "secret.attach"},
              {"sandbox", id},
              {"name", b.name},
              {"scope", std::string(secrets::ScopeName(b.scope))},
              {"env", b.env},
              {"exposed_to_guest", b.scope == secrets::Scope::kEnv}};
    if (!b.hosts.empty()) r["hosts"] = b.hosts;
    if (!key_id.empty()) r["api_key_id"] = key_id;
    Audit(std::move(r));
  }
}

void Server::ForgetSecrets(const std::string& id) {
  if (broker_) broker_->Forget(id);
  std::lock_guard<std::mutex> l(secrets_mu_);
  if (secret_store_) (void)secret_store_->DeleteBindings(id);
}

}  // namespace airlock::server
