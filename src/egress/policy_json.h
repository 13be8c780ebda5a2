// The API's network settings → EgressPolicy (one parser for create,
// PUT /sandboxes/{id}/network, the CLI and the policy file kept in a
// sandbox's run dir).
//
//   network: {"allowOut":[rule...], "denyOut":[rule...],
//             "rules":{host:[{"transform":{"headers":{name:value}}}]},
//             "egressProxy":{"address","username","password"}}   (E2B SandboxNetworkConfig)
//   internet: `allow_internet_access` (create / update; nullopt = keep `base`)
// `base` supplies values for fields that are absent.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"
#include "egress/policy.h"

namespace airlock::egress {

StatusOr<EgressPolicy> PolicyFromApi(const nlohmann::json* network, std::optional<bool> internet,
                                     const EgressPolicy& base = EgressPolicy());
// The form written by EgressPolicy::ToJson.
StatusOr<EgressPolicy> PolicyFromStoredJson(const std::string& text);

}  // namespace airlock::egress
