#include "net/nft_rules.h"

#include "net/names.h"

namespace airlock::net {

std::string NftExposeRule(const std::string& netns_ip, uint16_t netns_port, uint16_t guest_port) {
  return std::string("iifname \"") + kNetnsVeth + "\" ip daddr " + netns_ip + " tcp dport " +
         std::to_string(netns_port) + " dnat ip to " + kGuestIp + ":" + std::to_string(guest_port);
}

std::string NftRuleset(const std::string& netns_ip) {
  const std::string eth = std::string("\"") + kNetnsVeth + "\"";
  const std::string tap = std::string("\"") + kTapName + "\"";
  std::string r;
  r += std::string("table inet ") + kNftTable + " {\n";
  r += "  chain prerouting {\n    type nat hook prerouting priority dstnat; policy accept;\n";
  r += "    " + NftExposeRule(netns_ip, kAgentPort, kAgentPort) + "\n  }\n";
  r += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  r += "    oifname " + tap + " ct status dnat snat ip to " + kGatewayIp + "\n  }\n";
  r += "  chain forward {\n    type filter hook forward priority filter; policy drop;\n";
  r += "    iifname " + eth + " oifname " + tap + " ct status dnat accept\n";
  r += "    iifname " + tap + " oifname " + eth + " ct status dnat ct state established accept\n  }\n";
  r += "  chain input {\n    type filter hook input priority filter; policy drop;\n";
  r += "    iifname \"lo\" accept\n";
  r += "    ct state established,related accept\n";
  r += "    iifname " + eth + " icmp type echo-request accept\n  }\n";
  r += "}\n";
  return r;
}

}  // namespace airlock::net
