// Volumes mounted into the guest over NFS (docs/volumes.md "Mounts"): the
// daemon runs an NFSv3 server for the sandbox in the sandbox's own netns, on
// the gateway address, and names each volume's export in /init
// ("volumeMounts"); the agent mounts each one at its path with mount(2),
// the kernel's own NFS client doing the MOUNT call (no mount.nfs, no
// rpcbind in the guest).
//
// /init "volumeMounts": [{"path": "/mnt/data", "server": "169.254.0.22",
//   "export": "/<volumeID>", "port": 2049, "mountPort": 20048}]
// The list is the guest's whole set: a path that is already an NFS mount
// of that export is left as it is (a resume, a fork, a second /init), and
// an NFS mount of the server's that is not listed (one a snapshot carried
// from another sandbox) is detached. The mount point is made (0755, root)
// when missing. Without "volumeMounts" nothing changes. Options: NFSv3 over TCP, nolock (no lockd), hard (a paused
// server stalls I/O, never fails it), attributes cached for at most 1 s and
// no negative lookups cached, so another sandbox's writes show within that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include <nlohmann/json.hpp>

namespace airlock::agent {

struct NfsMount {
  std::string path;    // absolute guest path
  std::string server;  // IPv4 literal
  std::string exp;     // the export's path on the server ("/<volumeID>")
  uint16_t port = 2049;
  uint16_t mount_port = 20048;
};

// Parses /init's "volumeMounts" (an array; null: none).
// InvalidArgument names the bad entry.
StatusOr<std::vector<NfsMount>> ParseNfsMounts(const nlohmann::json& value);

// The mount(2) data string for `m`.
std::string NfsMountOptions(const NfsMount& m);

// Makes the guest's NFS mounts `mounts` (as above). Blocking: the kernel's MOUNT call waits for the
// server (bounded by the options' timeo/retrans). The first error, naming
// the path.
Status MountNfs(const std::vector<NfsMount>& mounts);

}  // namespace airlock::agent
