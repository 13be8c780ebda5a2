// Filesystem work with a requesting user's permissions (docs/agent.md "Files
// as the user"). The agent is root; a /files or filesystem.Filesystem request
// for user `user` must see what that user sees.
//
// RunAsUser runs `fn` on a fresh thread whose filesystem credentials are the
// user's: supplementary groups (raw setgroups, which Linux applies to the
// calling thread only), fsgid, fsuid, and an empty effective capability set
// (so neither CAP_DAC_* nor CAP_SYS_PTRACE on /proc/<pid>/ files applies).
// The kernel's own checks then decide every open, mkdir, rename, unlink and
// stat, symlinks included: a link into /etc is followed with the user's
// rights. Files and directories it creates belong to the user. The thread
// ends with `fn`, so the agent's event-loop thread never changes credentials
// and forks made later from it are unaffected. The caller blocks until `fn`
// returns: `fn` must not touch the io_context.
//
// No switch (fn runs inline) when `switch_user` is false (the agent is not
// root) or the user is root.
// Errors: fn's own; internal when the credentials cannot be set;
// resource_exhausted when no thread can be started.
#pragma once

#include <functional>
#include <optional>

#include "agent/users.h"
#include "common/status.h"

namespace airlock::agent {

Status RunAsUser(const User& user, bool switch_user, const std::function<Status()>& fn);

template <typename T>
StatusOr<T> RunAsUser(const User& user, bool switch_user, const std::function<StatusOr<T>()>& fn) {
  std::optional<StatusOr<T>> out;
  Status st = RunAsUser(user, switch_user, [&]() -> Status {
    out.emplace(fn());
    return OkStatus();
  });
  if (!st.ok()) return st;
  return std::move(*out);
}

// Sets the calling thread's fs credentials as described above (exposed for
// tests). Errors: internal / permission_denied from the syscalls.
Status BecomeUserOnThisThread(const User& user);

}  // namespace airlock::agent
