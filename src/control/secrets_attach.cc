// SecretsService at create (docs/secrets.md): the create request's secrets
// (secrets/spec.h) resolved against the encrypted store, the
// broker table for the egress proxy, the redactor fed with every stored
// value, the sandbox CA, and the audit records.
#include <sys/stat.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "core/agent_init.h"
#include "secrets/broker.h"
#include "secrets/egress_broker.h"
#include "secrets/log_sink.h"
#include "secrets/redactor.h"
#include "secrets/secret_store.h"
#include "control/secrets_service.h"

namespace airlock::control {

using nlohmann::json;

namespace {
constexpr const char* kSandboxCaPath = "/usr/local/share/ca-certificates/airlock-sandbox.crt";
constexpr const char* kSystemBundle = "/etc/ssl/certs/ca-certificates.crt";

// Runtimes that ignore the system bundle (Node, requests' certifi) are
// pointed at it.
const std::map<std::string, std::string>& CaEnvVars() {
  static const std::map<std::string, std::string> v = {
      {"NODE_EXTRA_CA_CERTS", kSandboxCaPath}, {"REQUESTS_CA_BUNDLE", kSystemBundle}, {"SSL_CERT_FILE", kSystemBundle}};
  return v;
}

}  // namespace

StatusOr<secrets::SecretStore*> SecretsService::Store() {
  std::lock_guard<std::mutex> l(mu_);
  if (!store_) {
    ASSIGN_OR_RETURN(store_, secrets::SecretStore::Open(options_.db_path, options_.db_dir + "/secrets.key"));
    if (cluster_.store_opened) cluster_.store_opened(*store_);
  }
  return store_.get();
}

SecretsService::SecretsService(Options options, std::shared_ptr<secrets::Redactor> redactor, Hooks hooks)
    : options_(std::move(options)), redactor_(std::move(redactor)), hooks_(std::move(hooks)) {}

Status SecretsService::Init(Manager* manager, const std::vector<std::string>& adopted) {
  manager_ = manager;
  secrets::InstallRedactingLogger(redactor_);
  if (!InUse()) return OkStatus();  // no secret was ever set
  RETURN_IF_ERROR(RefreshRedactor());
  // Adopted sandboxes get their brokered secrets back.
  ASSIGN_OR_RETURN(auto* store, Store());
  for (const auto& id : adopted) {
    ASSIGN_OR_RETURN(auto bindings, store->BindingsOf(id));
    ASSIGN_OR_RETURN(auto brokered, BrokeredFromStore(bindings));
    broker_->Register(id, std::move(brokered));  // the CA: ReinstallCas / EnsureSandboxCa
  }
  DropStaleBindings(adopted);
  return OkStatus();
}

Status SecretsService::RefreshRedactor() {
  ASSIGN_OR_RETURN(auto* store, Store());
  ASSIGN_OR_RETURN(auto list, store->List());
  for (const auto& s : list) {
    auto v = store->Get(s.name);
    if (v.ok()) (void)redactor_->Add(s.name, *v);
  }
  return OkStatus();
}

StatusOr<SecretAttachment> SecretsService::Attach(const std::vector<secrets::Binding>& bindings, const Caller& caller,
                                                  CreateOptions* opts) {
  SecretAttachment att;
  att.bindings = bindings;
  if (!opts->egress_policy.header_rules().empty()) {
    for (const auto& [k, v] : CaEnvVars()) opts->env_vars.emplace(k, v);
  }
  if (att.bindings.empty()) return att;
  if (cluster_.refresh) {
    // What the other nodes know of these names (a secret made through a front a moment ago).
    std::vector<std::string> names;
    for (const auto& b : att.bindings) names.push_back(b.name);
    if (Status st = cluster_.refresh(names); !st.ok())
      LOG_WARN("secrets: the cluster's copy was not read ({}): this node's is used", st.message());
  }
  ASSIGN_OR_RETURN(auto* store, Store());
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

Status SecretsService::InstallSandboxCa(const Sandbox& sb, const egress::EgressPolicy& policy, SecretAttachment* att) {
  if (att->brokered.empty() && policy.header_rules().empty()) return OkStatus();
  ASSIGN_OR_RETURN(att->ca, MintSandboxCa(sb.id(), att->brokered, policy.HeaderRulePatterns()));
  return InstallCaCert(sb, att->ca->cert_pem(), std::chrono::seconds(30));
}

Status SecretsService::CoverRuleHosts(const std::string& id, const egress::EgressPolicy& policy) {
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
  hooks_.audit({{"action", "sandbox.ca"}, {"sandbox", id}, {"hosts", hosts}});
  return OkStatus();
}

void SecretsService::Commit(const std::string& id, SecretAttachment att, const std::string& key_id) {
  if (att.ca) broker_->SetCa(id, att.ca);
  if (att.bindings.empty()) return;
  for (auto& b : att.bindings) b.sandbox = id;
  if (auto store = Store(); store.ok()) {
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
    hooks_.audit(std::move(r));
  }
}

void SecretsService::Forget(const std::string& id) {
  broker_->Forget(id);
  std::lock_guard<std::mutex> l(mu_);
  if (store_) (void)store_->DeleteBindings(id);
}

}  // namespace airlock::control
