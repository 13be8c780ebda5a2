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
#include "secrets/secret_rules.h"
#include "secrets/secret_store.h"

namespace airlock::server {

// The name rules and the metadata policy are the secrets module's
// (secrets/secret_rules.h); the E2B API's parsers below use them.
using secrets::NormalizeSecretName;
using secrets::ParseSecretMetadata;
using secrets::PolicyFromSecretMetadata;

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
