#include "server/requests/timeout.h"

#include <algorithm>

#include "server/requests/fields.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<SetTimeoutRequest> ParseSetTimeout(const json& body) {
  ASSIGN_OR_RETURN(auto t, SecondsField(body, "timeout"));
  if (!t) return InvalidArgument("timeout is required");
  return SetTimeoutRequest{*t};
}

StatusOr<RefreshRequest> ParseRefresh(const json& body) {
  constexpr int64_t kMinimum = 15, kMaximum = 3600;
  ASSIGN_OR_RETURN(auto d, SecondsField(body, "duration"));
  if (d && *d > kMaximum) return InvalidArgument("duration must be at most 3600 seconds");
  return RefreshRequest{std::max(d.value_or(kMinimum), kMinimum)};
}

StatusOr<ConnectRequest> ParseConnect(const json& body) {
  ConnectRequest r;
  ASSIGN_OR_RETURN(r.timeout_s, SecondsField(body, "timeout"));
  return r;
}

}  // namespace airlock::server::requests
