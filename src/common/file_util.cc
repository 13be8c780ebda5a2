#include "common/file_util.h"

#include <cstdio>

#include <sys/random.h>

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "common/fd.h"
#include "common/hex.h"

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

StatusOr<TempSibling> CreateTempSibling(const std::string& path, mode_t mode) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  TempSibling t;
  for (int attempt = 0; attempt < 8 && !t.fd; ++attempt) {
    unsigned char r[8];
    size_t got = 0;
    while (got < sizeof r) {
      ssize_t n = ::getrandom(r + got, sizeof r - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("getrandom");
      got += static_cast<size_t>(n);
    }
    char hex[sizeof r * 2 + 1];
    for (size_t i = 0; i < sizeof r; ++i) std::snprintf(hex + 2 * i, 3, "%02x", r[i]);
    t.path = dir + "/." + base + ".tmp." + hex;
    t.fd.Reset(::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!t.fd && errno != EEXIST) return ErrnoError("create " + t.path);
  }
  if (!t.fd) return ErrnoError("create " + t.path, EEXIST);
  return t;
}

}  // namespace airlock

namespace airlock {

StatusOr<std::string> ImageFileStamp(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  // ext4 superblock (kernel Documentation/filesystems/ext4/super.rst): at
  // byte 1024; s_magic (le16 0xEF53) at +0x38, s_uuid (16 bytes) at +0x68.
  unsigned char sb[0x78];
  if (::pread(fd.get(), sb, sizeof sb, 1024) == static_cast<ssize_t>(sizeof sb) && sb[0x38] == 0x53 &&
      sb[0x39] == 0xEF) {
    return "ext4-uuid:" + HexEncode(sb + 0x68, 16);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
  uint64_t ns = uint64_t(st.st_mtim.tv_sec) * 1000000000ull + uint64_t(st.st_mtim.tv_nsec);
  return std::to_string(st.st_size) + ":" + std::to_string(ns);
}

int OpenComponentBeneath(int dir_fd, const std::string& name, int flags, uint64_t resolve, mode_t mode) {
  static std::atomic<bool> no_openat2{false};
  flags |= O_NOFOLLOW | O_CLOEXEC;
  if (!no_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = static_cast<uint64_t>(flags);
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = resolve;
    long fd;
    int tries = 0;  // EAGAIN: a rename elsewhere on the system raced the lookup
    do {
      fd = ::syscall(SYS_openat2, dir_fd, name.c_str(), &how, sizeof how);
    } while (fd < 0 && (errno == EINTR || (errno == EAGAIN && ++tries < 64)));
    if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
    no_openat2.store(true, std::memory_order_relaxed);
  }
  int fd;
  do {
    fd = ::openat(dir_fd, name.c_str(), flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

}  // namespace airlock
