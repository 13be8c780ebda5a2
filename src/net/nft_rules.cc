#include "net/nft_rules.h"

#include "net/names.h"

namespace airlock::net {

const std::vector<std::string>& NftForbiddenRanges() {
  // Keep in sync with egress::IsForbiddenAddress (tested).
  static const std::vector<std::string> v = {"0.0.0.0/8",      "10.0.0.0/8",     "100.64.0.0/10",
                                             "127.0.0.0/8",    "169.254.0.0/16", "172.16.0.0/12",
                                             "192.0.0.0/24",   "192.168.0.0/16", "198.18.0.0/15",
                                             "224.0.0.0/4",    "240.0.0.0/4"};
  return v;
}

std::string NftExposeRule(const std::string& netns_ip, uint16_t netns_port, uint16_t guest_port) {
  return std::string("iifname \"") + kNetnsVeth + "\" ip daddr " + netns_ip + " tcp dport " +
         std::to_string(netns_port) + " dnat ip to " + kGuestIp + ":" + std::to_string(guest_port);
}

namespace {
std::string ExposedSetRule(const std::string& netns_ip) {
  return std::string("iifname \"") + kNetnsVeth + "\" ip daddr " + netns_ip + " tcp dport @" + kNftExposedSet +
         " dnat ip to " + kGuestIp;
}
std::string ExposedSetBody(int max_exposed_ports) {
  return "{ type inet_service; size " + std::to_string(max_exposed_ports < 1 ? 1 : max_exposed_ports) + "; }";
}
}  // namespace

std::string NftExposePorts(const std::vector<uint16_t>& ports) {
  if (ports.empty()) return "";
  std::string r = std::string("add element inet ") + kNftTable + " " + kNftExposedSet + " { ";
  for (size_t i = 0; i < ports.size(); ++i) r += (i ? ", " : "") + std::to_string(ports[i]);
  return r + " }\n";
}

std::string NftExposedSetMigration(const std::string& netns_ip, int max_exposed_ports) {
  return std::string("add set inet ") + kNftTable + " " + kNftExposedSet + " " + ExposedSetBody(max_exposed_ports) +
         "\nadd rule inet " + kNftTable + " prerouting " + ExposedSetRule(netns_ip) + "\n";
}

std::string NftLogPrefix(const std::string& decision, const std::string& rule) {
  std::string p = decision + ":" + rule;
  if (p.size() > kNftLogPrefixMax) p.resize(kNftLogPrefixMax);
  for (char& ch : p) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '/' || ch == ':' || ch == '_' || ch == '*' || ch == '-';
    if (!ok) ch = '_';
  }
  return p;
}

namespace {
// Two rules for a match (each line: `line_start` + match + statements + "\n"):
// within the sandbox's log budget the packet is logged with
// "<decision>:<rule>"; over it (the mirror bucket audit_log_over sees the
// same packets) at most one packet a second is logged as
// "<decision>:rate-limit", so the record stream says that records are
// missing. Neither rule decides: the next rule drops/accepts.
std::string LogRules(const std::string& line_start, const std::string& match, const std::string& decision,
                     const std::string& rule) {
  const std::string log = std::string(" log group ") + std::to_string(kNftLogGroup) + " prefix \"";
  return line_start + match + " limit name \"" + kNftLogLimit + "\"" + log + NftLogPrefix(decision, rule) + "\"\n" +
         line_start + match + " limit name \"" + kNftLogLimit + "_over\" limit name \"" + kNftLogLimit + "_note\"" +
         log + NftLogPrefix(decision, "rate-limit") + "\"\n";
}
// The named limits; `table` "inet airlock " for `add limit` commands.
std::string LogLimitObjects(const std::string& line_start, const std::string& table = "") {
  const std::string rate =
      std::to_string(kNftLogRatePerSecond) + "/second burst " + std::to_string(kNftLogBurst) + " packets }\n";
  return line_start + "limit " + table + kNftLogLimit + " { rate " + rate + line_start + "limit " + table +
         kNftLogLimit + "_over { rate over " + rate + line_start + "limit " + table + kNftLogLimit +
         "_note { rate 1/second burst 1 packets }\n";
}
std::string CidrNatRules(const std::vector<NftCidr>& cidrs) {
  std::string r;
  for (const auto& c : cidrs) {
    if (!c.cidr.empty() && c.cidr[0] == '!') {  // denied: never skips the proxy
      r += "add rule inet " + std::string(kNftTable) + " egress_cidr_nat ip daddr " + c.cidr.substr(1) + " return\n";
      continue;
    }
    if (!c.bypass_proxy) continue;
    if (c.port && *c.port != 80 && *c.port != 443) continue;
    r += "add rule inet " + std::string(kNftTable) + " egress_cidr_nat ip daddr " + c.cidr + " tcp dport " +
         (c.port ? std::to_string(*c.port) : std::string("{ 80, 443 }")) + " accept\n";
  }
  return r;
}
std::string CidrFwdRules(const std::vector<NftCidr>& cidrs) {
  std::string r;
  for (const auto& c : cidrs) {
    bool deny = !c.cidr.empty() && c.cidr[0] == '!';
    const std::string cidr = deny ? c.cidr.substr(1) : c.cidr;
    const std::string match = "add rule inet " + std::string(kNftTable) + " egress_cidr_fwd ip daddr " + cidr +
                              (c.port ? " tcp dport " + std::to_string(*c.port) : std::string(" meta l4proto tcp"));
    const std::string label = !c.rule.empty() ? c.rule : cidr + (c.port ? ":" + std::to_string(*c.port) : "");
    r += LogRules("", match, deny ? "deny" : "allow", label);
    r += match + (deny ? " drop\n" : " accept\n");
  }
  return r;
}
}  // namespace

std::string NftEgressCidrUpdate(const std::vector<NftCidr>& cidrs, const std::vector<std::string>& host) {
  std::string t = kNftTable;
  const std::string set = "inet " + t + " " + kNftHostSet;
  // "add limit", "add set": rulesets loaded by an older airlock lack the objects.
  std::string r = LogLimitObjects("add ", "inet " + t + " ") + "add set " + set +
                  " { type ipv4_addr; flags interval; }\nflush set " + set + "\n";
  if (!host.empty()) {
    r += "add element " + set + " { ";
    for (size_t i = 0; i < host.size(); ++i) r += (i ? ", " : "") + host[i];
    r += " }\n";
  }
  r += "flush chain inet " + t + " egress_cidr_nat\nflush chain inet " + t + " egress_cidr_fwd\n" + CidrNatRules(cidrs);
  const std::string match = "add rule inet " + t + " egress_cidr_fwd ip daddr @" + kNftHostSet;
  r += LogRules("", match, "deny", "host-address") + match + " drop\n";
  return r + CidrFwdRules(cidrs);
}

std::string NftRuleset(const std::string& netns_ip, const std::optional<NftEgress>& egress, int max_exposed_ports) {
  const std::string eth = std::string("\"") + kNetnsVeth + "\"";
  const std::string tap = std::string("\"") + kTapName + "\"";
  std::string r;
  r += std::string("table inet ") + kNftTable + " {\n";
  r += std::string("  set ") + kNftExposedSet + " " + ExposedSetBody(max_exposed_ports) + "\n";
  if (egress) {
    r += "  set forbidden {\n    type ipv4_addr; flags interval;\n    elements = { ";
    for (size_t i = 0; i < NftForbiddenRanges().size(); ++i) r += (i ? ", " : "") + NftForbiddenRanges()[i];
    r += " }\n  }\n";
    r += "  chain egress_cidr_nat {\n    ip daddr @forbidden return\n  }\n";
    r += "  chain egress_cidr_fwd {\n  }\n";
    r += LogLimitObjects("  ");
    // IPv6 from the guest never reaches the IP hooks (disable_ipv6): seen here.
    r += "  chain ingress_tap {\n    type filter hook ingress device " + tap + " priority filter; policy accept;\n";
    r += "    meta protocol ip6 ip6 daddr ff02::/16 drop\n";
    r += LogRules("    ", "meta protocol ip6", "deny", "ipv6");
    r += "    meta protocol ip6 drop\n  }\n";
  }
  r += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  r += "    " + NftExposeRule(netns_ip, kAgentPort, kAgentPort) + "\n";
  r += "    " + ExposedSetRule(netns_ip) + "\n";
  if (egress) {
    const std::string h = egress->host_ip;
    const std::string gw = kGatewayIp;
    r += "    iifname " + tap + " jump egress_cidr_nat\n";
    r += "    iifname " + tap + " ip daddr " + gw + " udp dport 53 dnat ip to " + h + ":" +
         std::to_string(egress->dns_port) + "\n";
    r += "    iifname " + tap + " ip daddr " + gw + " tcp dport 53 dnat ip to " + h + ":" +
         std::to_string(egress->dns_port) + "\n";
    r += "    iifname " + tap + " tcp dport 80 dnat ip to " + h + ":" + std::to_string(egress->http_port) + "\n";
    r += "    iifname " + tap + " tcp dport 443 dnat ip to " + h + ":" + std::to_string(egress->tls_port) + "\n";
  }
  r += "  }\n";
  r += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  r += "    oifname " + tap + " ct status dnat snat ip to " + kGatewayIp + "\n";
  if (egress) r += "    iifname " + tap + " oifname " + eth + " masquerade\n";
  r += "  }\n";
  r += "  chain forward {\n    type filter hook forward priority filter; policy drop;\n";
  r += "    iifname " + eth + " oifname " + tap + " ct status dnat accept\n";
  r += "    iifname " + tap + " oifname " + eth + " ct status dnat ct state established accept\n";
  if (egress) {
    const std::string h = egress->host_ip;
    r += "    iifname " + tap + " oifname " + eth + " ip daddr " + h + " udp dport " + std::to_string(egress->dns_port) +
         " ct status dnat accept\n";
    r += "    iifname " + tap + " oifname " + eth + " ip daddr " + h + " tcp dport { " +
         std::to_string(egress->dns_port) + ", " + std::to_string(egress->http_port) + ", " +
         std::to_string(egress->tls_port) + " } ct status dnat accept\n";
    r += LogRules("    ", "iifname " + tap + " ip daddr @forbidden", "deny", "forbidden-range");
    r += "    iifname " + tap + " ip daddr @forbidden drop\n";
    r += "    iifname " + tap + " oifname " + eth + " ct state new jump egress_cidr_fwd\n";
    r += "    iifname " + tap + " oifname " + eth + " ct state established accept\n";
    r += "    iifname " + eth + " oifname " + tap + " ct state established accept\n";
    r += LogRules("    ", "iifname " + tap, "deny", "default-deny");
    r += "    iifname " + tap + " drop\n";
  }
  r += "  }\n";
  r += "  chain input {\n    type filter hook input priority filter; policy drop;\n";
  r += "    iifname \"lo\" accept\n";
  r += "    ct state established,related accept\n";
  r += "    iifname " + eth + " icmp type echo-request accept\n";
  // The sandbox's own volume server (core/volumes.h), NFS and MOUNT on the
  // gateway address: from the guest only.
  r += "    iifname " + tap + " ip daddr " + kGatewayIp + " tcp dport { " + std::to_string(kVolumeNfsPort) + ", " +
       std::to_string(kVolumeMountPort) + " } accept\n";
  if (egress) {
    r += LogRules("    ", "iifname " + tap, "deny", "gateway");
    r += "    iifname " + tap + " drop\n";
  }
  r += "  }\n";
  r += "}\n";
  return r;
}

}  // namespace airlock::net
