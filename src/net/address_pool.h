// AddressPool: hands out /31 pairs from a CIDR (default 198.18.0.0/15) to
// sandboxes. Safe across concurrent processes without a daemon: every
// mutation runs under an exclusive flock on <root>/net/leases/.lock and
// each lease is a file created with O_EXCL, named after the pair's even
// address ("198.18.0.4"), holding "sandbox=<id>\npid=<pid>\nstart=<ticks>\n"
// and, for a daemon's sandboxes, "registry=<canonical db path>\n": the
// daemon whose start-up clean-up may reclaim it (CleanupLeftovers).
//
// A lease is stale when the netns al-<id> does not exist and its owner
// process (pid + start time, so pid reuse does not fool us) is gone; stale
// leases are reclaimed by Acquire when the pool is full and by Reclaim().
//
// Addresses: host side (root ns end of the veth) = even, netns side = odd.
// Errors: InvalidArgument (bad CIDR / id), ResourceExhausted (pool full),
// errno-derived statuses for file operations (with the path).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"

namespace airlock::net {

// Where every airlock process on this host keeps its address leases (tmpfs:
// leases die with the host's netns and links at reboot).
inline constexpr const char* kHostLeaseRoot = "/run/airlock";

// IPv4 in host byte order.
std::string Ipv4ToString(uint32_t addr);
StatusOr<uint32_t> ParseIpv4(const std::string& s);

struct Cidr {
  uint32_t base = 0;  // host byte order, already masked
  int prefix = 0;
  static StatusOr<Cidr> Parse(const std::string& s);  // "198.18.0.0/15"; prefix 1..31
  uint64_t size() const { return uint64_t{1} << (32 - prefix); }
};

struct AddressLease {
  std::string sandbox_id;
  uint32_t host_ip = 0;   // even address, root-ns end of the veth
  uint32_t netns_ip = 0;  // odd address, netns end of the veth
  std::string path;       // lease file
  std::string host_str() const { return Ipv4ToString(host_ip); }
  std::string netns_str() const { return Ipv4ToString(netns_ip); }
};

// Who holds a lease, as written in the lease file.
struct LeaseOwner {
  std::string sandbox_id;
  pid_t pid = 0;
  unsigned long long start_ticks = 0;  // /proc/<pid>/stat field 22
  std::string registry;                // "" for in-process runs and older leases
};

class AddressPool {
 public:
  // Creates <root>/net/leases/ (0700) if needed. Addresses, links and netns
  // names are host-wide, so every airlock process on a host, whatever its
  // state directory, must share one root: kHostLeaseRoot (tests pass their own).
  // `owner`: the registry written into the leases this pool hands out.
  static StatusOr<AddressPool> Create(const std::string& root, const std::string& cidr = "198.18.0.0/15",
                                      const std::string& owner = "");

  // Leases the lowest free /31 for `sandbox_id`; the calling process is the owner.
  StatusOr<AddressLease> Acquire(const std::string& sandbox_id);
  // Removes the lease file; OK if it is already gone.
  Status Release(const AddressLease& lease);
  // The lease held by `sandbox_id`, if any.
  StatusOr<std::optional<AddressLease>> Find(const std::string& sandbox_id);
  // Rewrites the owner of an existing lease: to `owner` (the sandbox's VMM,
  // so the lease stays live while no daemon runs), or to the calling process.
  // NotFound when the lease file is gone or names another sandbox (it was
  // reclaimed): nothing is written then.
  Status Adopt(const AddressLease& lease, pid_t owner = 0);
  // Removes stale leases; returns the sandbox ids whose lease was removed.
  StatusOr<std::vector<std::string>> Reclaim();
  // All leases with their owners (for cleanup and diagnostics).
  StatusOr<std::vector<std::pair<AddressLease, LeaseOwner>>> List();

  const std::string& lease_dir() const { return dir_; }
  const Cidr& cidr() const { return cidr_; }

  // Is the owner process still alive (pid exists with the same start time)?
  static bool OwnerAlive(const LeaseOwner& owner);

 private:
  AddressPool(std::string dir, Cidr cidr, std::string owner)
      : dir_(std::move(dir)), cidr_(cidr), owner_(std::move(owner)) {}
  StatusOr<std::vector<std::pair<AddressLease, LeaseOwner>>> ListLocked();
  StatusOr<std::vector<std::string>> ReclaimLocked();

  std::string dir_;
  Cidr cidr_;
  std::string owner_;
};

using ::airlock::ProcessStartTicks;  // common/subprocess.h

}  // namespace airlock::net
