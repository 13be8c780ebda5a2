// The bodies of the E2B secrets API (secrets_api.cc) → immutable requests,
// or InvalidArgument naming the field (answered 400):
//   POST /secrets              {name, value, metadata?}
//   POST /secrets/{id|name}    {value, metadata?}   (a present metadata
//                              replaces the stored one and its policy)
// Metadata: E2B's limits (32 entries, keys 1..128 B, values 1024 B, 8192 B in
// all). The reserved keys airlock.scope (env|brokered), airlock.hosts and
// airlock.teams (comma-separated) are the secret's use policy, exactly what
// `airlock secret set --scope/--host/--team` stores; other airlock.* keys
// are refused.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "secrets/secret_store.h"

namespace airlock::server {

// E2B's rule for a secret's name: trimmed, 1..128 of [A-Za-z0-9_-],
// lower-cased, no "sec_" prefix (reserved for ids).
StatusOr<std::string> NormalizeSecretName(const std::string& input);
// A Secret's "metadata"; InvalidArgument naming the entry.
StatusOr<std::map<std::string, std::string>> ParseSecretMetadata(const nlohmann::json& body);
// The use policy the reserved metadata keys describe (default scope env, or
// brokered when hosts are given); `owner_team` is always one of its teams.
StatusOr<secrets::SecretPolicy> PolicyFromSecretMetadata(const std::map<std::string, std::string>& metadata,
                                                         const std::string& owner_team);

namespace requests {

struct CreateSecretRequest {
  std::string name;  // normalized
  std::string value;
  std::map<std::string, std::string> metadata;
  secrets::SecretPolicy policy;
};
// `owner_team`: the creating key's team.
StatusOr<CreateSecretRequest> ParseCreateSecret(const nlohmann::json& body, const std::string& owner_team);

struct UpdateSecretRequest {
  std::string value;
  std::optional<std::map<std::string, std::string>> metadata;
};
StatusOr<UpdateSecretRequest> ParseUpdateSecret(const nlohmann::json& body);

}  // namespace requests
}  // namespace airlock::server
