// Host-side writes into a tree a tenant supplied: an unpacked OCI image and
// the staging copy of it that becomes the template's rootfs
// (docs/image.md "Trees a tenant supplied"). The daemon does these as root,
// and the tree's symlinks are the tenant's: a path string such as
// `stage + "/etc/airlock/rootfs-id"` would follow `etc/airlock -> /some/host/dir`
// out of the tree. So nothing here takes a path string into the tree:
//   - the tree's root is opened once (OpenTreeRoot: a path of ours);
//   - every directory below it is entered one component at a time with
//     openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
//     and O_NOFOLLOW, relative to the parent's fd: a component that is a
//     symlink, or not a directory, is refused (FailedPrecondition naming the
//     path as the image shows it, "/etc/airlock", and the link's target);
//   - a file is installed by unlinkat() of whatever entry has its name (a
//     planted symlink, a hard link into the base layer) relative to the
//     parent's fd, then openat2(O_CREAT | O_EXCL | O_NOFOLLOW): a link is
//     removed, never followed or written through.
// Paths given here are as the guest sees them ("/etc/airlock" or
// "etc/airlock"); "." and ".." components are refused (InvalidArgument).
// Without openat2 (ENOSYS: kernels before 5.6, some seccomp filters) the
// same walk uses openat(O_NOFOLLOW) per component, which follows no link
// either.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"

namespace airlock::image {

// The directory `root` (a path the daemon made, e.g. a staging directory),
// opened O_DIRECTORY; the fd every other call here resolves beneath.
StatusOr<UniqueFd> OpenTreeRoot(const std::string& root);

// The directory `path` beneath `root_fd` ("" or "/" is the root itself),
// no symlink followed. With `create`, missing components are made with
// `mode` (then chmod'ed to it, whatever the umask); existing ones are left
// as they are.
StatusOr<UniqueFd> OpenDirInTree(int root_fd, std::string_view path, bool create, mode_t mode = 0755);

// A new file at `path` in the tree holding `data` (WriteFileInTree) or the
// bytes of the host file `from` (CopyFileInTree), with `mode` and, when
// running as root, owned by root. Parent directories are made (0755) when
// missing, as OpenDirInTree; the old entry at `path`, whatever it was
// (a directory excepted), is unlinked first.
Status WriteFileInTree(int root_fd, std::string_view path, std::string_view data, mode_t mode);
Status CopyFileInTree(int root_fd, std::string_view path, const std::string& from, mode_t mode);
// A new symlink at `path` in the tree pointing at `target` (stored as
// given, never resolved on the host: the guest follows it), owned by root
// when running as root. The parents and the old entry as WriteFileInTree.
Status SymlinkInTree(int root_fd, std::string_view path, const std::string& target);

}  // namespace airlock::image
