// The host side of E2B's volume content API: the daemon, as root, lists,
// reads, writes, chmods/chowns and removes entries inside one tenant's
// volume (E2B's orchestrator does the same in packages/orchestrator/pkg/volumes).
//
// Threat model: the volume's tree was also written by a hostile guest
// through NFS, and may change while we walk it. So nothing here takes a
// path string into the tree. The root is opened once (O_DIRECTORY |
// O_NOFOLLOW); every component below it is entered one at a time with
// openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV) relative to its parent's fd (openat(O_NOFOLLOW) plus an
// st_dev check where the kernel has no openat2), and every change is made
// relative to the parent's fd or on the entry's own fd:
//   - a symlink is never followed: as a parent component it is refused, as
//     the final component it is stat'ed, unlinked or lchown'ed itself, never
//     opened, written through or chmod'ed;
//   - nothing crosses into another filesystem (a mount point is refused);
//   - hard links are harmless: each volume is its own ext4 filesystem,
//     loop-mounted nodev,nosuid,noexec, so a link can only name another
//     file of the same volume;
//   - fifos, sockets and devices are never read or written (opened
//     O_NONBLOCK, fstat'ed, refused), so a planted fifo cannot block us;
//   - Remove walks a directory tree fd-relative, never following a link or
//     crossing a mount, to a bounded depth (kMaxRemoveDepth).
//
// Paths are as the volume shows them: "/", "", "a/b", "/a/b//c/". They are
// normalised (leading, trailing and repeated '/' dropped); a "." or ".."
// component, a NUL byte, more than 4096 bytes or a component over 255 bytes
// is InvalidArgument. An entry's `path` is "/a/b" (the root is "/", named "/").
//
// Units: sizes in bytes, times in Unix milliseconds, `mode` the permission
// bits (st_mode & 07777).
//
// Errors (Status codes): NotFound (the entry or a parent is missing),
// AlreadyExists, InvalidArgument (a bad path, a symlink or non-directory
// component, another filesystem, the wrong kind of entry), FailedPrecondition
// (a tree too deep to remove); any other failing syscall as ErrnoError.
// Messages name the volume path as the caller gave it, never a host path.
//
// A VolumeFs holds only the root's fd: its methods are const and may run on
// several threads at once.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock {

struct VolumeEntry {
  enum class Type { kUnknown, kFile, kDirectory, kSymlink };
  std::string name;            // the last component; "/" for the root
  std::string path;            // "/a/b"; "/" for the root
  Type type = Type::kUnknown;  // fifos, sockets and devices are kUnknown
  int64_t size = 0;
  uint32_t mode = 0;  // st_mode & 07777
  uint32_t uid = 0, gid = 0;
  int64_t atime_ms = 0, mtime_ms = 0, ctime_ms = 0;
  std::string target;  // a symlink's target (readlinkat); empty otherwise
};

// E2B's VolumeEntryStat: {"name", "path", "type": "file" | "directory" |
// "symlink" | "unknown", "size", "mode", "uid", "gid", "atime", "mtime",
// "ctime" (RFC 3339 UTC with milliseconds), "target" (symlinks only)}.
nlohmann::json VolumeEntryJson(const VolumeEntry& entry);

class VolumeFs {
 public:
  // Who owns what MakeDir and CreateFile make, and its mode (permission
  // bits, at most 07777; unset: 0755 for a directory, 0644 for a file).
  // Set exactly with fchown/fchmod, whatever the umask.
  struct Owner {
    uint32_t uid = 1000;
    uint32_t gid = 1000;
    std::optional<uint32_t> mode;
  };

  static constexpr int kMaxListDepth = 10;
  // The most entries one List answers (a bound on the daemon's memory).
  static constexpr size_t kMaxListEntries = 10000;
  static constexpr int kMaxRemoveDepth = 4096;

  // The volume whose root directory is `root_dir` (a host path of the
  // daemon's), opened O_DIRECTORY | O_NOFOLLOW.
  static StatusOr<VolumeFs> Open(const std::string& root_dir);

  // The entry at `path` itself (lstat): a symlink is reported as one, with
  // its target. NotFound when missing.
  StatusOr<VolumeEntry> Stat(std::string_view path) const;

  // The entries of the directory `path`, sorted by name; with depth > 1 each
  // subdirectory's entries follow its own entry (pre-order), down to `depth`
  // levels. Symlinks and mount points are listed, never descended into.
  // depth < 1 is 1; depth > kMaxListDepth is InvalidArgument. NotFound when
  // missing; InvalidArgument "not a directory" for anything else.
  StatusOr<std::vector<VolumeEntry>> List(std::string_view path, int depth) const;

  // A new directory at `path`. Without `parents`: the parent must exist
  // (NotFound) and nothing may be at `path` (AlreadyExists). With `parents`:
  // missing parents are made (0755, owned by o.uid/o.gid) and an existing
  // directory at `path` is fine, left as it is (its entry is returned); any
  // other existing entry is AlreadyExists.
  StatusOr<VolumeEntry> MakeDir(std::string_view path, const Owner& o, bool parents) const;

  // `path` opened for writing, empty, owned by o with o's mode: a new file,
  // or an existing regular file truncated (E2B's writeFile overwrites).
  // The parent must exist (NotFound) unless `force`, which makes missing
  // parents as MakeDir does. An existing symlink, directory, fifo, socket or
  // device is InvalidArgument naming what it is. The fd is blocking,
  // O_CLOEXEC; finish with FinishFile.
  StatusOr<UniqueFd> CreateFile(std::string_view path, const Owner& o, bool force) const;

  // fsync(fd), then the entry of what `fd` (from CreateFile(path)) holds.
  StatusOr<VolumeEntry> FinishFile(std::string_view path, int fd) const;

  // The regular file `path` opened for reading (blocking, O_CLOEXEC).
  // NotFound when missing; InvalidArgument "is a symlink" / "is a directory"
  // / ... for anything but a regular file.
  StatusOr<UniqueFd> OpenRead(std::string_view path) const;

  // Changes the owner and/or the mode of the entry at `path` (the root
  // included) without following a symlink: a symlink is lchown'ed; a mode
  // for a symlink is InvalidArgument, as is a mode over 07777. The owner is
  // changed first (a chown clears set-id bits). The entry afterwards.
  StatusOr<VolumeEntry> Update(std::string_view path, std::optional<uint32_t> uid, std::optional<uint32_t> gid,
                               std::optional<uint32_t> mode) const;

  // Removes the entry at `path`: a file, symlink (the link itself) or other
  // entry is unlinked; a directory is removed with everything in it. The
  // root is InvalidArgument; missing is NotFound; a mount point in the tree
  // is InvalidArgument; a tree deeper than kMaxRemoveDepth is
  // FailedPrecondition (the files reached on the way down are removed).
  Status Remove(std::string_view path) const;

 private:
  VolumeFs(UniqueFd root, dev_t dev) : root_(std::move(root)), dev_(dev) {}

  UniqueFd root_;
  dev_t dev_;  // the volume's filesystem: nothing on another is touched
};

}  // namespace airlock
