#include "core/sandbox_egress.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "egress/host_addresses.h"
#include "egress/nflog_reader.h"
#include "egress/policy_json.h"
#include "net/host_egress.h"

namespace airlock {
namespace {

static_assert(egress::kNflogGroup == net::kNftLogGroup, "the egress service reads the group the ruleset logs to");

// IPv4 forwarding in the daemon's namespace, needed only once a sandbox has
// CIDR rules (proxied traffic is opened by the daemon itself).
Status EnsureIpForward() {
  std::ifstream in("/proc/sys/net/ipv4/ip_forward");
  int v = 0;
  if (in >> v && v == 1) return OkStatus();
  std::ofstream out("/proc/sys/net/ipv4/ip_forward");
  if (!(out << "1")) return ErrnoError("write /proc/sys/net/ipv4/ip_forward");
  LOG_INFO("egress: enabled net.ipv4.ip_forward for CIDR egress rules");
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<egress::EgressService>> StartEgress(const EgressSetup& setup) {
  egress::EgressConfig cfg;
  cfg.upstream_dns = setup.upstream_dns;
  cfg.audit_sink = setup.sink;
  cfg.default_limits = setup.limits;
  cfg.request_broker = setup.request_broker;
  cfg.upstream_ca_file = setup.upstream_ca_file;
  cfg.proxy_allow = setup.proxy_allow;
  cfg.sandbox_pool = setup.pool_cidr;
  cfg.on_host_addresses_changed = setup.on_host_addresses_changed;
  ASSIGN_OR_RETURN(auto svc, egress::EgressService::Start(cfg));
  RETURN_IF_ERROR(net::InstallHostEgress(setup.pool_cidr, EgressPorts(*svc), false, setup.scratch_dir));
  return svc;
}

net::NftEgress EgressPorts(const egress::EgressService& svc) {
  return net::NftEgress{"", svc.config().dns_port, svc.config().http_port, svc.config().tls_port};
}

std::vector<net::NftCidr> NftCidrsFor(const egress::EgressPolicy& policy) {
  // denyOut CIDRs first ("!": dropped, and never skip the proxy), then the
  // allowed CIDRs, then "internet" (every public address; forbidden ranges
  // are dropped before these chains run).
  std::vector<net::NftCidr> out;
  for (const auto& r : policy.deny()) {
    if (r.kind != egress::Rule::Kind::kCidr) continue;
    out.push_back({"!" + egress::Ipv4ToString(r.net) + "/" + std::to_string(r.prefix), r.port, false, r.text});
  }
  // With network.egressProxy nothing is forwarded around the proxy: names
  // only (80/443, through it); the policy refuses CIDR allow rules then.
  if (policy.upstream_proxy()) return out;
  for (const auto& r : policy.CidrAllowRules())
    out.push_back({egress::Ipv4ToString(r.net) + "/" + std::to_string(r.prefix), r.port, true, r.text});
  if (policy.internet()) out.push_back({"0.0.0.0/0", std::nullopt, false, "internet"});
  return out;
}

std::vector<std::string> NftHostAddresses(const std::vector<uint32_t>& host, const std::string& pool_cidr) {
  std::vector<std::string> out;
  std::optional<egress::Cidr> pool;
  if (auto r = egress::ParseRule(pool_cidr); r.ok() && r->kind == egress::Rule::Kind::kCidr) {
    pool = egress::Cidr{r->net, r->prefix};
    // The pool is forbidden when its first and last addresses are (the
    // forbidden ranges are aligned CIDRs at least as wide as any sane pool).
    uint32_t last = r->net | (r->prefix == 0 ? ~uint32_t{0} : ~(~uint32_t{0} << (32 - r->prefix)));
    if (!egress::IsForbiddenAddress(r->net) || !egress::IsForbiddenAddress(last))
      out.push_back(egress::Ipv4ToString(r->net) + "/" + std::to_string(r->prefix));
  }
  for (uint32_t ip : host) {
    if (egress::IsForbiddenAddress(ip) || (pool && pool->Contains(ip))) continue;
    out.push_back(egress::Ipv4ToString(ip));
  }
  return out;
}

Status ApplyEgressPolicy(net::SandboxNetwork& network, egress::EgressService& svc, const std::string& id,
                         const egress::EgressPolicy& policy, const std::string& run_dir, bool add,
                         std::optional<egress::EgressLimits> limits) {
  auto cidrs = NftCidrsFor(policy);
  bool forwarding = false;
  for (const auto& c : cidrs)
    if (c.cidr[0] != '!') forwarding = true;
  if (forwarding) RETURN_IF_ERROR(EnsureIpForward());
  // Order: tighten first. On add nothing is allowed yet; on update the
  // service (names) and nft (CIDRs) are replaced one after the other.
  RETURN_IF_ERROR(network.SetEgressCidrs(cidrs, NftHostAddresses(svc.HostAddressList(), svc.config().sandbox_pool)));
  if (add) {
    RETURN_IF_ERROR(svc.AddSandbox(id, network.host_ip(), network.netns_ip(), policy, limits, network.netns_name()));
  } else {
    RETURN_IF_ERROR(svc.UpdatePolicy(id, policy));
  }
  if (!run_dir.empty()) {
    // Owner-only: network.rules header values (credentials) are kept here so
    // a restarted daemon gets them back.
    std::string path = run_dir + "/egress.json", text = policy.ToJson(/*with_header_values=*/true);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    if (fd >= 0) ::close(fd);
    if (!ok) LOG_WARN("sandbox={} cannot write {}: {}", id, path, std::strerror(errno));
  }
  return OkStatus();
}

egress::EgressPolicy LoadEgressPolicy(const std::string& run_dir) {
  std::ifstream f(run_dir + "/egress.json");
  if (!f) return egress::EgressPolicy();
  std::stringstream ss;
  ss << f.rdbuf();
  auto p = egress::PolicyFromStoredJson(ss.str());
  if (!p.ok()) {
    LOG_WARN("egress policy in {}: {}; denying all", run_dir, p.status().message());
    return egress::EgressPolicy();
  }
  return *p;
}

bool HostAddressSet::Replace(std::vector<std::string> elements) {
  std::lock_guard<std::mutex> l(mu_);
  if (elements == elements_) return false;
  elements_ = std::move(elements);
  return true;
}

}  // namespace airlock
