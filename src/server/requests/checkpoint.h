// POST /sandboxes/{id}/rollback {"checkpointID": string} (docs/snapshots.md
// "Checkpoints and rollback"). InvalidArgument naming the field (answered
// 400); the request is immutable once parsed. POST /sandboxes/{id}/checkpoints
// takes no fields (a body, if any, must be a JSON object, as ReadJson checks).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace airlock::server::requests {

struct RollbackRequest {
  std::string checkpoint_id;  // 1..64 bytes; whether it exists is the manager's answer (404)
};
StatusOr<RollbackRequest> ParseRollback(const nlohmann::json& body);

}  // namespace airlock::server::requests
