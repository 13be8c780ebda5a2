// Glue between a sandbox's network (src/net) and the egress service
// (src/egress), used by the Manager: the policy goes to nftables (CIDR
// chains), to the resolver/proxy, and to <run_dir>/egress.json (so a daemon
// that re-adopts the sandbox restores it; without the file: deny all).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "egress/egress_service.h"
#include "egress/policy.h"
#include "net/nft_rules.h"
#include "net/sandbox_network.h"

namespace airlock {

struct EgressSetup {
  std::string pool_cidr;
  std::string upstream_dns;
  std::string scratch_dir;
  egress::AuditSink sink;
  egress::EgressLimits limits;
  std::shared_ptr<egress::RequestBroker> request_broker;
  std::string upstream_ca_file;
  std::vector<std::string> proxy_allow;  // egress::EgressConfig::proxy_allow
  // egress::EgressConfig::on_host_addresses_changed.
  std::function<void(const std::vector<uint32_t>&)> on_host_addresses_changed;
};

// Starts the resolver/proxy and installs the host-side table (net/host_egress.h).
StatusOr<std::unique_ptr<egress::EgressService>> StartEgress(const EgressSetup& setup);
// The ports the sandbox netns redirects to (host_ip filled in by the network).
net::NftEgress EgressPorts(const egress::EgressService& svc);
std::vector<net::NftCidr> NftCidrsFor(const egress::EgressPolicy& policy);
// The sandbox netns's set of host addresses (net::NftEgressCidrUpdate): the
// host's interface addresses outside the forbidden ranges (those are dropped
// before) and outside the pool, plus the pool when it is not forbidden.
std::vector<std::string> NftHostAddresses(const std::vector<uint32_t>& host, const std::string& pool_cidr);

// The NftHostAddresses set last written into every sandbox netns, so that a
// change of the host's interfaces that leaves the set as it was (a new
// sandbox's veth, in the pool) costs no nft run per sandbox. Thread-safe.
class HostAddressSet {
 public:
  // true when `elements` differ from the set last replaced (now remembered).
  bool Replace(std::vector<std::string> elements);

 private:
  std::mutex mu_;
  std::vector<std::string> elements_;
};

// First time (`add`): registers the sandbox with the service; else replaces
// its policy (closing connections no longer allowed).
Status ApplyEgressPolicy(net::SandboxNetwork& network, egress::EgressService& svc, const std::string& id,
                         const egress::EgressPolicy& policy, const std::string& run_dir, bool add,
                         std::optional<egress::EgressLimits> limits = std::nullopt);
// The policy stored in run_dir (deny-all when absent or unreadable).
egress::EgressPolicy LoadEgressPolicy(const std::string& run_dir);

}  // namespace airlock
