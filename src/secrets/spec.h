// The create request's "secrets" object (docs/secrets.md):
//   {"NAME": {"scope": "brokered"|"env", "hosts": ["api.x.com", "*.y.com"], "env": "VAR"}}
// at most 64 secrets, 32 hosts each; InvalidArgument naming the secret and
// the field. Omitted scope / hosts come from the secret's stored policy.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "secrets/secret_store.h"

namespace airlock::secrets {

// Parses the create request's "secrets" object (null: none).
StatusOr<std::vector<Binding>> ParseSecretsSpec(const nlohmann::json& spec);
// E2B's placeholder in a create's envVars: a value that is exactly
// "${e2b.secrets.NAME}" (Secret.fill(NAME)) becomes {"NAME": {"env": VAR}}
// in the returned secrets spec (scope and hosts from the stored policy) and
// leaves env_vars. InvalidArgument when NAME is malformed or named twice.
StatusOr<nlohmann::json> LiftSecretPlaceholders(std::map<std::string, std::string>* env_vars, nlohmann::json spec);

}  // namespace airlock::secrets
