#include "common/state_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace airlock {

std::vector<int> LockHolders(const std::string& path) {
  std::vector<int> out;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return out;
  // "1: FLOCK  ADVISORY  WRITE 2359 08:01:4163 0 EOF" (major:minor in hex);
  // blocked waiters ("1: -> FLOCK ...") are not holders.
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::ifstream f("/proc/locks");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string idx, type, adv, rw, dev;
    int pid = 0;
    if (!(ls >> idx >> type) || type == "->") continue;
    if (!(ls >> adv >> rw >> pid >> dev)) continue;
    if (dev == want && pid > 0 && std::find(out.begin(), out.end(), pid) == out.end()) out.push_back(pid);
  }
  return out;
}

StatusOr<StateLock> StateLock::Acquire(const std::string& path, Mode mode, const std::string& what) {
  StateLock l;
  l.path_ = path;
  l.fd_ = UniqueFd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!l.fd_) return ErrnoError("open lock file " + path);
  if (::flock(l.fd_.get(), (mode == Mode::kExclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoError("flock " + path);
    std::string who;
    for (int pid : LockHolders(path)) {
      std::string comm;
      std::ifstream cf("/proc/" + std::to_string(pid) + "/cmdline");
      std::getline(cf, comm, '\0');
      std::string sub;
      std::getline(cf, sub, '\0');  // --state-dir X serve ...: show the argv[0] only
      who += (who.empty() ? "" : ", ") + std::to_string(pid) + (comm.empty() ? "" : " (" + comm + ")");
    }
    return FailedPrecondition(what + " " + path + " is in use by " + (who.empty() ? "another process" : "pid " + who) +
                              ": one airlock daemon per registry (stop it, or give this one another --db / "
                              "--state-dir)");
  }
  if (mode == Mode::kExclusive) {
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(l.fd_.get(), 0) == 0) (void)!::pwrite(l.fd_.get(), pid.data(), pid.size(), 0);
  }
  return l;
}

}  // namespace airlock
