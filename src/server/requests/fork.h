// POST /sandboxes/{id}/fork {"timeout"?: s, "count"?: 1..16}; the timeout of
// each child (default serve --timeout).
// InvalidArgument naming the field (answered 400); the request is immutable
// once parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"

namespace airlock::server::requests {

inline constexpr int kMaxForkCount = 16;
struct ForkRequest {
  std::optional<int64_t> timeout_s;
  int count = 1;  // 1..kMaxForkCount
};
StatusOr<ForkRequest> ParseFork(const nlohmann::json& body);

}  // namespace airlock::server::requests
