// The nftables ruleset loaded into each sandbox netns (pure text generation,
// unit-testable without root). One table, "inet airlock":
//   prerouting (dnat):  eth0 → <netns ip>:P   ⇒ 169.254.0.21:G   per exposed port
//   postrouting (snat): DNAT'd traffic out of tap0 gets source 169.254.0.22
//                       (the guest has no default route; replies stay on-link)
//   forward: policy drop; only connections that were DNAT'd (ct status dnat)
//            pass, both directions; nothing the guest opens is forwarded
//   input:   policy drop; lo, established/related, ICMP echo from eth0
// IPv6 is dropped by the same inet chains (and disabled by sysctl).
#pragma once

#include <cstdint>
#include <string>

namespace airlock::net {

inline constexpr char kNftTable[] = "airlock";  // family inet

std::string NftRuleset(const std::string& netns_ip);
// A rule (for `nft add rule`) that DNATs <netns_ip>:netns_port → guest:guest_port.
std::string NftExposeRule(const std::string& netns_ip, uint16_t netns_port, uint16_t guest_port);

}  // namespace airlock::net
