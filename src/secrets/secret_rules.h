// A secret's name and use policy as the E2B secrets API and the CLI give
// them (docs/secrets.md): the name rule, the metadata limits, and the
// policy the reserved metadata keys (airlock.scope, airlock.hosts,
// airlock.teams) describe. Errors: InvalidArgument naming the field.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "secrets/secret_store.h"

namespace airlock::secrets {

// E2B's rule for a secret's name: trimmed, 1..128 of [A-Za-z0-9_-],
// lower-cased, no "sec_" prefix (reserved for ids).
StatusOr<std::string> NormalizeSecretName(const std::string& input);
// A Secret's "metadata"; InvalidArgument naming the entry.
StatusOr<std::map<std::string, std::string>> ParseSecretMetadata(const nlohmann::json& body);
// The use policy the reserved metadata keys describe (default scope env, or
// brokered when hosts are given); `owner_team` is always one of its teams.
StatusOr<SecretPolicy> PolicyFromSecretMetadata(const std::map<std::string, std::string>& metadata,
                                                         const std::string& owner_team);

}  // namespace airlock::secrets
