#include "net/sandbox_network.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/log.h"
#include "common/subprocess.h"
#include "net/names.h"
#include "net/nft_batch.h"
#include "net/nft_rules.h"

namespace airlock::net {
namespace {

// Runs a command; a failure whose stderr contains one of `gone` counts as
// success (the object was already removed).
Status RunIgnoringGone(const std::vector<std::string>& argv, int netns_fd = -1) {
  auto r = Run(argv, netns_fd);
  if (!r.ok()) return r.status();
  if (r->status.success()) return OkStatus();
  static const char* kGone[] = {"Cannot find device", "No such file or directory", "does not exist",
                                "Cannot open network namespace"};
  for (const char* g : kGone) {
    if (r->err.find(g) != std::string::npos) return OkStatus();
  }
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::string err = r->err;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  return Internal("'" + cmd + "' failed (" + r->status.ToString() + "): " + err);
}

Status Ok(const StatusOr<std::string>& r) { return r.ok() ? OkStatus() : r.status(); }

std::string NetDir(const AddressPool& pool) {
  // lease_dir is <root>/net/leases
  std::string d = pool.lease_dir();
  return d.substr(0, d.rfind('/'));
}

std::string NftFile(const std::string& net_dir, const std::string& id) {
  return net_dir + "/" + NetnsName(id) + ".nft";
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return ErrnoError("open " + path);
  f << text;
  f.close();
  if (!f) return ErrnoError("write " + path);
  return OkStatus();
}

// Host-side IPv6 off on our veth, so nothing v6 leaks onto the link.
void DisableHostIpv6(const std::string& link) {
  std::ofstream f("/proc/sys/net/ipv6/conf/" + link + "/disable_ipv6");
  if (f) f << "1";
}

}  // namespace

Status TeardownByName(const std::string& id) {
  RETURN_IF_ERROR(ValidateSandboxId(id));
  const std::string ns = NetnsName(id);
  Status first;
  auto note = [&](Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  if (NetnsExists(ns)) {
    std::string p = "/run/netns/" + ns;
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd) note(RunIgnoringGone({"nft", "delete", "table", "inet", kNftTable}, fd.get()));
  }
  note(RunIgnoringGone({"ip", "link", "del", HostVethName(id)}));
  note(RunIgnoringGone({"ip", "netns", "del", ns}));
  if (NetnsExists(GuestNetnsName(id))) note(RunIgnoringGone({"ip", "netns", "del", GuestNetnsName(id)}));
  return first;
}

SandboxNetwork::SandboxNetwork(const std::string& sandbox_id, AddressPool& pool)
    : id_(sandbox_id),
      netns_(NetnsName(sandbox_id)),
      host_veth_(HostVethName(sandbox_id)),
      tap_(kTapName),
      pool_(&pool) {}

StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::Create(const std::string& sandbox_id, AddressPool& pool,
                                                                 const NetworkOptions& options) {
  RETURN_IF_ERROR(ValidateSandboxId(sandbox_id));
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(sandbox_id, pool));
  n->max_exposed_ports_ = options.max_exposed_ports;
  SandboxNetwork* self = n.get();
  Checklist& c = n->steps_;
  const std::string ns = n->netns_, veth = n->host_veth_, tap = n->tap_;
  const std::string net_dir = NetDir(pool);

  RETURN_IF_ERROR(c.Do(
      "lease",
      [&]() -> Status {
        ASSIGN_OR_RETURN(self->lease_, pool.Acquire(sandbox_id));
        return OkStatus();
      },
      [self]() { return self->pool_->Release(self->lease_); }));
  const std::string host_ip = n->lease_.host_str(), netns_ip = n->lease_.netns_str();

  RETURN_IF_ERROR(c.Do(
      "netns",
      [&]() {
        return Ok(RunChecked({"ip", "netns", "add", ns}));
      },
      [ns]() {
        return RunIgnoringGone({"ip", "netns", "del", ns});
      }));
  RETURN_IF_ERROR(c.Do(
      "netns-fd",
      [&]() -> Status {
        std::string p = "/run/netns/" + ns;
        self->netns_fd_.Reset(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
        if (!self->netns_fd_) return ErrnoError("open " + p);
        return OkStatus();
      },
      [self]() {
        self->netns_fd_.Reset();  // else the netns outlives `ip netns del`
        return OkStatus();
      }));
  const int fd = n->netns_fd_.get();

  RETURN_IF_ERROR(c.Do(
      "veth",
      [&]() {
        return Ok(RunChecked({"ip", "link", "add", veth, "type", "veth", "peer", "name", kNetnsVeth, "netns", ns}));
      },
      [veth]() {
        return RunIgnoringGone({"ip", "link", "del", veth});
      }));
  RETURN_IF_ERROR(c.Do(
      "host-addr",
      [&]() -> Status {
        DisableHostIpv6(veth);
        RETURN_IF_ERROR(Ok(RunChecked({"ip", "addr", "add", host_ip + "/31", "dev", veth})));
        return Ok(RunChecked({"ip", "link", "set", veth, "up"}));
      },
      nullptr));
  RETURN_IF_ERROR(c.Do(
      "netns-sysctl",
      [&]() {
        return Ok(RunChecked({"sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.disable_ipv6=1",
                              "net.ipv6.conf.default.disable_ipv6=1"},
                             fd));
      },
      nullptr));
  RETURN_IF_ERROR(c.Do(
      "netns-links",
      [&]() -> Status {
        RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "set", "lo", "up"}, fd)));
        RETURN_IF_ERROR(Ok(RunChecked({"ip", "addr", "add", netns_ip + "/31", "dev", kNetnsVeth}, fd)));
        RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "set", kNetnsVeth, "up"}, fd)));
        // Egress CIDR flows leave through the host; the forward chain decides.
        if (options.egress)
          return Ok(RunChecked({"ip", "route", "add", "default", "via", host_ip, "dev", kNetnsVeth}, fd));
        return OkStatus();
      },
      nullptr));
  if (options.guest_link == GuestLink::kVethNetns) {
    const std::string gns = GuestNetnsName(sandbox_id);
    RETURN_IF_ERROR(c.Do(
        "guest-netns",
        [&]() -> Status {
          RETURN_IF_ERROR(Ok(RunChecked({"ip", "netns", "add", gns})));
          self->guest_netns_path_ = "/run/netns/" + gns;
          return OkStatus();
        },
        [gns]() { return RunIgnoringGone({"ip", "netns", "del", gns}); }));
    RETURN_IF_ERROR(c.Do(
        "guest-veth",
        [&]() -> Status {
          // tap0 here, eth0 in the guest netns: the guest's address on eth0,
          // the gateway's on tap0, as a tap and a VMM's NIC would have them.
          RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "add", tap, "type", "veth", "peer", "name", kNetnsVeth, "netns", gns}, fd)));
          RETURN_IF_ERROR(Ok(RunChecked(
              {"ip", "addr", "add", std::string(kGatewayIp) + "/" + std::to_string(kGuestPrefix), "dev", tap}, fd)));
          RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "set", tap, "up"}, fd)));
          UniqueFd g(::open(self->guest_netns_path_.c_str(), O_RDONLY | O_CLOEXEC));
          if (!g) return ErrnoError("open " + self->guest_netns_path_);
          RETURN_IF_ERROR(Ok(RunChecked({"sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                                         "net.ipv6.conf.default.disable_ipv6=1"},
                                        g.get())));
          RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "set", "lo", "up"}, g.get())));
          RETURN_IF_ERROR(Ok(RunChecked(
              {"ip", "addr", "add", std::string(kGuestIp) + "/" + std::to_string(kGuestPrefix), "dev", kNetnsVeth},
              g.get())));
          RETURN_IF_ERROR(Ok(RunChecked({"ip", "link", "set", kNetnsVeth, "up"}, g.get())));
          return Ok(RunChecked({"ip", "route", "add", "default", "via", kGatewayIp, "dev", kNetnsVeth}, g.get()));
        },
        [self, tap]() {
          if (!self->netns_fd_) return OkStatus();
          return RunIgnoringGone({"ip", "link", "del", tap}, self->netns_fd_.get());
        }));
  } else {
    RETURN_IF_ERROR(c.Do(
        "tap",
        [&]() -> Status {
          std::vector<std::string> add = {"ip", "tuntap", "add", "dev", tap, "mode", "tap"};
          if (options.tap_owner) {
            add.push_back("user");
            add.push_back(std::to_string(*options.tap_owner));
          }
          RETURN_IF_ERROR(Ok(RunChecked(add, fd)));
          RETURN_IF_ERROR(Ok(RunChecked(
              {"ip", "addr", "add", std::string(kGatewayIp) + "/" + std::to_string(kGuestPrefix), "dev", tap}, fd)));
          return Ok(RunChecked({"ip", "link", "set", tap, "up"}, fd));
        },
        [self, tap]() {
          if (!self->netns_fd_) return OkStatus();
          return RunIgnoringGone({"ip", "link", "del", tap}, self->netns_fd_.get());
        }));
  }
  const std::string nft_file = NftFile(net_dir, sandbox_id);
  RETURN_IF_ERROR(c.Do(
      "nft",
      [&]() -> Status {
        std::optional<NftEgress> egress = options.egress;
        if (egress) egress->host_ip = host_ip;
        RETURN_IF_ERROR(WriteFile(nft_file, NftRuleset(netns_ip, egress, options.max_exposed_ports)));
        Status st = Ok(RunChecked({"nft", "-f", nft_file}, fd));
        if (!st.ok()) ::unlink(nft_file.c_str());
        return st;
      },
      [self, nft_file]() {
        ::unlink(nft_file.c_str());
        if (!self->netns_fd_) return OkStatus();
        return RunIgnoringGone({"nft", "delete", "table", "inet", kNftTable}, self->netns_fd_.get());
      }));
  LOG_INFO("network ready sandbox={} netns={} veth={} host_ip={} netns_ip={}", sandbox_id, ns, veth, host_ip, netns_ip);
  return n;
}

StatusOr<std::unique_ptr<SandboxNetwork>> SandboxNetwork::Adopt(const std::string& sandbox_id, AddressPool& pool) {
  RETURN_IF_ERROR(ValidateSandboxId(sandbox_id));
  ASSIGN_OR_RETURN(auto lease, pool.Find(sandbox_id));
  if (!lease) return NotFound("no address lease for sandbox " + sandbox_id);
  std::unique_ptr<SandboxNetwork> n(new SandboxNetwork(sandbox_id, pool));
  n->lease_ = *lease;
  n->adopted_ = true;
  if (NetnsExists(GuestNetnsName(sandbox_id))) n->guest_netns_path_ = "/run/netns/" + GuestNetnsName(sandbox_id);
  std::string p = n->netns_path();
  n->netns_fd_.Reset(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
  if (!n->netns_fd_) return ErrnoError("open " + p);
  RETURN_IF_ERROR(pool.Adopt(*lease));
  // Teardown for an adopted network is by name (see Destroy).
  return n;
}

SandboxNetwork::~SandboxNetwork() {
  if (released_) return;
  Status st = Destroy();
  if (!st.ok()) LOG_WARN("network destroy failed sandbox={} error={}", id_, st.ToString());
}

std::string SandboxNetwork::agent_endpoint() const { return netns_ip() + ":" + std::to_string(kAgentPort); }

Status SandboxNetwork::ExposeTcpPorts(const std::vector<uint16_t>& ports) {
  if (destroyed_ || !netns_fd_) return FailedPrecondition("network of sandbox " + id_ + " is destroyed");
  if (ports.empty()) return OkStatus();
  Status st = NftRunInNetns(netns_, NftExposePorts(ports));
  if (!st.ok() && adopted_) {
    // A ruleset written by an older daemon has no set yet: add it, once.
    st = NftRunInNetns(netns_, NftExposedSetMigration(netns_ip(), max_exposed_ports_) + NftExposePorts(ports));
  }
  return st.WithContext("expose ports of sandbox " + id_);
}

Status SandboxNetwork::SetEgressCidrs(const std::vector<NftCidr>& cidrs,
                                      const std::vector<std::string>& host_addresses) {
  std::lock_guard<std::mutex> l(egress_mu_);
  return ApplyEgressLocked(cidrs, host_addresses);
}

Status SandboxNetwork::SetEgressHostAddresses(const std::vector<std::string>& host_addresses) {
  std::lock_guard<std::mutex> l(egress_mu_);
  return ApplyEgressLocked(cidrs_, host_addresses);
}

Status SandboxNetwork::ApplyEgressLocked(const std::vector<NftCidr>& cidrs,
                                         const std::vector<std::string>& host_addresses) {
  if (destroyed_ || !netns_fd_) return FailedPrecondition("network of sandbox " + id_ + " is destroyed");
  if (egress_applied_ && cidrs == cidrs_ && host_addresses == host_addresses_) return OkStatus();
  const std::string file = NetDir(*pool_) + "/" + netns_ + ".cidr.nft";
  RETURN_IF_ERROR(WriteFile(file, NftEgressCidrUpdate(cidrs, host_addresses)));
  auto r = RunChecked({"nft", "-f", file}, netns_fd_.get());
  ::unlink(file.c_str());
  if (!r.ok()) return r.status().WithContext("egress CIDR rules");
  if (&cidrs != &cidrs_) cidrs_ = cidrs;
  if (&host_addresses != &host_addresses_) host_addresses_ = host_addresses;
  egress_applied_ = true;
  return OkStatus();
}

Status SandboxNetwork::Destroy() {
  if (destroyed_) return OkStatus();
  Status st;
  if (!adopted_) {
    st = steps_.UndoAll();
  } else {
    // Adopted: tear down by name, then the lease.
    netns_fd_.Reset();
    if (pool_) ::unlink(NftFile(NetDir(*pool_), id_).c_str());
    st = TeardownByName(id_);
    if (st.ok() && pool_ && lease_.host_ip) st = pool_->Release(lease_);
  }
  netns_fd_.Reset();
  if (st.ok()) {
    destroyed_ = true;
    LOG_INFO("network destroyed sandbox={}", id_);
  }
  return st;
}

StatusOr<std::vector<std::string>> CleanupLeftovers(const std::string& lease_root, const std::string& owner) {
  ASSIGN_OR_RETURN(AddressPool pool, AddressPool::Create(lease_root));
  ASSIGN_OR_RETURN(auto leases, pool.List());
  std::vector<std::string> removed;
  Status first;
  // Only what a lease in this root says is ours: never a netns or link that
  // another daemon, another lease root or another tool made.
  for (const auto& [l, o] : leases) {
    if (AddressPool::OwnerAlive(o)) continue;
    if (!o.registry.empty() && o.registry != owner) continue;  // another daemon's: it reclaims its own
    if (!o.sandbox_id.empty() && ValidateSandboxId(o.sandbox_id).ok()) {
      Status st = TeardownByName(o.sandbox_id);
      if (!st.ok()) {
        if (first.ok()) first = st;
        continue;  // the lease stays until its netns is really gone
      }
      ::unlink(NftFile(lease_root + "/net", o.sandbox_id).c_str());
      removed.push_back("netns " + std::string(kNetnsPrefix) + o.sandbox_id);
    }
    Status st = pool.Release(l);
    if (st.ok())
      removed.push_back("lease " + l.path);
    else if (first.ok())
      first = st;
  }
  if (!first.ok()) return first;
  return removed;
}

std::string SandboxNetwork::guest_cidr() { return std::string(kGuestIp) + "/" + std::to_string(kGuestPrefix); }
std::string SandboxNetwork::gateway_ip() { return kGatewayIp; }

}  // namespace airlock::net
