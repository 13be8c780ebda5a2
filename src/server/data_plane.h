// The data plane (proxy.cc, docs/server.md): a request for a sandbox's port
// is relayed to its guest, streamed both ways, behind the sandbox's access
// token (or traffic token), its answer guarded (relay_guard.h), each live
// exchange tracked so a kill, death or pause drops it (stream_table.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "server/api_base.h"

namespace airlock::server {

class DataPlane : public ApiHandlers {
 public:
  explicit DataPlane(const Services& s) : ApiHandlers(s) {}
  void HandleData(std::shared_ptr<HttpConn> c, const std::string& id, uint16_t port);
  // uploadUrl()/downloadUrl() carry no routing header (spec §4.2, §8): the
  // sandbox whose access token signs this GET/POST /files, if any.
  std::optional<std::string> SandboxBySignature(const HttpConn& c);
  // The official SDK 2.10 and older, given E2B_SANDBOX_URL, send their envd
  // HTTP calls (/files, /health, ...) to that URL with no E2b-Sandbox-Id:
  // only the sandbox's X-Access-Token says which sandbox they are for. The
  // sandbox whose token this is, if any. Only for a request to one of
  // envd's own routes with an X-Access-Token (IsEnvdCallByToken; the API's
  // routes never take one): one that matches no live sandbox is for a
  // sandbox gone (502 "The sandbox was not found", as E2B's proxy; the
  // SDK's isRunning() reads it so), never the daemon's own /health.
  static bool IsEnvdCallByToken(const HttpConn& c);
  std::optional<std::string> SandboxByAccessToken(const HttpConn& c);
};

}  // namespace airlock::server
