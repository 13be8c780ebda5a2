#include "server/requests/checkpoint.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<RollbackRequest> ParseRollback(const json& body) {
  auto it = body.find("checkpointID");
  if (it == body.end() || it->is_null()) return InvalidArgument("checkpointID is required");
  if (!it->is_string()) return InvalidArgument("checkpointID must be a string");
  RollbackRequest r;
  r.checkpoint_id = it->get<std::string>();
  if (r.checkpoint_id.empty() || r.checkpoint_id.size() > 64)
    return InvalidArgument("checkpointID must be 1..64 bytes");
  return r;
}

}  // namespace airlock::server::requests
