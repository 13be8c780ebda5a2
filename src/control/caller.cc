#include "control/caller.h"

#include "common/log.h"
#include "core/manager.h"

namespace airlock::control {

bool CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id, Manager& manager, Registry& registry) {
  if (caller.admin) return true;
  // A live sandbox carries its team: no SQLite on the event loop. An ended
  // or unknown one is looked up (its owners row outlives it).
  if (kind == OwnedKind::kSandbox) {
    if (auto sb = manager.Get(id)) {
      std::string team = sb->attributes().owner_team;
      if (!team.empty()) return caller.Owns(team);
    }
  }
  auto owner = registry.OwnerOf(kind, id);
  if (!owner.ok()) {
    LOG_WARN("owner of {}: {}", id, owner.status().message());
    return false;
  }
  return caller.Owns(*owner);
}

}  // namespace airlock::control
