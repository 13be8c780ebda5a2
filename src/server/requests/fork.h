// POST /sandboxes/{id}/fork and /v2/sandboxes/{id}/fork (fork v2)
// {"timeout"?: s, "count"?: 1..16, "memory"?: bool}; the timeout of each
// child (default serve --timeout); memory false: filesystem-only children
// (the parent's disk, synced, booted on; a runtime that cannot is 501).
// E2B allows count up to 100; a daemon caps it at 16 (its children boot at
// once, admitted by memory together).
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
  bool memory = true;
};
StatusOr<ForkRequest> ParseFork(const nlohmann::json& body);

}  // namespace airlock::server::requests
