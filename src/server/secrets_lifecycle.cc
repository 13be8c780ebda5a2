// Brokered secrets and the per-sandbox CA over a sandbox's whole life
// (docs/secrets.md, "Lifecycle"): every way a sandbox comes to exist or comes
// back ends with the broker table, the store's bindings and the CA right.
//
//   create (cold or from a named snapshot)  secrets_hooks.cc: Attach → InstallSandboxCa → Commit
//   daemon restart (adopt)   AddSecretEnvToAdopt (env for a later cold resume
//                            or fork), InitSecrets (broker entries, stale rows
//                            dropped), ReinstallCasAsync: a fresh CA per
//                            running sandbox, installed in the guest
//   fork                     InheritSecrets: the parent's bindings and
//                            placeholders, a CA of the child's own
//   pause / resume           the entries stay; a sandbox adopted while paused
//                            gets its fresh CA on resume (EnsureSandboxCa)
//   kill / TTL / max life    ForgetSecrets (KillSandbox, DestroyAsync)
//
// The CA key is never persisted: a restarted daemon mints a new CA, and the
// install replaces the previous airlock CA in the guest's bundle.
#include <sys/stat.h>

#include <boost/asio/post.hpp>
#include <condition_variable>
#include <nlohmann/json.hpp>
#include <thread>

#include <algorithm>

#include "common/log.h"
#include "server/server.h"

namespace airlock::server {

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
  if (sb.state() != SandboxState::kRunning) return FailedPrecondition("sandbox " + sb.id() + " is not running");
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

std::vector<std::string> Server::RuleHostsOf(const std::string& id) {
  auto* eg = manager_ ? manager_->egress() : nullptr;
  if (!eg) return {};
  auto p = eg->Policy(id);
  return p.ok() ? p->HeaderRulePatterns() : std::vector<std::string>();
}

StatusOr<std::shared_ptr<secrets::SandboxCa>> Server::MintSandboxCa(
    const std::string& id, const std::vector<secrets::BrokeredSecret>& brokered,
    std::optional<std::vector<std::string>> rule_hosts) {
  // The CA's names: the brokered secrets' hosts and the network.rules patterns.
  std::vector<std::string> hosts = rule_hosts ? *rule_hosts : RuleHostsOf(id);
  for (const auto& b : brokered) {
    for (const auto& h : b.hosts)
      if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
  }
  if (hosts.empty()) return FailedPrecondition("sandbox " + id + " has no host to intercept");
  int64_t life_s = config_.max_lifetime_s > 0 ? config_.max_lifetime_s : config_.max_timeout_s;
  return secrets::SandboxCa::Generate(id, hosts, std::chrono::seconds(life_s + 86400));
}

bool Server::SecretsInUse() const {
  struct stat st;
  return ::stat((db_dir_ + "/secrets.key").c_str(), &st) == 0;
}

StatusOr<std::vector<secrets::BrokeredSecret>> Server::BrokeredFromStore(
    const std::vector<secrets::Binding>& bindings) {
  std::vector<secrets::BrokeredSecret> out;
  ASSIGN_OR_RETURN(auto* store, Secrets());
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

void Server::AddSecretEnvToAdopt(std::vector<AdoptRequest>* adopt) {
  if (!SecretsInUse()) return;
  auto store = Secrets();
  if (!store.ok()) return LOG_WARN("secrets: {}", store.status().message());
  for (auto& r : *adopt) {
    auto bindings = (*store)->BindingsOf(r.id);
    if (!bindings.ok()) {
      LOG_WARN("sandbox={} secrets: {}", r.id, bindings.status().message());
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
        LOG_WARN("sandbox={} secret {}: {}", r.id, b.name, v.status().message());
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

void Server::DropStaleBindings() {
  auto store = Secrets();
  if (!store.ok()) return;
  auto bound = (*store)->BoundSandboxes();
  if (!bound.ok()) return LOG_WARN("secrets: {}", bound.status().message());
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& id : *bound) {
    if (sandboxes_.count(id)) continue;
    LOG_INFO("sandbox={} gone: dropping its secret bindings", id);
    (void)(*store)->DeleteBindings(id);
  }
}

bool Server::EnsureSandboxCa(const std::string& id) {
  if (!broker_ || broker_->CaFor(id) || (broker_->size(id) == 0 && RuleHostsOf(id).empty())) return true;
  {
    std::lock_guard<std::mutex> l(secrets_mu_);
    if (!ca_installing_.insert(id).second) return true;  // another thread is at it
  }
  auto done = [&] {
    std::lock_guard<std::mutex> l(secrets_mu_);
    ca_installing_.erase(id);
  };
  std::shared_ptr<secrets::SandboxCa> ca;
  Status st = [&]() -> Status {
    std::shared_ptr<Sandbox> sb = manager_->Get(id);
    if (!sb) return NotFound("sandbox " + id + " not found");
    std::vector<secrets::BrokeredSecret> brokered;
    if (broker_->size(id) > 0) {
      ASSIGN_OR_RETURN(auto* store, Secrets());
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
    AddLog(id, "warn", "the sandbox CA could not be installed: " + st.message());
    return false;
  }
  broker_->SetCa(id, ca);
  if (!manager_->Get(id)) broker_->SetCa(id, nullptr);  // killed meanwhile
  done();
  LOG_INFO("sandbox={} fresh sandbox CA installed", id);
  AddLog(id, "info", "a fresh sandbox CA was installed (the previous one's key is gone)");
  return true;
}

void Server::EnsureSandboxCaAsync(const std::string& id, int attempt) {
  asio::post(*workers_, [this, id, attempt] {
    if (EnsureSandboxCa(id) || attempt >= 3) return;
    // A guest slow to answer (a loaded host) gets two more tries, 10 s apart.
    auto timer = std::make_shared<asio::steady_timer>(io_, std::chrono::seconds(10));
    timer->async_wait([this, timer, id, attempt](boost::system::error_code ec) {
      if (!ec) EnsureSandboxCaAsync(id, attempt + 1);
    });
  });
}

void Server::ReinstallCasAsync() {
  if (!broker_) return;
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, e] : sandboxes_) {
      if (e.rec.state == "running") ids.push_back(id);  // EnsureSandboxCa skips those with nothing to intercept
    }
  }
  // Paused ones get theirs when they resume (RecordState "running").
  for (const auto& id : ids) EnsureSandboxCaAsync(id, 1);
}

Status Server::InheritSecrets(const std::string& parent, const Sandbox& child, const std::string& key_id) {
  secrets::SecretStore* store = nullptr;
  std::vector<secrets::Binding> bindings;
  if (SecretsInUse()) {
    ASSIGN_OR_RETURN(store, Secrets());
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
    Audit(std::move(r));
  }
  return OkStatus();
}

void Server::AddSecretFields(const std::string& id, json& detail) {
  json list = json::array();
  if (SecretsInUse()) {
    if (auto store = Secrets(); store.ok()) {
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
  auto ca = broker_ ? broker_->CaFor(id) : nullptr;
  detail["caCertificate"] = ca ? json(ca->cert_pem()) : json(nullptr);
}

}  // namespace airlock::server
