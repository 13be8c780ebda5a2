// SandboxNetwork: one sandbox's network, built as a checklist of named steps
// (docs/network.md):
//
//   host ── alh<x> (even /31 addr) ══ veth ══ eth0 (odd) ─┐ netns al-<id>
//                                   guest 169.254.0.21 ◀── tap0 169.254.0.22/30
//
// The host reaches the guest agent at agent_endpoint() = "<odd>:49983",
// DNAT'd and SNAT'd inside the netns. The guest can reach nothing (no egress).
// No rule is added in the root namespace.
//
// Requires root (CAP_NET_ADMIN + CAP_SYS_ADMIN for `ip netns`), `ip`, `nft`.
// Destroy() (also run by the destructor) is idempotent and removes nft table,
// tap, veth, netns and lease; errors name the step that failed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/checklist.h"
#include "common/fd.h"
#include "common/status.h"
#include "net/address_pool.h"
#include "net/nft_rules.h"
#include "runtime/runtime.h"  // GuestLink

namespace airlock::net {

struct NetworkOptions {
  // What the runtime plugs its guest into (runtime/runtime.h GuestLink):
  // tap0 itself (a VMM's NIC), or, for a runtime whose network stack takes
  // over a host interface (gVisor's netstack), the guest's end of a veth
  // pair (eth0, 169.254.0.21/30, default route via 169.254.0.22) alone in a
  // netns of its own, alg-<id>, whose other end is tap0: same name, same
  // address, so the nft rules, DNAT and egress do not change.
  GuestLink guest_link = GuestLink::kTap;
  // Owner of tap0 (so a VMM that dropped root with -runas may still open it);
  // nullopt = root only.
  std::optional<uid_t> tap_owner;
  // Egress through the daemon's resolver/proxy (nft_rules.h); host_ip is
  // filled in from the lease. nullopt: the guest reaches nothing.
  std::optional<NftEgress> egress;
  // Size of the nft set of exposed guest ports (the kernel refuses more).
  int max_exposed_ports = kDefaultMaxExposedPorts;
};

class SandboxNetwork {
 public:
  // `pool` must outlive the network.
  static StatusOr<std::unique_ptr<SandboxNetwork>> Create(const std::string& sandbox_id, AddressPool& pool,
                                                          const NetworkOptions& options = {});
  // Takes over an existing network (a daemon restarting): the netns and lease
  // must exist; the lease's owner becomes this process.
  static StatusOr<std::unique_ptr<SandboxNetwork>> Adopt(const std::string& sandbox_id, AddressPool& pool);
  ~SandboxNetwork();
  SandboxNetwork(const SandboxNetwork&) = delete;
  SandboxNetwork& operator=(const SandboxNetwork&) = delete;

  const std::string& sandbox_id() const { return id_; }
  const std::string& netns_name() const { return netns_; }
  std::string netns_path() const { return "/run/netns/" + netns_; }
  // fd of /run/netns/al-<id> (O_RDONLY|O_CLOEXEC), for setns(CLONE_NEWNET)
  // before exec'ing the VMM. Valid until Destroy().
  int netns_fd() const { return netns_fd_.get(); }
  const std::string& tap_name() const { return tap_; }
  // "/run/netns/alg-<id>" for GuestLink::kVethNetns; "" otherwise.
  const std::string& guest_netns_path() const { return guest_netns_path_; }
  const std::string& host_veth() const { return host_veth_; }
  const AddressLease& lease() const { return lease_; }
  std::string host_ip() const { return lease_.host_str(); }
  std::string netns_ip() const { return lease_.netns_str(); }
  // The guest's own address with its prefix ("169.254.0.21/30") and its
  // gateway ("169.254.0.22"): the same in every sandbox (names.h).
  static std::string guest_cidr();
  static std::string gateway_ip();
  // "<netns ip>:49983", reachable from the root namespace.
  std::string agent_endpoint() const;

  // DNAT <netns ip>:P → 169.254.0.21:P (TCP) for each port: elements added
  // to the exposed_ports set in one netlink batch (no process). Errors:
  // FailedPrecondition once destroyed; Internal with nft's message (e.g. the
  // set is full: more than max_exposed_ports).
  Status ExposeTcpPorts(const std::vector<uint16_t>& ports);
  // Replaces the allowed CIDR:port pairs and the host's addresses (never
  // forwarded to; NftEgressCidrUpdate), atomically; needs egress.
  Status SetEgressCidrs(const std::vector<NftCidr>& cidrs, const std::vector<std::string>& host_addresses);
  // Replaces only the host's addresses (the CIDRs last set stay).
  Status SetEgressHostAddresses(const std::vector<std::string>& host_addresses);

  // Makes the calling process the lease's owner again (it was the VMM's):
  // called before the VMM is stopped, so that no other process's clean-up
  // (CleanupLeftovers) takes the network for a dead owner's while this one
  // still tears it down or starts a new VMM in it (a rollback).
  Status HoldLease() { return pool_ ? pool_->Adopt(lease_) : OkStatus(); }
  // Removes everything; idempotent.
  Status Destroy();
  // Forget the network without tearing it down (the daemon keeps it).
  void Release() { released_ = true; }

 private:
  // Names (netns, veth, tap) follow from the id; see names.h.
  SandboxNetwork(const std::string& sandbox_id, AddressPool& pool);
  Status ApplyEgressLocked(const std::vector<NftCidr>& cidrs, const std::vector<std::string>& host_addresses);

  std::string id_, netns_, host_veth_, tap_;
  std::string guest_netns_path_;
  AddressLease lease_;
  UniqueFd netns_fd_;
  AddressPool* pool_ = nullptr;
  Checklist steps_;
  bool destroyed_ = false;
  bool released_ = false;
  bool adopted_ = false;  // built by Adopt(): torn down by name, not by checklist
  std::mutex egress_mu_;  // one CIDR update at a time; guards cidrs_, host_addresses_, egress_applied_
  std::vector<NftCidr> cidrs_;
  // What the netns's egress chains were last set to: an update that changes
  // nothing (a warm-pool hand-out with the default deny-all policy) runs no nft.
  std::vector<std::string> host_addresses_;
  bool egress_applied_ = false;
  int max_exposed_ports_ = kDefaultMaxExposedPorts;
};

// Removes the network objects of leases in `lease_root` whose owner process
// is gone and that belong to `owner` (a daemon's registry) or to no daemon
// (in-process runs, older leases): the netns al-<id>, its links and nft
// file, then the lease. Nothing without such a lease is touched: another
// daemon's sandboxes (leases tagged with its registry), another lease root's,
// anything named al-* by hand. Returns what was removed.
// `lease_root` is the AddressPool root (kHostLeaseRoot outside tests).
StatusOr<std::vector<std::string>> CleanupLeftovers(const std::string& lease_root, const std::string& owner = "");

// Teardown of one sandbox's network by name (used by cleanup and by Destroy
// of an adopted network): nft table, veth, netns; each "already gone" is OK.
Status TeardownByName(const std::string& sandbox_id);

}  // namespace airlock::net
