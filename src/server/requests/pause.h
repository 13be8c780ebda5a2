// POST /sandboxes/{id}/pause {"memory"?: bool}; false: the disk only (resume
// boots from it), default true.
// InvalidArgument naming the field (answered 400); the request is immutable
// once parsed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace airlock::server::requests {

struct PauseRequest {
  bool keep_memory = true;
};
StatusOr<PauseRequest> ParsePause(const nlohmann::json& body);

}  // namespace airlock::server::requests
