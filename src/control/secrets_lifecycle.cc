// SecretsService over a sandbox's whole life (docs/secrets.md, "Lifecycle";
// the table is in secrets_service.h): restart, fork, resume, GET fields,
// and installing the CA in a guest.
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/log.h"
#include "control/secrets_service.h"
#include "common/agent_port.h"
#include "core/agent_init.h"

namespace airlock::control {

using nlohmann::json;

namespace {

constexpr const char* kCaFile = "/usr/local/share/ca-certificates/airlock-sandbox.crt";
constexpr const char* kBundle = "/etc/ssl/certs/ca-certificates.crt";
// The line that precedes airlock's CA in the bundle, so a later install (a
// restarted daemon, a fork child, a sandbox from a named snapshot) replaces
// it instead of piling up certificates whose keys are gone.
constexpr const char* kBundleMarker = "# airlock sandbox CA";

}  // namespace

static Status InstallCaWith(const EnvdClient& agent, const std::string& pem, std::chrono::seconds timeout);

Status InstallCaCert(const Sandbox& sb, const std::string& pem, std::chrono::seconds timeout) {
  // Running, or in its bring-up's handover step (its agent is initialised).
  if (sb.state() != SandboxState::kRunning && sb.state() != SandboxState::kCreating)
    return FailedPrecondition("sandbox " + sb.id() + " is not running");
  return InstallCaCertAt(AgentEndpoint{sb.netns_ip(), kAgentPort}, sb.access_token(), pem, timeout);
}

Status InstallCaCertAt(const AgentEndpoint& endpoint, const std::string& token, const std::string& pem,
                       std::chrono::seconds timeout) {
  // A client of its own, so a watchdog can cut a guest that never answers
  // (dead, or a hostile one holding the stream open) without touching the
  // sandbox's client: the whole install is bounded by `timeout` + 5 s.
  EnvdClient agent(endpoint, token);
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, timeout + std::chrono::seconds(5), [&] { return finished; })) agent.CancelAll();
  });
  Status st = InstallCaWith(agent, pem, timeout);
  {
    std::lock_guard<std::mutex> l(mu);
    finished = true;
  }
  cv.notify_all();
  watchdog.join();
  return st;
}

static Status InstallCaWith(const EnvdClient& agent, const std::string& pem, std::chrono::seconds timeout) {
  // Fail fast on a guest that does not answer (a restarted daemon must not
  // wait on a dead one).
  RETURN_IF_ERROR(agent.Health(std::chrono::seconds(3)).WithContext("agent"));
  const std::string script = std::string("set -e; umask 022; c=") + kCaFile + "; b=" + kBundle + "; m='" +
                             kBundleMarker +
                             "'\n"
                             "mkdir -p \"${c%/*}\"\n"
                             "printf '%s' \"$AIRLOCK_CA_PEM\" > \"$c.tmp\"; mv -f \"$c.tmp\" \"$c\"\n"
                             // The previous airlock CA (from the marker to its END line) leaves the bundle.
                             "if [ -f \"$b\" ]; then sed -i \"/^$m\\$/,/^-----END CERTIFICATE-----\\$/d\" \"$b\"; fi\n"
                             "if [ -s \"$b\" ] && [ -n \"$(tail -c1 \"$b\")\" ]; then echo >> \"$b\"; fi\n"
                             "{ echo \"$m\"; cat \"$c\"; } >> \"$b\"\n";
  ExecRequest req;
  req.cmd = "/bin/sh";
  req.args = {"-c", script};
  req.envs = {{"AIRLOCK_CA_PEM", pem}};
  req.user = "root";
  req.timeout = timeout;
  ASSIGN_OR_RETURN(auto res, agent.Exec(req, {}));
  if (res.ShellCode() != 0) return Internal("installing the sandbox CA in the guest: " + res.status);
  return OkStatus();
}

std::vector<std::string> SecretsService::RuleHostsOf(const std::string& id) {
  auto* eg = manager_ ? manager_->egress() : nullptr;
  if (!eg) return {};
  auto p = eg->Policy(id);
  return p.ok() ? p->HeaderRulePatterns() : std::vector<std::string>();
}

StatusOr<std::shared_ptr<secrets::SandboxCa>> SecretsService::MintSandboxCa(
    const std::string& id, const std::vector<secrets::BrokeredSecret>& brokered,
    std::optional<std::vector<std::string>> rule_hosts) {
  // The CA's names: the brokered secrets' hosts and the network.rules patterns.
  std::vector<std::string> hosts = rule_hosts ? *rule_hosts : RuleHostsOf(id);
  for (const auto& b : brokered) {
    for (const auto& h : b.hosts)
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  if (hosts.empty()) return FailedPrecondition("sandbox " + id + " has no host to intercept");
  return secrets::SandboxCa::Generate(id, hosts, options_.ca_lifetime);
}

bool SecretsService::InUse() const {
  struct stat st;
  return ::stat((options_.db_dir + "/secrets.key").c_str(), &st) == 0;
}

StatusOr<std::vector<secrets::BrokeredSecret>> SecretsService::BrokeredFromStore(
    const std::vector<secrets::Binding>& bindings) {
  std::vector<secrets::BrokeredSecret> out;
  ASSIGN_OR_RETURN(auto* store, Store());
  for (const auto& b : bindings) {
    if (b.scope != secrets::Scope::kBrokered) continue;
    auto v = store->Get(b.name);
    if (!v.ok()) {
      LOG_WARN("sandbox={} secret {}: {}", b.sandbox, b.name, v.status().message());
      continue;
    }
    out.push_back({b.name, b.placeholder, *v, b.hosts});
  }
  return out;
}

void SecretsService::AddSecretEnvToAdopt(std::vector<AdoptRequest>* adopt) {
  if (!InUse()) return;
  auto store = Store();
  if (!store.ok()) return LOG_WARN("secrets: {}", store.status().message());
  for (auto& r : *adopt) {
    auto bindings = (*store)->BindingsOf(r.record.id);
    if (!bindings.ok()) {
      LOG_WARN("sandbox={} secrets: {}", r.record.id, bindings.status().message());
      continue;
    }
    // What AttachSecrets gave the guest at create: a cold resume or a fork
    // child's /init sends it again.
    bool brokered = false;
    for (const auto& b : *bindings) {
      if (b.scope == secrets::Scope::kBrokered) {
        r.env_vars[b.env] = b.placeholder;
        brokered = true;
        continue;
      }
      auto v = (*store)->Get(b.name);
      if (!v.ok()) {
        LOG_WARN("sandbox={} secret {}: {}", r.record.id, b.name, v.status().message());
        continue;
      }
      (void)redactor_->Add(b.name, *v);
      r.env_vars[b.env] = *v;
    }
    if (brokered) {
      for (auto [k, v] :
           {std::pair{"NODE_EXTRA_CA_CERTS", kCaFile}, {"REQUESTS_CA_BUNDLE", kBundle}, {"SSL_CERT_FILE", kBundle}}) {
        r.env_vars.emplace(k, v);
      }
    }
  }
}

void SecretsService::DropStaleBindings(const std::vector<std::string>& adopted) {
  auto store = Store();
  if (!store.ok()) return;
  auto bound = (*store)->BoundSandboxes();
  if (!bound.ok()) return LOG_WARN("secrets: {}", bound.status().message());
  std::set<std::string> kept(adopted.begin(), adopted.end());
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& id : *bound) {
    if (kept.count(id)) continue;
    LOG_INFO("sandbox={} gone: dropping its secret bindings", id);
    (void)(*store)->DeleteBindings(id);
  }
}

bool SecretsService::EnsureSandboxCa(const std::string& id) {
  if (broker_->CaFor(id) || (broker_->size(id) == 0 && RuleHostsOf(id).empty())) return true;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!ca_installing_.insert(id).second) return true;  // another thread is at it
  }
  auto done = [&] {
    std::lock_guard<std::mutex> l(mu_);
    ca_installing_.erase(id);
  };
  std::shared_ptr<secrets::SandboxCa> ca;
  Status st = [&]() -> Status {
    std::shared_ptr<Sandbox> sb = manager_->Get(id);
    if (!sb) return NotFound("sandbox " + id + " not found");
    std::vector<secrets::BrokeredSecret> brokered;
    if (broker_->size(id) > 0) {
      ASSIGN_OR_RETURN(auto* store, Store());
      ASSIGN_OR_RETURN(auto bindings, store->BindingsOf(id));
      ASSIGN_OR_RETURN(brokered, BrokeredFromStore(bindings));
    }
    if (brokered.empty() && RuleHostsOf(id).empty())
      return NotFound("no brokered secret of this sandbox could be read");
    ASSIGN_OR_RETURN(ca, MintSandboxCa(id, brokered));
    return InstallCaCert(*sb, ca->cert_pem(), std::chrono::seconds(20));
  }();
  if (!st.ok()) {
    done();
    LOG_WARN("sandbox={} no sandbox CA (brokered hosts will not be intercepted): {}", id, st.message());
    hooks_.sandbox_log(id, "warn", "the sandbox CA could not be installed: " + st.message());
    return false;
  }
  broker_->SetCa(id, ca);
  if (!manager_->Get(id)) broker_->SetCa(id, nullptr);  // killed meanwhile
  done();
  LOG_INFO("sandbox={} fresh sandbox CA installed", id);
  hooks_.sandbox_log(id, "info", "a fresh sandbox CA was installed (the previous one's key is gone)");
  return true;
}

void SecretsService::EnsureSandboxCaAsync(const std::string& id, int attempt) {
  // A guest slow to answer (a loaded host) gets two more tries, 10 s apart.
  hooks_.run_later(attempt == 1 ? std::chrono::milliseconds(0) : std::chrono::milliseconds(10000), [this, id, attempt] {
    if (!EnsureSandboxCa(id) && attempt < 3) EnsureSandboxCaAsync(id, attempt + 1);
  });
}

void SecretsService::ReinstallCas(const std::vector<std::string>& running) {
  // EnsureSandboxCa skips those with nothing to intercept; paused ones get
  // theirs when they resume (SandboxEvents::resumed).
  for (const auto& id : running) EnsureSandboxCaAsync(id, 1);
}

Status SecretsService::Inherit(const std::string& parent, const Sandbox& child, const std::string& key_id) {
  secrets::SecretStore* store = nullptr;
  std::vector<secrets::Binding> bindings;
  if (InUse()) {
    ASSIGN_OR_RETURN(store, Store());
    ASSIGN_OR_RETURN(bindings, store->BindingsOf(parent));
  }
  for (auto& b : bindings) b.sandbox = child.id();
  std::vector<secrets::BrokeredSecret> brokered;
  if (!bindings.empty()) {
    ASSIGN_OR_RETURN(brokered, BrokeredFromStore(bindings));
  }
  std::shared_ptr<secrets::SandboxCa> ca;
  if (!brokered.empty() || !RuleHostsOf(child.id()).empty()) {
    // Never the parent's CA: each child's interception is its own.
    ASSIGN_OR_RETURN(ca, MintSandboxCa(child.id(), brokered));
    RETURN_IF_ERROR(InstallCaCert(child, ca->cert_pem(), std::chrono::seconds(30)));
  }
  if (bindings.empty()) {
    broker_->SetCa(child.id(), ca);
    return OkStatus();
  }
  RETURN_IF_ERROR(store->PutBindings(bindings));
  broker_->Register(child.id(), std::move(brokered));
  broker_->SetCa(child.id(), ca);
  for (const auto& b : bindings) {
    json r = {{"action", "secret.attach"},
              {"sandbox", child.id()},
              {"name", b.name},
              {"scope", std::string(secrets::ScopeName(b.scope))},
              {"env", b.env},
              {"exposed_to_guest", b.scope == secrets::Scope::kEnv},
              {"forked_from", parent}};
    if (!b.hosts.empty()) r["hosts"] = b.hosts;
    if (!key_id.empty()) r["api_key_id"] = key_id;
    hooks_.audit(std::move(r));
  }
  return OkStatus();
}

void SecretsService::AddSecretFields(const std::string& id, json& detail) {
  json list = json::array();
  if (InUse()) {
    if (auto store = Store(); store.ok()) {
      if (auto bindings = (*store)->BindingsOf(id); bindings.ok()) {
        for (const auto& b : *bindings) {
          json s = {{"name", b.name}, {"scope", std::string(secrets::ScopeName(b.scope))}, {"env", b.env}};
          if (b.scope == secrets::Scope::kBrokered) s["hosts"] = b.hosts;
          list.push_back(std::move(s));
        }
      }
    }
  }
  detail["secrets"] = std::move(list);
  auto ca = broker_->CaFor(id);
  detail["caCertificate"] = ca ? json(ca->cert_pem()) : json(nullptr);
}

}  // namespace airlock::control
