// Writing files: every byte or an error, and replacing a file atomically.
// In airlock_common_min, so the static guest agent uses the same code.
//
// Errors name the failing syscall and path ("write /x/y: No space left on
// device"), as ErrnoError statuses.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"

namespace airlock {

// Writes all `n` bytes at `data` to `fd`, retrying on EINTR and after short
// writes. Returns 0, or the errno of the write(2) that failed. Calls nothing
// but write(2) and allocates nothing: async-signal-safe, so usable between
// fork and exec.
int WriteAllRaw(int fd, const void* data, size_t n);

// WriteAllRaw as a Status: "write <what>: <strerror>" on failure. `what` is
// the path (or other name) of what `fd` writes to.
Status WriteAll(int fd, std::string_view data, std::string_view what);

// fsync(2) of a directory, so a rename into it survives a crash.
Status FsyncDir(const std::string& dir);

// Replaces `path` with `data` so that a reader (or a crash) sees either the
// old file or the whole new one: writes a temporary sibling
// ("<path>.tmp.<pid>") with `mode`, fsyncs it, renames it onto `path`, then
// fsyncs the parent directory. On failure the temporary file is removed and
// `path` is unchanged (unless only the final directory fsync failed).
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode = 0644);
// A new temporary sibling of `path`, "<dir>/.<base>.tmp.<16 random hex>",
// opened for writing with O_CREAT | O_EXCL | O_NOFOLLOW and `mode` (the umask
// may narrow it): never an existing file or a link someone planted in the
// directory (a name taken is tried again, 8 times). Returns it and its path;
// the caller writes, then renames or links it into place and unlinks it.
struct TempSibling {
  UniqueFd fd;
  std::string path;
};
StatusOr<TempSibling> CreateTempSibling(const std::string& path, mode_t mode);

// One path component `name` beneath the directory `dir_fd`, following no
// symlink: openat2(`flags` | O_NOFOLLOW | O_CLOEXEC) with `resolve`
// (RESOLVE_* flags; EAGAIN from a rename racing the lookup is retried),
// or openat(O_NOFOLLOW) where the kernel (or a seccomp filter) has no
// openat2: `name` is a single component, so that follows no link either,
// but `resolve` beyond that is the caller's to check. -1 and errno on failure.
int OpenComponentBeneath(int dir_fd, const std::string& name, int flags, uint64_t resolve, mode_t mode = 0);

// Which build of a template rootfs a file is: "ext4-uuid:<32 hex>" for an
// ext4 image (mkfs.ext4 picks a random UUID per build; it survives copies,
// `touch`, rename), else "<size>:<mtime in ns>". Every runtime's
// SnapshotStore::ImageStamp. ErrnoError when the file cannot be read.
StatusOr<std::string> ImageFileStamp(const std::string& path);

// A template rootfs image as a directory tree, for a runtime that serves a
// directory rather than a disk (gVisor's gofer): <image dir>/kRootTreeDir,
// valid while <image dir>/kRootTreeStampFile holds the image's
// ImageFileStamp. `airlock image build` writes it beside the images it makes
// (image/rootfs_build.cc); gvisor::EnsureRootTree extracts it for any other.
inline constexpr char kRootTreeDir[] = "gvisor-root";
inline constexpr char kRootTreeStampFile[] = "gvisor-root.stamp";

}  // namespace airlock
