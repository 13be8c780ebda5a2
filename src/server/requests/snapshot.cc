#include "server/requests/snapshot.h"

#include "server/requests/fields.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<SnapshotRequest> ParseSnapshot(const json& body) {
  SnapshotRequest r;
  if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return InvalidArgument("name must be a string");
    r.name = it->get<std::string>();
  }
  return r;
}

}  // namespace airlock::server::requests
