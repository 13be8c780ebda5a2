#include "agent/as_user.h"

#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <system_error>
#include <thread>
#include <vector>

namespace airlock::agent {

Status BecomeUserOnThisThread(const User& user) {
  std::vector<gid_t> groups = user.groups;
  if (groups.empty()) groups.push_back(user.gid);
  // glibc's setgroups() changes every thread (setxid broadcast); the raw
  // syscall changes this one.
  if (syscall(SYS_setgroups, groups.size(), groups.data()) != 0) return ErrnoError("setgroups");
  setfsgid(user.gid);
  if (static_cast<gid_t>(setfsgid(static_cast<gid_t>(-1))) != user.gid) {
    // A kernel without setfsuid/setfsgid (gVisor's Sentry as of runsc
    // 20221219: ENOSYS): the thread's effective ids instead, by raw syscall
    // (glibc's setresuid would change every thread). The fs ids follow the
    // effective ones, and leaving euid 0 clears the effective capabilities.
    if (syscall(SYS_setresgid, static_cast<gid_t>(-1), user.gid, static_cast<gid_t>(-1)) != 0)
      return ErrnoError("setresgid " + std::to_string(user.gid));
    if (syscall(SYS_setresuid, static_cast<uid_t>(-1), user.uid, static_cast<uid_t>(-1)) != 0)
      return ErrnoError("setresuid " + std::to_string(user.uid));
    uid_t r, e, sv;
    if (syscall(SYS_getresuid, &r, &e, &sv) != 0 || e != user.uid)
      return Internal("effective uid " + std::to_string(user.uid) + " did not take effect");
  } else {
    setfsuid(user.uid);
    if (static_cast<uid_t>(setfsuid(static_cast<uid_t>(-1))) != user.uid) {
      return Internal("setfsuid " + std::to_string(user.uid) + " did not take effect");
    }
  }
  // Capabilities are per thread too: clear the effective set (permitted is
  // kept; the thread ends anyway).
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return ErrnoError("capget");
  for (auto& d : data) d.effective = 0;
  if (syscall(SYS_capset, &hdr, data) != 0) return ErrnoError("capset");
  return OkStatus();
}

Status RunAsUser(const User& user, bool switch_user, const std::function<Status()>& fn) {
  if (!switch_user || user.uid == 0) return fn();
  Status result;
  try {
    std::thread t([&] {
      Status st = BecomeUserOnThisThread(user);
      result = st.ok() ? fn() : Internal("cannot act as user " + user.name + ": " + st.ToString());
    });
    t.join();
  } catch (const std::system_error& e) {
    return ResourceExhausted(std::string("cannot start a thread for a file operation: ") + e.what());
  }
  return result;
}

}  // namespace airlock::agent
