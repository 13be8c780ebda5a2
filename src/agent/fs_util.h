// Filesystem helpers shared by the filesystem RPCs and /files. They act with
// the calling thread's credentials (see as_user.h).
#pragma once

#include <sys/types.h>

#include <string>

#include "agent/users.h"
#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

// EntryInfo of `path` itself (lstat: a symlink is reported as a symlink,
// with its target resolved as below), with its user.e2b.* metadata
// (file_metadata.h). Errors carry the errno code (not_found for ENOENT).
StatusOr<envd::EntryInfo> StatEntry(const std::string& path, const UserDb& users);
// What envd reports as a symlink's target (filepath.EvalSymlinks): the
// absolute path with every link on the way resolved (realpath). When that
// fails (a dangling link, a loop, a component the caller may not search)
// envd falls back to the link's own path, and so do we.
std::string ResolveSymlinkTarget(const std::string& path);
// "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx" (ls -l style, with s/S/t/T).
std::string PermissionString(mode_t mode);
// mkdir -p (mode 0755). The directories belong to the calling thread's
// fsuid/fsgid: run it under RunAsUser (as_user.h) for a user's request.
// invalid_argument when a component exists and is not a directory.
Status MakeDirs(const std::string& path);
// rm -rf without following symlinks; OK when the path does not exist.
Status RemoveAll(const std::string& path);

}  // namespace airlock::agent
