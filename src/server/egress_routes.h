// Egress in the HTTP API (docs/network.md):
//   POST /v2/sandboxes: `allow_internet_access` + `network.allowOut/denyOut`
//   PUT /sandboxes/{id}/network: the same fields, live; absent ones keep
//     their value; 204, 404 {"code":404} for an unknown sandbox, 400 for a
//     bad rule
//   GET /sandboxes/{id}/logs, /v2/...: egress records as log entries
//     {"timestamp","level":"info"|"warn","message","fields":{string:string}}
#pragma once

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "egress/egress_service.h"
#include "egress/policy.h"
#include "server/requests/network.h"  // PolicyFromCreateBody

namespace airlock::server {

// SandboxDetail's `allowInternetAccess` and `network` {allowOut, denyOut}
// from the sandbox's current policy (nothing when egress is off).
void AddEgressFields(egress::EgressService* egress, const std::string& id, nlohmann::json& detail);
// One egress record → one log entry (v2 shape).
nlohmann::json EgressLogEntry(const nlohmann::json& record);

}  // namespace airlock::server
