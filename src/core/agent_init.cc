#include "core/agent_init.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/agent_port.h"
#include "core/http_client.h"
#include "core/registry.h"
#include "core/volumes.h"
#include "envd/proto_json.h"

namespace airlock {
namespace {

constexpr size_t kEntropyBytes = 64;

}  // namespace

std::string FreshEntropyBase64() { return envd::Base64Encode(RandomBytes(kEntropyBytes)); }

Status PostAgentInit(const AgentInitRequest& r) {
  HttpCall call;
  call.host = r.host;
  call.port = kAgentPort;
  call.method = "POST";
  call.target = "/init";
  call.headers = {{"Content-Type", "application/json"}};
  if (!r.auth_token.empty()) call.headers.push_back({"X-Access-Token", r.auth_token});
  nlohmann::json body = {{"timestamp", NowRfc3339Ms()}, {"entropy", FreshEntropyBase64()}};
  if (r.access_token) body["accessToken"] = *r.access_token;
  if (r.env_vars) body["envVars"] = *r.env_vars;
  if (!r.hostname.empty()) body["hostname"] = r.hostname;
  if (r.volume_mounts) {
    nlohmann::json mounts = nlohmann::json::array();
    for (const auto& m : *r.volume_mounts) {
      mounts.push_back({{"path", m.path}, {"server", kVolumeServerAddress}, {"export", "/" + m.volume_id},
                        {"port", kVolumeNfsPort}, {"mountPort", kVolumeMountPort}});
    }
    body["volumeMounts"] = mounts;
  }
  call.body = body.dump();
  // An NFS mount waits on its server (core/volumes.h).
  call.timeout = std::chrono::seconds(r.volume_mounts && !r.volume_mounts->empty() ? 30 : 10);
  ASSIGN_OR_RETURN(auto reply, HttpDo(call));
  if (reply.status != 204 && reply.status != 200) {
    return Unavailable("agent /init answered " + std::to_string(reply.status) + ": " + reply.body.substr(0, 200));
  }
  return OkStatus();
}

}  // namespace airlock
