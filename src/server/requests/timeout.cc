#include "server/requests/timeout.h"

#include "server/requests/fields.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<SetTimeoutRequest> ParseSetTimeout(const json& body) {
  ASSIGN_OR_RETURN(auto t, SecondsField(body, "timeout"));
  if (!t) return InvalidArgument("timeout is required");
  return SetTimeoutRequest{*t};
}

StatusOr<ConnectRequest> ParseConnect(const json& body) {
  ConnectRequest r;
  ASSIGN_OR_RETURN(r.timeout_s, SecondsField(body, "timeout"));
  return r;
}

}  // namespace airlock::server::requests
