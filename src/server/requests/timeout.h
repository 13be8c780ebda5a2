// POST /sandboxes/{id}/timeout {"timeout": s} (s: integer seconds >= 0, required) and
// POST /v2/sandboxes/{id}/connect (and .../resume) {"timeout"?: s}; an omitted
// timeout is the daemon's default (serve --timeout), every one is clamped
// to serve --max-timeout by the handler.
// InvalidArgument naming the field (answered 400); the request is immutable
// once parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"

namespace airlock::server::requests {

struct SetTimeoutRequest {
  int64_t timeout_s = 0;
};
StatusOr<SetTimeoutRequest> ParseSetTimeout(const nlohmann::json& body);
// POST /sandboxes/{id}/refreshes {"duration"?: s} (E2B's keep-alive,
// packages/api sandbox_refresh.go): 0..3600 seconds, absent or below 15
// read as 15 (E2B's SandboxTimeoutDefault); past 3600 is 400 (its spec's
// maximum).
struct RefreshRequest {
  int64_t duration_s = 15;
};
StatusOr<RefreshRequest> ParseRefresh(const nlohmann::json& body);
struct ConnectRequest {
  std::optional<int64_t> timeout_s;
};
StatusOr<ConnectRequest> ParseConnect(const nlohmann::json& body);

}  // namespace airlock::server::requests
