// The daemon's side of egress, in the namespace the daemon runs in (the
// host's root namespace in production, a test namespace in tests): one nft
// table "inet airlock_host", replaced atomically by InstallHostEgress:
//   input:   from alh* links only the resolver/proxy ports and replies
//            (a guest never reaches the daemon's API or any other host port)
//   forward: from alh* never to a forbidden range; nothing new into alh*
//   postrouting: traffic from the address pool leaving elsewhere is
//            masqueraded (allowed CIDR flows)
// and, with `forwarding`, net.ipv4.ip_forward=1 (needed for CIDR rules;
// proxied and resolved traffic is opened by the daemon itself).
#pragma once

#include <string>

#include "common/status.h"
#include "net/nft_rules.h"

namespace airlock::net {

inline constexpr char kNftHostTable[] = "airlock_host";  // family inet

std::string NftHostRuleset(const std::string& pool_cidr, const NftEgress& ports);
// `scratch_dir`: where the ruleset file is written before `nft -f`.
Status InstallHostEgress(const std::string& pool_cidr, const NftEgress& ports, bool forwarding,
                         const std::string& scratch_dir);
Status RemoveHostEgress();

}  // namespace airlock::net
