// The egress fields of a request (docs/network.md):
//   POST /v2/sandboxes: `allow_internet_access` / `allowInternetAccess` +
//     `network` {allowOut, denyOut, rules}
//   PUT /sandboxes/{id}/network (E2B SandboxNetworkUpdateConfig): the same
//     fields at the top level; the body replaces the configuration (an
//     omitted allowOut / denyOut / rules is cleared), an omitted
//     allow_internet_access keeps the sandbox's current value.
// InvalidArgument naming the field or the bad rule (answered 400).
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "egress/policy.h"

namespace airlock::server {

StatusOr<egress::EgressPolicy> PolicyFromCreateBody(const nlohmann::json& body,
                                                    const egress::EgressPolicy& base = egress::EgressPolicy());

namespace requests {

struct NetworkUpdateRequest {
  egress::EgressPolicy policy;  // the sandbox's whole new policy
};
// `current_internet`: the sandbox's allow_internet_access now.
StatusOr<NetworkUpdateRequest> ParseNetworkUpdate(const nlohmann::json& body, bool current_internet);

}  // namespace requests
}  // namespace airlock::server
