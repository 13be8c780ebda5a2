// Broker: the table the egress proxy asks when a sandbox's request leaves
// (docs/secrets.md). For each sandbox: placeholder → (secret name, real
// value, hosts the value may be sent to). The guest only ever holds the
// placeholder; the proxy swaps it for the value in request headers, and only
// on requests to one of the secret's hosts (TLS interception for those hosts
// only, with the sandbox's CA).
//
// Host patterns: "api.example.com" (exact) or "*.example.com" (any subdomain,
// not the apex); case-insensitive; a port in `host` is ignored.
// Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

namespace airlock::secrets {

class SandboxCa;

struct BrokeredSecret {
  std::string name;
  std::string placeholder;
  std::string value;
  std::vector<std::string> hosts;
};

class Broker {
 public:
  void Register(const std::string& sandbox, std::vector<BrokeredSecret> secrets);
  void Forget(const std::string& sandbox);  // also drops its CA
  // The sandbox's CA (TLS interception for its brokered hosts); null if none.
  void SetCa(const std::string& sandbox, std::shared_ptr<SandboxCa> ca);
  std::shared_ptr<SandboxCa> CaFor(const std::string& sandbox) const;
  // Does any secret of `sandbox` go to `host`? (the proxy intercepts TLS
  // for exactly these hosts).
  bool Intercepts(const std::string& sandbox, const std::string& host) const;
  // Replaces every placeholder of `sandbox` that may go to `host` in the
  // header values; returns the names of the secrets substituted (for the
  // audit record: name and host, never the value). Placeholders of secrets
  // not allowed for `host` are left as they are.
  std::vector<std::string> SubstituteHeaders(const std::string& sandbox, const std::string& host,
                                             std::vector<std::pair<std::string, std::string>>* headers) const;
  size_t size(const std::string& sandbox) const;
  // Every form of every brokered value of `sandbox` that a response relayed
  // to its guest must not carry (Redactor::Forms, plus the value as escaped
  // inside a JSON string): the egress proxy masks them (docs/secrets.md).
  std::vector<std::string> ValueForms(const std::string& sandbox) const;

  static bool HostMatches(const std::string& pattern, const std::string& host);
  // "AIRLOCK_BROKERED_<32 hex>": random, never derived from the value.
  static std::string NewPlaceholder();

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, std::vector<BrokeredSecret>> by_sandbox_;
  std::map<std::string, std::shared_ptr<SandboxCa>> cas_;
};

}  // namespace airlock::secrets
