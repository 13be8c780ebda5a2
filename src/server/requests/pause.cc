#include "server/requests/pause.h"

#include "server/requests/fields.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<PauseRequest> ParsePause(const json& body) {
  PauseRequest r;
  ASSIGN_OR_RETURN(auto memory, BoolField(body, "memory"));
  if (memory) r.keep_memory = *memory;
  return r;
}

}  // namespace airlock::server::requests
