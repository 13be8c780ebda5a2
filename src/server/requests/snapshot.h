// POST /sandboxes/{id}/snapshots {"name"?: string} (a named snapshot).
// InvalidArgument naming the field (answered 400); the request is immutable
// once parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace airlock::server::requests {

struct SnapshotRequest {
  std::string name;  // "" : no name (the snapshot id only)
};
StatusOr<SnapshotRequest> ParseSnapshot(const nlohmann::json& body);

}  // namespace airlock::server::requests
