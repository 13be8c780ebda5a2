#include "server/requests/fork.h"

#include "server/requests/fields.h"

namespace airlock::server::requests {

using nlohmann::json;

StatusOr<ForkRequest> ParseFork(const json& body) {
  ForkRequest r;
  ASSIGN_OR_RETURN(r.timeout_s, SecondsField(body, "timeout"));
  if (auto it = body.find("count"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > kMaxForkCount) ||
        it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxForkCount) {
      return InvalidArgument("count must be an integer 1..16");
    }
    r.count = static_cast<int>(it->get<int64_t>());
  }
  if (auto it = body.find("memory"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return InvalidArgument("memory must be a boolean");
    r.memory = it->get<bool>();
  }
  return r;
}

}  // namespace airlock::server::requests
