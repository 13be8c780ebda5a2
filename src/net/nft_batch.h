// NftRunInNetns: runs an nft script (the `nft -f` language, several commands
// applied as one netlink batch: all or nothing) inside the named network
// namespace, through libnftables in this process: no `nft` process, one
// short-lived thread that setns()es there (common/netns.h). Used on paths a
// client can trigger many times (exposing a guest port), where a process per
// call would be the cost an attacker controls.
// Errors: those of RunInNetns; Internal with nft's own message (its error
// output, first lines) when the script is refused.
#pragma once

#include <string>

#include "common/status.h"

namespace airlock::net {

Status NftRunInNetns(const std::string& netns, const std::string& script);

}  // namespace airlock::net
