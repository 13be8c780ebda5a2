// Secrets and the per-sandbox CA in the daemon (docs/secrets.md): the
// encrypted store (opened on first use), the broker table the egress proxy
// asks about brokered secrets, the redactor fed with every stored value, the
// sandbox CA minted and installed in each guest that needs interception, and
// the secret.* audit records. The daemon owns one; the HTTP side of the E2B
// secrets API is server/secrets_api.cc. Attach, InstallSandboxCa, Commit:
// secrets_attach.cc.
//
// Over a sandbox's life (secrets_lifecycle.cc):
//   create (cold or from a named snapshot)  Attach → InstallSandboxCa → Commit
//   daemon restart (adopt)   AddSecretEnvToAdopt (env for a later cold resume
//                            or fork), Init (broker entries, stale rows
//                            dropped), ReinstallCas: a fresh CA per running
//                            sandbox, installed in the guest
//   fork                     Inherit: the parent's bindings and placeholders,
//                            a CA of the child's own
//   pause / resume           the entries stay; a sandbox adopted while paused
//                            gets its fresh CA on resume (EnsureSandboxCa)
//   kill / TTL / max life    Forget
// The CA key is never persisted: a restarted daemon mints a new CA, and the
// install replaces the previous airlock CA in the guest's bundle.
//
// Threads: every method may block (SQLite, the guest's agent) except
// broker(); call them on a worker. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/manager.h"
#include "egress/policy.h"
#include "secrets/broker.h"
#include "secrets/redactor.h"
#include "secrets/sandbox_ca.h"
#include "secrets/secret_store.h"
#include "control/caller.h"
#include "secrets/spec.h"

namespace airlock::control {

// Secrets resolved for one create.
struct SecretAttachment {
  std::vector<secrets::Binding> bindings;
  std::vector<secrets::BrokeredSecret> brokered;
  std::shared_ptr<secrets::SandboxCa> ca;  // when anything is brokered
};

// Writes `pem` as the guest's airlock CA (root): the file
// /usr/local/share/ca-certificates/airlock-sandbox.crt, and the system bundle,
// where it replaces the airlock CA installed before. FailedPrecondition when
// not running; the agent's error when it does not answer within 3 s.
Status InstallCaCert(const Sandbox& sb, const std::string& pem, std::chrono::seconds timeout);
// The same for the agent at `endpoint` (token: its X-Access-Token); returns
// within timeout + 5 s whatever the agent does.
Status InstallCaCertAt(const AgentEndpoint& endpoint, const std::string& token, const std::string& pem,
                       std::chrono::seconds timeout);

class SecretsService {
 public:
  struct Options {
    std::string db_path;  // the store shares the registry's database
    std::string db_dir;   // where secrets.key is (its existence: secrets in use)
    // How long a sandbox CA is valid: longer than any sandbox can live.
    std::chrono::seconds ca_lifetime{86400};
  };
  // What the service needs of the daemon.
  struct Hooks {
    std::function<void(nlohmann::json)> audit;  // one audit record
    std::function<void(const std::string& sandbox, std::string level, std::string message)> sandbox_log;
    // Runs `fn` on the worker pool after `delay` (zero: as soon as one is free).
    std::function<void(std::chrono::milliseconds delay, std::function<void()> fn)> run_later;
  };
  SecretsService(Options options, std::shared_ptr<secrets::Redactor> redactor, Hooks hooks);
  SecretsService(const SecretsService&) = delete;
  SecretsService& operator=(const SecretsService&) = delete;

  // The brokered-secret table the egress proxy queries.
  std::shared_ptr<secrets::Broker> broker() const { return broker_; }

  // Daemon start, in this order: AddSecretEnvToAdopt before Manager::Open;
  // Init once the manager adopted (`adopted`: the ids it kept; other
  // sandboxes' bindings are dropped); ReinstallCas for the running ones
  // once the worker pool runs.
  void AddSecretEnvToAdopt(std::vector<AdoptRequest>* adopt);
  Status Init(Manager* manager, const std::vector<std::string>& adopted);
  void ReinstallCas(const std::vector<std::string>& running);

  // Create: reads the values of `bindings` and adds env vars to *opts (the
  // value for scope env, a placeholder for brokered). InvalidArgument for a
  // bad use; PermissionDenied (403) when `caller` may not use a secret.
  StatusOr<SecretAttachment> Attach(const std::vector<secrets::Binding>& bindings, const Caller& caller,
                                    CreateOptions* opts);
  // Generates the sandbox's CA into att->ca when a secret is brokered or the
  // egress policy has network.rules (the CA's names: the secrets' hosts and
  // the rules' patterns), and installs its certificate in the guest.
  Status InstallSandboxCa(const Sandbox& sb, const egress::EgressPolicy& policy, SecretAttachment* att);
  // Records the attachment of the created sandbox `id` (store, broker, audit).
  void Commit(const std::string& id, SecretAttachment att, const std::string& key_id);
  // Before a policy update: when its network.rules name a host the
  // sandbox's CA does not cover, a new CA (old names + new) is made,
  // installed in the guest (with the CA env vars for new processes) and
  // handed to the broker.
  Status CoverRuleHosts(const std::string& id, const egress::EgressPolicy& policy);
  // A fork child gets the parent's bindings and its own CA. Errors: the CA
  // could not be installed (the caller destroys the child).
  Status Inherit(const std::string& parent, const Sandbox& child, const std::string& key_id);
  // Mints and installs a CA when `id` has brokered secrets but none. false:
  // it failed (logged; the sandbox works without interception).
  bool EnsureSandboxCa(const std::string& id);
  // The sandbox is gone: its broker entries and bindings go too.
  void Forget(const std::string& id);
  // GET /sandboxes/{id}: "secrets" [{name, scope, env, hosts}], "caCertificate".
  void AddSecretFields(const std::string& id, nlohmann::json& detail);

  // The E2B secrets API's store operations (the routes: secrets_api.cc).
  // A secret belongs to the team of the key that created it; another team's
  // is NotFound like one that does not exist (admin keys see every team's).
  StatusOr<secrets::SecretInfo> CreateSecret(const Caller& caller, const std::string& name, std::string value,
                                             const std::map<std::string, std::string>& metadata,
                                             const secrets::SecretPolicy& policy);
  // The secret `selector` (its id "sec_..." or its name) if `caller` may see it.
  StatusOr<secrets::SecretInfo> FindVisible(const Caller& caller, const std::string& selector);
  // A new value (version + 1); a present metadata replaces the stored one
  // and the policy it carries.
  StatusOr<secrets::SecretInfo> UpdateSecret(const Caller& caller, const std::string& selector, std::string value,
                                             const std::optional<std::map<std::string, std::string>>& metadata);
  Status DeleteSecret(const Caller& caller, const std::string& selector);
  // The API secrets `caller` may see, ordered by name.
  StatusOr<std::vector<secrets::SecretInfo>> VisibleSecrets(const Caller& caller);

  // A cluster node's share of the cluster's secrets (cluster/secret_replica.h),
  // set once before use: `store_opened` is called once the store is open
  // (the replica observes its changes); `refresh` imports the registry's
  // copy of the secrets a create names before Attach reads them (its error
  // is logged and the local copy used).
  struct ClusterSource {
    std::function<void(secrets::SecretStore& store)> store_opened;
    std::function<Status(const std::vector<std::string>& names)> refresh;
  };
  void SetClusterSource(ClusterSource source) { cluster_ = std::move(source); }
  // The store, opened on first use (the cluster replica imports into it).
  StatusOr<secrets::SecretStore*> OpenStore() { return Store(); }
  // A value imported from another node: redacted from every log from now on.
  void Redact(const std::string& name, const std::string& value) { (void)redactor_->Add(name, value); }

 private:
  StatusOr<secrets::SecretStore*> Store();  // opened on first use
  Status RefreshRedactor();
  bool InUse() const;  // a secret was ever set (the key file exists)
  StatusOr<std::vector<secrets::BrokeredSecret>> BrokeredFromStore(const std::vector<secrets::Binding>& bindings);
  // A fresh CA for `id` naming the brokered secrets' hosts and the rule
  // patterns (`rule_hosts`, else the sandbox's current network.rules).
  StatusOr<std::shared_ptr<secrets::SandboxCa>> MintSandboxCa(
      const std::string& id, const std::vector<secrets::BrokeredSecret>& brokered,
      std::optional<std::vector<std::string>> rule_hosts = std::nullopt);
  std::vector<std::string> RuleHostsOf(const std::string& id);
  void DropStaleBindings(const std::vector<std::string>& adopted);
  void EnsureSandboxCaAsync(const std::string& id, int attempt);  // up to 3 attempts

  const Options options_;
  const std::shared_ptr<secrets::Redactor> redactor_;
  const Hooks hooks_;
  const std::shared_ptr<secrets::Broker> broker_ = std::make_shared<secrets::Broker>();
  Manager* manager_ = nullptr;  // set by Init
  std::mutex mu_;
  std::unique_ptr<secrets::SecretStore> store_;  // guarded by mu_
  std::set<std::string> ca_installing_;          // guarded by mu_
  std::mutex api_mu_;                            // read-modify-write of a secret's version
  ClusterSource cluster_;
};

}  // namespace airlock::control
