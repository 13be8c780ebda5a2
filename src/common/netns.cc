#include "common/netns.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <thread>

#include "common/fd.h"

namespace airlock {

Status RunInNetns(const std::string& netns, const std::function<Status()>& fn) {
  if (netns.empty() || netns.size() > 64 || netns.find('/') != std::string::npos || netns[0] == '.')
    return InvalidArgument("bad netns name '" + netns + "'");
  const std::string path = "/run/netns/" + netns;
  UniqueFd nsfd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!nsfd) return ErrnoError("open " + path);
  Status st = OkStatus();
  // The thread inherits the mask in force when it is created.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::thread helper([&] {
    if (::setns(nsfd.get(), CLONE_NEWNET) != 0) {
      st = ErrnoError("setns " + path);
      return;
    }
    st = fn();
  });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  helper.join();
  return st;
}

}  // namespace airlock
