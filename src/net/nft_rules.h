// The nftables ruleset loaded into each sandbox netns (pure text generation,
// unit-testable without root). One table, "inet airlock":
//   prerouting (dnat):  eth0 → <netns ip>:49983 ⇒ 169.254.0.21:49983 (agent)
//                       eth0 → <netns ip>:P ⇒ 169.254.0.21:P for P in the set
//                       exposed_ports (one rule; ports are set elements, added
//                       by NftExposePorts; the set's size is the per-sandbox
//                       cap, so the kernel refuses more)
//   postrouting (snat): DNAT'd traffic out of tap0 gets source 169.254.0.22
//                       (the guest has no default route; replies stay on-link)
//   forward: policy drop; only connections that were DNAT'd (ct status dnat)
//            pass, both directions; nothing the guest opens is forwarded
//   input:   policy drop; lo, established/related, ICMP echo from eth0, and
//            tap0 → 169.254.0.22 TCP 2049 and 20048 (the sandbox's own
//            volume NFS server, core/volumes.h; nothing listens without one)
// IPv6 is dropped by the same inet chains (and disabled by sysctl).
//
// With egress (NftEgress given), guest-opened traffic is redirected to the
// daemon's resolver/proxy listening on the host veth address:
//   tap0 → 169.254.0.22:53 udp/tcp ⇒ host_ip:dns_port
//   tap0 → *:80 ⇒ host_ip:http_port, tap0 → *:443 ⇒ host_ip:tls_port
// and forwarded only when DNAT'd there; then forbidden ranges are dropped;
// then chain egress_cidr_fwd (allowed CIDR:port pairs, TCP, replaceable live
// with NftEgressCidrUpdate); guest-opened flows leave eth0 masqueraded.
// Allowed CIDR rules covering 80/443 skip the proxy (chain egress_cidr_nat).
//
// Audit of L3 decisions (with egress): every guest-originated packet the
// ruleset drops, and the first packet of every connection an allowed CIDR
// rule forwards, is first logged to NFLOG group kNftLogGroup of the netns
// (read by the egress service, src/egress/nflog_reader.h) with the prefix
// "<decision>:<rule>" (≤ 63 chars):
//   deny:forbidden-range   forward, destination in NftForbiddenRanges()
//   deny:<rule>            forward, a denied CIDR rule
//   deny:host-address      forward, ct state new, an address of the host
//                          (set kNftHostSet, before the CIDR rules)
//   allow:<rule>           forward, ct state new, an allowed CIDR rule
//   deny:default-deny      forward, anything else from tap0
//   deny:gateway           input, tap0 → the netns itself (169.254.0.22, ...)
//   deny:ipv6              ingress on tap0, IPv6 (link-local multicast such
//                          as neighbour discovery is dropped unlogged)
// Logging shares one token bucket per sandbox (named limit kNftLogLimit):
// over it, packets are still dropped/forwarded, just not logged, except one
// sample a second logged as "<decision>:rate-limit" (mirror bucket
// kNftLogLimit_over, note bucket kNftLogLimit_note).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace airlock::net {

inline constexpr char kNftTable[] = "airlock";  // family inet
inline constexpr uint16_t kNftLogGroup = 7;     // NFLOG group (per netns)
inline constexpr char kNftLogLimit[] = "audit_log";
inline constexpr int kNftLogRatePerSecond = 50, kNftLogBurst = 100;  // within EgressService's 200 records/s
inline constexpr size_t kNftLogPrefixMax = 63;
inline constexpr char kNftHostSet[] = "host_addrs";
inline constexpr char kNftExposedSet[] = "exposed_ports";
inline constexpr int kDefaultMaxExposedPorts = 32;
// The volume NFS server's ports (core/volumes.h kVolumeNfsPort, kVolumeMountPort).
inline constexpr uint16_t kVolumeNfsPort = 2049, kVolumeMountPort = 20048;

struct NftEgress {
  std::string host_ip;
  uint16_t dns_port = 0, http_port = 0, tls_port = 0;
};

// An allowed destination for plain L3 forwarding (TCP).
struct NftCidr {
  std::string cidr;              // "203.0.113.0/24" or "203.0.113.7"; "!<cidr>": denied
                                 // (dropped, evaluated before the allowed ones that follow)
  std::optional<uint16_t> port;  // nullopt: every TCP port
  bool bypass_proxy = false;     // true: 80/443 to it are not redirected
  std::string rule;              // audit label (the policy's rule text); empty: "<cidr>[:port]"
  bool operator==(const NftCidr&) const = default;
};

// `max_exposed_ports` (≥ 1): the size of the exposed_ports set.
std::string NftRuleset(const std::string& netns_ip, const std::optional<NftEgress>& egress = std::nullopt,
                       int max_exposed_ports = kDefaultMaxExposedPorts);
// A rule (for `nft add rule`) that DNATs <netns_ip>:netns_port → guest:guest_port.
std::string NftExposeRule(const std::string& netns_ip, uint16_t netns_port, uint16_t guest_port);
// An `nft -f` script that atomically replaces the CIDR chains' rules and
// the set kNftHostSet of the host's own addresses: `host` are its elements
// ("a.b.c.d" or "a.b.c.d/n", not overlapping), dropped with the record
// deny:host-address at the top of egress_cidr_fwd, so no CIDR rule (nor
// --internet) forwards a guest's connection to the host itself (whose
// input chain would drop it after an allow record).
std::string NftEgressCidrUpdate(const std::vector<NftCidr>& cidrs, const std::vector<std::string>& host = {});
// An `nft -f` script adding `ports` to the exposed_ports set (one batch).
std::string NftExposePorts(const std::vector<uint16_t>& ports);
// The set and its DNAT rule, for a ruleset written before the set existed
// (a sandbox adopted from an older daemon).
std::string NftExposedSetMigration(const std::string& netns_ip, int max_exposed_ports);
// The NFLOG prefix for a decision and rule: "<decision>:<rule>", the rule
// cut to fit kNftLogPrefixMax and anything outside [A-Za-z0-9./:_*-] → '_'.
std::string NftLogPrefix(const std::string& decision, const std::string& rule);
// The forbidden ranges (never forwarded), as an nft set body.
const std::vector<std::string>& NftForbiddenRanges();

}  // namespace airlock::net
