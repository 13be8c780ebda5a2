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
  if (network && !network->is_null()) {
    if (!network->is_object()) return InvalidArgument("network must be an object");
    if (auto it = network->find("allowOut"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(allow, StringList(*it, "allowOut"));
    }
    if (auto it = network->find("denyOut"); it != network->end() && !it->is_null()) {
      ASSIGN_OR_RETURN(deny, StringList(*it, "denyOut"));
    }
    if (auto it = network->find("egressProxy"); it != network->end() && !it->is_null())
      return InvalidArgument(
          "network.egressProxy is not supported by airlock (egress goes through airlock's own proxy)");
    if (auto it = network->find("rules"); it != network->end() && !it->is_null() && !it->empty())
      return InvalidArgument("network.rules (header transforms) are not supported yet");
  }
  return EgressPolicy::Create(inet, allow, deny);
}

StatusOr<EgressPolicy> PolicyFromStoredJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("egress policy file is not a JSON object");
  auto inet = j.find("allowInternetAccess");
  if (inet == j.end() || !inet->is_boolean()) return InvalidArgument("egress policy file: allowInternetAccess missing");
  return PolicyFromApi(&j, inet->get<bool>());
}

}  // namespace airlock::egress
