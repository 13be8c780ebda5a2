// A guest's root filesystem as what differs from its template's tree, and
// back: how a gVisor sandbox keeps its files across a pause without memory
// (docs/runtime-gvisor.md "Disk-only snapshots").
//
// A gVisor guest writes into an overlay in the Sentry's memory (runsc
// --overlay2=root:memory), so the host has no disk to keep. The runtime binds
// the template's tree, read-only, at kRootBaseMount in every guest; GET
// /airlock/root-changes walks "/" beside it and answers a tar of what differs
// (WriteRootChanges), which the daemon keeps as the snapshot's disk, never
// parsing it. A resume boots a fresh guest on the template and PUTs the tar
// back (RootChangesImporter). So every byte of it is parsed by a guest of the
// team that wrote it, never by the host.
//
// The format: a POSIX.1-2001 pax tar (IEEE 1003.1-2001 "pax Interchange
// Format"): each entry an 'x' extended header (path, linkpath, mtime with
// nanoseconds, and uid/gid/size past ustar's octal fields), then its ustar
// header and data. Parents come before children, as the walk meets them. An
// entry of the template that the guest removed is a 0-byte file with the
// vendor record AIRLOCK.deleted=1 (not an OCI ".wh." name: a guest may have a
// file called that). Hard links among changed files are type '1'. Not kept:
// sockets, extended attributes, and what other file systems mounted in the
// guest hold (/proc, /dev, volumes, the base itself).
//
// What "differs" means: a directory that was copied up (below) or that the
// template lacks (its header only; the walk goes on inside); any
// other entry whose type, mode, owner, size, mtime, ctime, link target or
// device number differ. A file the guest wrote has a ctime of its own (the
// overlay's copy-up cannot keep the template's), so nothing written since
// boot looks unchanged; a file untouched reads the template's inode through
// both mounts, ctime included.
//
// What makes it fast (a syscall in a gVisor guest costs ~0.2 ms on this
// machine, and a template has ~37,000 entries): a directory whose stat,
// ctime included, is its base's was never copied up, so nothing beneath it
// is the guest's and it is not entered; a non-directory on the template
// layer's device (an overlay reports each file with its layer's) is not
// compared; a directory whose mtime is its base's lost no entry, so its base
// is not listed. Each shortcut holds for an overlay whose lower layer is the
// base's tree, and only ever skips work on a plain tree (a copy, as in the
// unit tests), where every ctime differs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::agent {

// Where runtime/gvisor/bundle.cc binds the template's tree in the guest.
inline constexpr char kRootBaseMount[] = "/.airlock-base";

struct RootChangesStats {
  uint64_t entries = 0;  // headers written or applied, deletions included
  uint64_t deleted = 0;
  uint64_t bytes = 0;    // file content
  uint64_t skipped = 0;  // entries that could not be read or applied
  std::string first_error;
};

// Writes to `out` (a blocking fd) the tar of how the tree at `root` differs
// from the tree at `base` (both absolute directories), then the end of the
// archive. `skip`: paths as `root` shows them ("/proc") that are not walked,
// nor counted as removed. An entry that vanishes or cannot be read while
// walking is skipped (stats); a write error (the reader went away), an
// unreadable `root`/`base`, or a tree more than 4096 directories deep
// (FailedPrecondition) is the error, and then no end of archive is written.
Status WriteRootChanges(const std::string& root, const std::string& base, const std::vector<std::string>& skip,
                        int out, RootChangesStats* stats);

// Every mount point below "/" in /proc/self/mountinfo, kRootBaseMount
// included: what WriteRootChanges skips in a guest.
std::vector<std::string> MountPointsBelowRoot();

// Applies a tar written by WriteRootChanges onto the tree at `root`, as root
// (owners, modes with set-id bits, times), fed in pieces as it arrives. No
// symlink in the tree is followed: parents are entered one component at a
// time with O_NOFOLLOW, missing ones made. An entry that cannot be applied
// (a device gVisor refuses, a path through a symlink) is skipped and counted;
// a malformed archive (bad checksum, unknown type, truncated) is the error.
class RootChangesImporter {
 public:
  explicit RootChangesImporter(std::string root);
  ~RootChangesImporter();
  Status Feed(std::string_view bytes);
  // After the last Feed: the archive must have ended; directory times are
  // set last (their children's creation moved them).
  Status Finish();
  const RootChangesStats& stats() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace airlock::agent
