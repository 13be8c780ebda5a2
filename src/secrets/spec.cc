#include "secrets/spec.h"

#include <string_view>

namespace airlock::secrets {

using nlohmann::json;

namespace {
constexpr size_t kMaxSecretsPerSandbox = 64;
constexpr size_t kMaxHostsPerSecret = 32;
}  // namespace

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

}  // namespace airlock::secrets
