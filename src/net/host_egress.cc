#include "net/host_egress.h"

#include <unistd.h>

#include <fstream>

#include "common/subprocess.h"
#include "net/names.h"

namespace airlock::net {

std::string NftHostRuleset(const std::string& pool_cidr, const NftEgress& p) {
  const std::string t = kNftHostTable;
  const std::string alh = std::string("\"") + kHostVethPrefix + "*\"";
  std::string r = "table inet " + t + " {}\ndelete table inet " + t + "\n";
  r += "table inet " + t + " {\n";
  r += "  set forbidden {\n    type ipv4_addr; flags interval;\n    elements = { ";
  for (size_t i = 0; i < NftForbiddenRanges().size(); ++i) r += (i ? ", " : "") + NftForbiddenRanges()[i];
  r += " }\n  }\n";
  r += "  chain input {\n    type filter hook input priority filter - 5; policy accept;\n";
  r += "    iifname " + alh + " ct state established,related accept\n";
  r += "    iifname " + alh + " udp dport " + std::to_string(p.dns_port) + " accept\n";
  r += "    iifname " + alh + " tcp dport { " + std::to_string(p.dns_port) + ", " + std::to_string(p.http_port) + ", " +
       std::to_string(p.tls_port) + " } accept\n";
  r += "    iifname " + alh + " drop\n  }\n";
  r += "  chain forward {\n    type filter hook forward priority filter - 5; policy accept;\n";
  r += "    iifname " + alh + " ip daddr @forbidden drop\n";
  r += "    iifname " + alh + " meta nfproto ipv6 drop\n";
  r += "    oifname " + alh + " ct state new drop\n  }\n";
  r += "  chain postrouting {\n    type nat hook postrouting priority srcnat; policy accept;\n";
  r += "    ip saddr " + pool_cidr + " oifname != " + alh + " masquerade\n  }\n";
  r += "}\n";
  return r;
}

Status InstallHostEgress(const std::string& pool_cidr, const NftEgress& ports, bool forwarding,
                         const std::string& scratch_dir) {
  // Per process: daemons sharing a state dir (a cluster's nodes on one
  // host, each in its own network namespace) must not load each other's file.
  const std::string file = scratch_dir + "/airlock_host." + std::to_string(::getpid()) + ".nft";
  {
    std::ofstream f(file, std::ios::trunc);
    if (!f) return ErrnoError("open " + file);
    f << NftHostRuleset(pool_cidr, ports);
    if (!f) return ErrnoError("write " + file);
  }
  auto r = RunChecked({"nft", "-f", file});
  ::unlink(file.c_str());
  if (!r.ok()) return r.status().WithContext("host egress table");
  if (forwarding) {
    std::ofstream f("/proc/sys/net/ipv4/ip_forward");
    if (!(f << "1")) return ErrnoError("write /proc/sys/net/ipv4/ip_forward");
  }
  return OkStatus();
}

Status RemoveHostEgress() {
  auto r = Run({"nft", "delete", "table", "inet", kNftHostTable});
  if (!r.ok()) return r.status();
  return OkStatus();
}

}  // namespace airlock::net
