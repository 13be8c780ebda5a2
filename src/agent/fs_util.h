// Filesystem helpers shared by the filesystem RPCs and /files.
#pragma once

#include <sys/types.h>

#include <string>

#include "agent/users.h"
#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

// Who new files and directories belong to; chown is skipped when !apply.
struct Owner {
  uid_t uid = 0;
  gid_t gid = 0;
  bool apply = false;
};

// EntryInfo of `path` itself (lstat: a symlink is reported as a symlink,
// with its target). Errors carry the errno code (not_found for ENOENT).
StatusOr<envd::EntryInfo> StatEntry(const std::string& path, const UserDb& users);
// "-rw-r--r--", "drwxr-xr-x", "lrwxrwxrwx" (ls -l style, with s/S/t/T).
std::string PermissionString(mode_t mode);
// mkdir -p; every directory it creates is chowned to `owner`.
// invalid_argument when a component exists and is not a directory.
Status MakeDirs(const std::string& path, const Owner& owner);
// rm -rf without following symlinks; OK when the path does not exist.
Status RemoveAll(const std::string& path);

}  // namespace airlock::agent
