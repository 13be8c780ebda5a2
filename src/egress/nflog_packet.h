// Packets logged by a sandbox netns's nftables ruleset (NFLOG, see
// src/net/nft_rules.h "Audit of L3 decisions") → egress audit records.
// Pure functions, no I/O; fuzzed (tests/fuzz/egress_nflog_fuzz.cc).
//
// The packet bytes come from the guest: every length and offset is checked
// against the bytes actually present (NFLOG copies at most a prefix of the
// packet), nothing is trusted. The prefix comes from our own ruleset.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace airlock::egress {

// "deny:<rule>" / "allow:<rule>" (rule: 1-63 printable ASCII, no '"').
struct NflogPrefix {
  std::string decision;  // "deny" | "allow"
  std::string rule;      // "default-deny", "forbidden-range", "gateway", "ipv6", a policy rule's text, "internet"
};
std::optional<NflogPrefix> ParseNflogPrefix(std::string_view prefix);

// The header fields of one IPv4 or IPv6 packet.
struct L3Packet {
  int version = 0;                // 4 | 6
  uint8_t proto = 0;              // IPPROTO_* of the transport (after IPv6 extension headers)
  std::string src, dst;           // textual addresses
  uint32_t length = 0;            // bytes on the wire per the IP header (total / payload + 40)
  bool fragment = false;          // a non-first fragment: no transport header
  std::optional<uint16_t> sport;  // TCP/UDP (when the header was captured)
  std::optional<uint16_t> dport;
  std::optional<uint8_t> icmp_type, icmp_code;  // ICMP / ICMPv6
  std::optional<uint8_t> tcp_flags;
};
// InvalidArgument for anything that is not a well-formed IPv4/IPv6 header;
// a transport header cut off by the capture just leaves the ports unset.
StatusOr<L3Packet> ParseL3Packet(const uint8_t* data, size_t size);

// The audit record (without time/sandboxID, which EgressService adds):
//   {"protocol":"tcp"|"udp"|"icmp"|"ip"|"ipv6", "transport" (IPv6: "tcp"|"udp"|"icmpv6"|"ipproto-N"),
//    "decision","rule","reason","source":"nftables","destination":{"name":"","ip","port"},
//    "bytesOut" (this packet), "bytesIn":0, "durationMs":0, "ipProto", ["icmpType","icmpCode"], ["tcpFlags"]}
nlohmann::json NflogRecord(const NflogPrefix& prefix, const L3Packet& packet);

// A dropped TCP connection is never confirmed by conntrack, so each SYN
// retransmission is "ct state new" again and logged again: this filter says
// whether a SYN (without ACK) of the same flow (addresses, ports) and rule
// was already seen within `window`, so a retry is not a second record.
// Bounded: at most kMaxFlows remembered (expired ones dropped first, then all).
class SynRetryFilter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxFlows = 4096;
  explicit SynRetryFilter(Clock::duration window = std::chrono::seconds(120)) : window_(window) {}
  // True for a retry (the caller skips its record); false records and remembers it.
  bool IsRetry(const L3Packet& p, const std::string& rule, Clock::time_point now);
  size_t size() const { return seen_.size(); }

 private:
  Clock::duration window_;
  std::unordered_map<std::string, Clock::time_point> seen_;
};

// Both steps; a packet that does not parse still gives a record (protocol
// "unknown", the parse error as reason) so that nothing dropped goes unseen.
// nullopt only for a prefix that is not ours.
std::optional<nlohmann::json> NflogToRecord(std::string_view prefix, const uint8_t* data, size_t size);

}  // namespace airlock::egress
