#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/fd.h"

namespace airlock {

int WriteAllRaw(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

Status WriteAll(int fd, std::string_view data, std::string_view what) {
  if (int err = WriteAllRaw(fd, data.data(), data.size()); err != 0) {
    return ErrnoError("write " + std::string(what), err);
  }
  return OkStatus();
}

Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + dir);
  if (::fsync(fd.get()) != 0) return ErrnoError("fsync " + dir);
  return OkStatus();
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
    if (!fd) return ErrnoError("open " + tmp);
    Status st = WriteAll(fd.get(), data, tmp);
    if (st.ok() && ::fchmod(fd.get(), mode) != 0) st = ErrnoError("fchmod " + tmp);
    if (st.ok() && ::fsync(fd.get()) != 0) st = ErrnoError("fsync " + tmp);
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = ErrnoError("rename " + tmp + " to " + path);
    ::unlink(tmp.c_str());
    return st;
  }
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  return FsyncDir(dir);
}

}  // namespace airlock
