// VmmUidPool: hands each VMM its own uid (and gid of the same number) from a
// range [base, base + count), host-wide: every airlock process on a host,
// whatever its state dir, leases from <lease_root>/vmm-uids/ (the lease root
// the address pool uses, /run/airlock by default), under an exclusive flock
// on .lock, one file per uid created with O_EXCL and holding
// "sandbox=<id>\npid=<pid>\nstart=<ticks>\n". The owner is the process that
// leased it, then (Adopt) the VMM itself, so a lease outlives a daemon
// restart for as long as its VMM runs. A lease whose owner is gone (pid +
// start time, so a reused pid does not count) is free again.
// Errors: ResourceExhausted (every uid of the range in use), errno statuses
// naming the lease file.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"
#include "runtime/options.h"

namespace airlock::qemu {

// The default range is airlock::kDefaultVmmUidBase/Count (runtime/options.h).
using ::airlock::kDefaultVmmUidBase;
using ::airlock::kDefaultVmmUidCount;

struct UidLease {
  uid_t uid = 0;
  std::string path;        // empty: no lease
  std::string sandbox_id;  // whose it is (Release checks it)
};

class VmmUidPool {
 public:
  VmmUidPool(std::string lease_root, uid_t base, uint32_t count);
  // The lowest free uid of the range; the caller is its owner.
  StatusOr<UidLease> Acquire(const std::string& sandbox_id);
  // Makes `owner` (the VMM) the owner of the lease.
  static Status Adopt(const UidLease& lease, pid_t owner);
  // Removes the lease file if it is still this sandbox's (so a second
  // release, after the uid went to another sandbox, does nothing); OK when gone.
  static Status Release(const UidLease& lease);
  uid_t base() const { return base_; }
  uint32_t count() const { return count_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  uid_t base_;
  uint32_t count_;
};

}  // namespace airlock::qemu
