#include "egress/nflog_packet.h"

#include <arpa/inet.h>
#include <netinet/in.h>

namespace airlock::egress {
namespace {

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

std::string Addr(int family, const uint8_t* p) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!::inet_ntop(family, p, buf, sizeof(buf))) return "";
  return buf;
}

// The transport header at data[off, size): ports, ICMP type, TCP flags.
void ParseTransport(L3Packet& p, const uint8_t* data, size_t size, size_t off) {
  if (p.fragment || off > size) return;
  const uint8_t* t = data + off;
  size_t n = size - off;
  switch (p.proto) {
    case IPPROTO_TCP:
      if (n >= 4) {
        p.sport = Be16(t);
        p.dport = Be16(t + 2);
      }
      if (n >= 14) p.tcp_flags = t[13];
      break;
    case IPPROTO_UDP:
    case IPPROTO_UDPLITE:
    case IPPROTO_SCTP:
      if (n >= 4) {
        p.sport = Be16(t);
        p.dport = Be16(t + 2);
      }
      break;
    case IPPROTO_ICMP:
    case IPPROTO_ICMPV6:
      if (n >= 2) {
        p.icmp_type = t[0];
        p.icmp_code = t[1];
      }
      break;
    default:
      break;
  }
}

std::string ProtoName(uint8_t proto) {
  switch (proto) {
    case IPPROTO_TCP:
      return "tcp";
    case IPPROTO_UDP:
      return "udp";
    case IPPROTO_ICMP:
      return "icmp";
    case IPPROTO_ICMPV6:
      return "icmpv6";
    case IPPROTO_SCTP:
      return "sctp";
    case IPPROTO_UDPLITE:
      return "udplite";
    default:
      return "ipproto-" + std::to_string(proto);
  }
}

}  // namespace

std::optional<NflogPrefix> ParseNflogPrefix(std::string_view prefix) {
  NflogPrefix out;
  size_t colon = prefix.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view d = prefix.substr(0, colon), r = prefix.substr(colon + 1);
  if (d != "deny" && d != "allow") return std::nullopt;
  if (r.empty() || r.size() > 63) return std::nullopt;
  for (char ch : r)
    if (ch < 0x21 || ch > 0x7e || ch == '"' || ch == '\\') return std::nullopt;
  out.decision = std::string(d);
  out.rule = std::string(r);
  return out;
}

StatusOr<L3Packet> ParseL3Packet(const uint8_t* data, size_t size) {
  if (!data || size < 1) return InvalidArgument("nflog: empty packet");
  L3Packet p;
  p.version = data[0] >> 4;
  if (p.version == 4) {
    if (size < 20) return InvalidArgument("nflog: IPv4 header cut off (" + std::to_string(size) + " bytes)");
    size_t ihl = static_cast<size_t>(data[0] & 0x0f) * 4;
    if (ihl < 20) return InvalidArgument("nflog: IPv4 header length " + std::to_string(ihl) + " < 20");
    uint16_t total = Be16(data + 2);
    if (total < ihl) return InvalidArgument("nflog: IPv4 total length " + std::to_string(total) + " < header");
    p.length = total;
    p.fragment = (Be16(data + 6) & 0x1fff) != 0;
    p.proto = data[9];
    p.src = Addr(AF_INET, data + 12);
    p.dst = Addr(AF_INET, data + 16);
    // The transport header: within both the capture and the packet's own length.
    ParseTransport(p, data, std::min<size_t>(size, total), ihl);
    return p;
  }
  if (p.version == 6) {
    if (size < 40) return InvalidArgument("nflog: IPv6 header cut off (" + std::to_string(size) + " bytes)");
    p.length = 40u + Be16(data + 4);
    p.src = Addr(AF_INET6, data + 8);
    p.dst = Addr(AF_INET6, data + 24);
    size_t end = std::min<size_t>(size, p.length);
    uint8_t next = data[6];
    size_t off = 40;
    // Extension headers (bounded walk): hop-by-hop, routing, fragment, destination options.
    for (int i = 0; i < 8; ++i) {
      if (next == IPPROTO_HOPOPTS || next == IPPROTO_ROUTING || next == IPPROTO_DSTOPTS) {
        if (off + 2 > end) {
          next = IPPROTO_NONE;  // cut off: the transport is unknown
          break;
        }
        uint8_t nh = data[off];
        off += (static_cast<size_t>(data[off + 1]) + 1) * 8;
        next = nh;
      } else if (next == IPPROTO_FRAGMENT) {
        if (off + 8 > end) {
          next = IPPROTO_NONE;
          break;
        }
        if ((Be16(data + off + 2) & 0xfff8) != 0) p.fragment = true;
        next = data[off];
        off += 8;
      } else {
        break;
      }
    }
    p.proto = next;
    ParseTransport(p, data, end, off);
    return p;
  }
  return InvalidArgument("nflog: IP version " + std::to_string(p.version));
}

nlohmann::json NflogRecord(const NflogPrefix& prefix, const L3Packet& p) {
  nlohmann::json dest = {{"name", ""}, {"ip", p.dst}};
  if (p.dport) dest["port"] = *p.dport;
  std::string protocol;
  if (p.version == 6) {
    protocol = "ipv6";
  } else if (p.proto == IPPROTO_TCP || p.proto == IPPROTO_UDP || p.proto == IPPROTO_ICMP) {
    protocol = ProtoName(p.proto);
  } else {
    protocol = "ip";
  }
  std::string reason = prefix.decision == "deny" ? "dropped by the sandbox's nftables rules"
                                                 : "forwarded by an allowed CIDR rule (first packet of the connection)";
  if (prefix.rule == "rate-limit")
    reason = std::string("the sandbox's nftables log budget is spent: further packets are ") +
             (prefix.decision == "deny" ? "dropped" : "forwarded") +
             " without records for now (this one is a sample, at most one a second)";
  if (p.fragment) reason += "; a fragment";
  nlohmann::json r = {{"protocol", protocol}, {"decision", prefix.decision}, {"rule", prefix.rule},  {"reason", reason},
                      {"source", "nftables"}, {"destination", dest},         {"bytesOut", p.length}, {"bytesIn", 0},
                      {"durationMs", 0},      {"ipProto", p.proto}};
  if (p.version == 6 || protocol == "ip") r["transport"] = ProtoName(p.proto);
  if (p.icmp_type) {
    r["icmpType"] = *p.icmp_type;
    r["icmpCode"] = p.icmp_code.value_or(0);
  }
  if (p.tcp_flags) r["tcpFlags"] = *p.tcp_flags;
  return r;
}

bool SynRetryFilter::IsRetry(const L3Packet& p, const std::string& rule, Clock::time_point now) {
  if (p.proto != IPPROTO_TCP || !p.tcp_flags || !p.sport || !p.dport) return false;
  if ((*p.tcp_flags & 0x12) != 0x02) return false;  // SYN without ACK only
  std::string key = rule + "|" + p.src + "|" + std::to_string(*p.sport) + "|" + p.dst + "|" + std::to_string(*p.dport);
  auto it = seen_.find(key);
  if (it != seen_.end() && now - it->second < window_) return true;
  if (seen_.size() >= kMaxFlows) {
    std::erase_if(seen_, [&](const auto& kv) { return now - kv.second >= window_; });
    if (seen_.size() >= kMaxFlows) seen_.clear();
  }
  seen_[key] = now;
  return false;
}

std::optional<nlohmann::json> NflogToRecord(std::string_view prefix, const uint8_t* data, size_t size) {
  auto pre = ParseNflogPrefix(prefix);
  if (!pre) return std::nullopt;
  auto pkt = ParseL3Packet(data, size);
  if (pkt.ok()) return NflogRecord(*pre, *pkt);
  return nlohmann::json{{"protocol", "unknown"}, {"decision", pre->decision},
                        {"rule", pre->rule},     {"reason", std::string(pkt.status().message())},
                        {"source", "nftables"},  {"destination", {{"name", ""}, {"ip", ""}}},
                        {"bytesOut", size},      {"bytesIn", 0},
                        {"durationMs", 0}};
}

}  // namespace airlock::egress
