// Who a control-plane request is from (its X-API-Key), resolved once per
// request (control_plane.cc, against server/api_keys.h). Tenancy
// (docs/security.md): a key acts only on what its team owns; an admin key
// (the CLI's cli.key, `apikey create --admin`) on all.
#pragma once

#include <optional>
#include <string>

#include "core/registry.h"

namespace airlock {
class Manager;
}

namespace airlock::control {

struct Caller {
  std::string key_id;
  std::string team;
  bool admin = false;
  // May this caller see and act on something owned by `owner` (nullopt: no
  // owner recorded, which only admin may reach)?
  bool Owns(const std::optional<std::string>& owner) const { return admin || (owner && *owner == team); }
};

// May `caller` see and act on sandbox / named snapshot `id` (its owners
// row; a live sandbox carries its team, so no SQLite for it)? A lookup
// error is logged and answers no.
bool CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id, Manager& manager, Registry& registry);

}  // namespace airlock::control
