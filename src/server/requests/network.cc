#include "server/requests/network.h"

#include <optional>

#include "egress/policy_json.h"

namespace airlock::server {

using json = nlohmann::json;

StatusOr<egress::EgressPolicy> PolicyFromCreateBody(const json& body, const egress::EgressPolicy& base) {
  std::optional<bool> internet;
  for (const char* key : {"allow_internet_access", "allowInternetAccess"}) {
    if (auto it = body.find(key); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) return InvalidArgument(std::string(key) + " must be a boolean");
      internet = it->get<bool>();
    }
  }
  const json* network = nullptr;
  if (auto it = body.find("network"); it != body.end()) network = &*it;
  // PUT /network sends the SandboxNetworkUpdateConfig fields at the top level.
  if (!network &&
      (body.contains("allowOut") || body.contains("denyOut") || body.contains("egressProxy") || body.contains("rules")))
    network = &body;
  return egress::PolicyFromApi(network, internet, base);
}

namespace requests {

StatusOr<NetworkUpdateRequest> ParseNetworkUpdate(const json& body, bool current_internet) {
  if (!body.is_object()) return InvalidArgument("body must be a JSON object");
  // Only allow_internet_access carries over from the current policy.
  ASSIGN_OR_RETURN(auto base, egress::EgressPolicy::Create(current_internet, {}, {}));
  NetworkUpdateRequest r;
  ASSIGN_OR_RETURN(r.policy, PolicyFromCreateBody(body, base));
  return r;
}

}  // namespace requests
}  // namespace airlock::server
