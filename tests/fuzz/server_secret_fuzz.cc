// libFuzzer target for the E2B secrets API bodies (server/requests/secret.h)
// and the create request's "secrets" object (secrets/spec.h).
#include "server/requests/secret.h"
#include "secrets/spec.h"
#include "server_request_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace airlock;
  auto body = fuzz::JsonObject(data, size);
  if (!body) return 0;
  if (auto r = server::requests::ParseCreateSecret(*body, "team"); r.ok()) {
    fuzz::Check(!r->name.empty() && r->name.size() <= 128 && r->name.rfind("sec_", 0) != 0);
    fuzz::Check(r->policy.scope.has_value());
  }
  (void)server::requests::ParseUpdateSecret(*body);
  if (auto s = body->find("secrets"); s != body->end()) (void)secrets::ParseSecretsSpec(*s);
  std::map<std::string, std::string> env;
  if (auto e = body->find("envVars"); e != body->end() && e->is_object()) {
    for (auto& [k, v] : e->items())
      if (v.is_string()) env[k] = v.get<std::string>();
  }
  (void)secrets::LiftSecretPlaceholders(&env, body->value("secrets", nlohmann::json()));
  return 0;
}
