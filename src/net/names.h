// Names of airlock's per-sandbox network objects. Everything airlock creates
// carries a recognisable prefix so CleanupLeftovers can find it:
//   netns      al-<sandbox id>          (/run/netns/al-<id>)
//   host veth  alh<short id>            (root ns, ≤ 15 chars = IFNAMSIZ-1)
//   in netns   eth0 (veth peer), tap0 (for the VMM), nft table "inet airlock"
//   guest netns alg-<sandbox id>        (GuestLink::kVethNetns only: eth0,
//              the guest's end of a veth whose other end is tap0)
#pragma once

#include <string>

#include "common/agent_port.h"  // kAgentPort
#include "common/status.h"

namespace airlock::net {

inline constexpr char kNetnsPrefix[] = "al-";
inline constexpr char kHostVethPrefix[] = "alh";
inline constexpr char kNetnsVeth[] = "eth0";
inline constexpr char kTapName[] = "tap0";
inline constexpr char kGuestIp[] = "169.254.0.21";
inline constexpr char kGatewayIp[] = "169.254.0.22";  // tap0 in the netns
inline constexpr int kGuestPrefix = 30;

// Sandbox ids: [A-Za-z0-9][A-Za-z0-9_-]{0,62}.
Status ValidateSandboxId(const std::string& id);
std::string NetnsName(const std::string& sandbox_id);
inline constexpr char kGuestNetnsPrefix[] = "alg-";
// The guest's own netns of a GuestLink::kVethNetns network ("alg-<id>").
std::string GuestNetnsName(const std::string& sandbox_id);
// "alh" + the id when it fits in 12 chars, else "alh" + 4 id chars + 8 hex
// chars of a hash of the id.
std::string HostVethName(const std::string& sandbox_id);
bool NetnsExists(const std::string& netns_name);

}  // namespace airlock::net
