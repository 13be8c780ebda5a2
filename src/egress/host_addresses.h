// HostAddresses: which IPv4 addresses are the host's own (docs/network.md
// "Egress": the proxy, the resolver's pinning and the CIDR rules never let
// a guest reach one, whatever the policy allows).
//
// The view is that of the network namespace Open() runs in (the daemon's:
// the host's root namespace in production, a test namespace in tests):
//   - every IPv4 address of every interface (an RTM_GETADDR dump), dumped
//     again when the kernel reports an address change on the NETLINK_ROUTE
//     socket subscribed to RTMGRP_IPV4_IFADDR (Refresh(), call it when fd()
//     is readable); the host-side veth of every sandbox is such an address;
//   - `extra` CIDRs (the sandbox address pool: the netns ends of the veths,
//     i.e. other sandboxes);
//   - per query, the kernel's routing decision (RTM_GETROUTE): an address
//     the kernel delivers locally (route type local or broadcast: one added
//     a moment ago, an AnyIP `local` route) counts even before Refresh ran.
// A lookup that fails for another reason than "no route" counts as a host
// address (fail closed). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::egress {

struct Cidr {
  uint32_t net = 0;  // host byte order
  int prefix = 32;
  bool Contains(uint32_t ip) const {
    uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
    return (ip & mask) == (net & mask);
  }
};

class HostAddresses {
 public:
  // Errors: the netlink sockets cannot be opened or the first dump fails.
  static StatusOr<std::unique_ptr<HostAddresses>> Open(std::vector<Cidr> extra = {});

  // An interface address, inside an `extra` CIDR, or delivered locally.
  bool IsHostAddress(uint32_t ip);
  // The interfaces' addresses as last dumped: sorted, unique.
  std::vector<uint32_t> Addresses() const;
  const std::vector<Cidr>& extra() const { return extra_; }
  // Bumped whenever Refresh() finds a different set.
  uint64_t generation() const;

  // The change-notification socket (non-blocking); readable after a change.
  int fd() const { return events_.get(); }
  // Drains fd(); when anything arrived (or the kernel dropped events),
  // dumps again. True when the set changed.
  bool Refresh();

 private:
  HostAddresses() = default;
  StatusOr<std::vector<uint32_t>> Dump();
  // RTM_GETROUTE: true for a local/broadcast route, false for another type or no route.
  StatusOr<bool> RoutesLocally(uint32_t ip);

  std::vector<Cidr> extra_;
  UniqueFd events_;  // RTMGRP_IPV4_IFADDR subscription
  mutable std::mutex mu_;
  UniqueFd query_;  // dumps and route lookups (guarded by mu_)
  uint32_t seq_ = 0;
  std::vector<uint32_t> addresses_;
  uint64_t generation_ = 0;
};

}  // namespace airlock::egress
