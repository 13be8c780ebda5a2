#include "egress/policy_json.h"

namespace airlock::egress {
namespace {

StatusOr<std::vector<std::string>> StringList(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (!j.is_array()) return InvalidArgument(std::string("network.") + key + " must be an array of strings");
  for (const auto& e : j) {
    if (!e.is_string()) return InvalidArgument(std::string("network.") + key + " must be an array of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// {"host":[{"transform":{"headers":{"Name":"value"}}}]}
StatusOr<std::vector<HostHeaderRules>> ParseHeaderRules(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("network.rules must be an object {host: [rule...]}");
  std::vector<HostHeaderRules> out;
  for (auto& [host, list] : j.items()) {
    HostHeaderRules h;
    h.pattern = host;
    if (!list.is_array()) return InvalidArgument("network.rules['" + host.substr(0, 64) + "'] must be an array of rules");
    for (const auto& rule : list) {
      if (!rule.is_object()) return InvalidArgument("network.rules['" + host.substr(0, 64) + "']: a rule must be an object");
      HeaderTransform t;
      for (auto& [k, v] : rule.items()) {
        if (k != "transform")
          return InvalidArgument("network.rules: unknown rule field '" + k.substr(0, 64) + "' (transform)");
        if (v.is_null()) continue;
        if (!v.is_object()) return InvalidArgument("network.rules: transform must be an object");
        for (auto& [tk, tv] : v.items()) {
          if (tk != "headers")
            return InvalidArgument("network.rules: unknown transform field '" + tk.substr(0, 64) + "' (headers)");
          if (tv.is_null()) continue;
          if (!tv.is_object()) return InvalidArgument("network.rules: transform.headers must be an object of strings");
          for (auto& [name, value] : tv.items()) {
            if (!value.is_string())
              return InvalidArgument("network.rules: header '" + name.substr(0, 64) + "' must be a string");
            t.headers.emplace_back(name, value.get<std::string>());
          }
        }
      }
      h.transforms.push_back(std::move(t));
    }
    out.push_back(std::move(h));
  }
  return out;
}

// SandboxEgressProxyConfig: {"address": required, "username", "password"};
// any other field is refused by name.
StatusOr<UpstreamProxy> ParseEgressProxy(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("network.egressProxy must be an object");
  std::string address, username, password;
  for (const auto& [key, value] : j.items()) {
    std::string* into = key == "address" ? &address : key == "username" ? &username : key == "password" ? &password : nullptr;
    if (!into) return InvalidArgument("network.egressProxy: unknown field '" + key + "' (address, username, password)");
    if (value.is_null()) continue;
    if (!value.is_string()) return InvalidArgument("network.egressProxy." + key + " must be a string");
    *into = value.get<std::string>();
  }
  if (address.empty()) return InvalidArgument("network.egressProxy.address is required");
  return ParseUpstreamProxy(address, std::move(username), std::move(password));
}

std::vector<std::string> Texts(const std::vector<Rule>& rules) {
  std::vector<std::string> out;
  for (const auto& r : rules) out.push_back(r.text);
  return out;
}

}  // namespace

StatusOr<EgressPolicy> PolicyFromApi(const nlohmann::json* network, std::optional<bool> internet,
                                     const EgressPolicy& base) {
  std::vector<std::string> allow = Texts(base.allow()), deny = Texts(base.deny());
  bool inet = internet.value_or(base.internet());
  std::vector<HostHeaderRules> rules = base.header_rules();
  std::optional<UpstreamProxy> proxy = base.upstream_proxy();
  if (network && !network->is_null()) {
    if (!network->is_object()) return InvalidArgument("network must be an object");
    if (auto it = network->find("allowOut"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(allow, StringList(*it, "allowOut"));
    }
    if (auto it = network->find("denyOut"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(deny, StringList(*it, "denyOut"));
    }
    if (auto it = network->find("egressProxy"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(proxy, ParseEgressProxy(*it));
    }
    if (auto it = network->find("rules"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(rules, ParseHeaderRules(*it));
    }
  }
  ASSIGN_OR_RETURN(EgressPolicy p, EgressPolicy::Create(inet, allow, deny));
  RETURN_IF_ERROR(p.SetHeaderRules(std::move(rules)));
  RETURN_IF_ERROR(p.SetUpstreamProxy(std::move(proxy)));
  return p;
}

StatusOr<EgressPolicy> PolicyFromStoredJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("egress policy file is not a JSON object");
  auto inet = j.find("allowInternetAccess");
  if (inet == j.end() || !inet->is_boolean()) return InvalidArgument("egress policy file: allowInternetAccess missing");
  return PolicyFromApi(&j, inet->get<bool>());
}

}  // namespace airlock::egress
