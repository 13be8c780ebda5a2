// StateLock: an flock(2) on a lock file, held for the life of the object, so
// that one writer owns a piece of state (a daemon's registry, an audit
// trail). Exclusive for a writer; shared where several readers may coexist
// but a writer may not (an in-process `airlock run` beside no daemon).
//
// The file is created 0600 if missing and never removed (removing a lock
// file races with a second locker). An exclusive holder writes its pid into
// it for humans; the holders named in errors come from /proc/locks, which
// is right for shared holders too.
//
// Errors: FailedPrecondition "<what> <path> is in use by pid N[, M] (...)"
// when another process holds a conflicting lock; errno errors with the path.
#pragma once

#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace airlock {

class StateLock {
 public:
  enum class Mode { kExclusive, kShared };
  // Never blocks. `what` names the state in the error ("registry", "audit trail").
  static StatusOr<StateLock> Acquire(const std::string& path, Mode mode, const std::string& what);
  StateLock() = default;
  StateLock(StateLock&&) = default;
  StateLock& operator=(StateLock&&) = default;
  bool held() const { return fd_.valid(); }
  const std::string& path() const { return path_; }

 private:
  UniqueFd fd_;
  std::string path_;
};

// Pids holding a lock (flock, POSIX or OFD) on the file at `path`, from /proc/locks.
std::vector<int> LockHolders(const std::string& path);

}  // namespace airlock
