#include "server/requests/secret.h"



namespace airlock::server {

using nlohmann::json;

namespace requests {

StatusOr<CreateSecretRequest> ParseCreateSecret(const json& body, const std::string& owner_team) {
  auto name_field = body.find("name");
  auto value_field = body.find("value");
  if (name_field == body.end() || !name_field->is_string()) return InvalidArgument("name (a string) is required");
  if (value_field == body.end() || !value_field->is_string()) return InvalidArgument("value (a string) is required");
  CreateSecretRequest r;
  ASSIGN_OR_RETURN(r.name, NormalizeSecretName(name_field->get<std::string>()));
  ASSIGN_OR_RETURN(r.metadata, ParseSecretMetadata(body));
  ASSIGN_OR_RETURN(r.policy, PolicyFromSecretMetadata(r.metadata, owner_team));
  r.value = value_field->get<std::string>();
  return r;
}

StatusOr<UpdateSecretRequest> ParseUpdateSecret(const json& body) {
  auto value_field = body.find("value");
  if (value_field == body.end() || !value_field->is_string()) return InvalidArgument("value (a string) is required");
  UpdateSecretRequest r;
  if (body.contains("metadata") && !body["metadata"].is_null()) {
    ASSIGN_OR_RETURN(r.metadata, ParseSecretMetadata(body));
  }
  r.value = value_field->get<std::string>();
  return r;
}

}  // namespace requests
}  // namespace airlock::server
