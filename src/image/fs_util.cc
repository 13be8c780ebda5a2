#include "image/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

namespace airlock::image {
namespace fs = std::filesystem;

namespace {

Status FromErrorCode(const std::error_code& ec, std::string_view what) {
  return ErrnoError(what, ec.value());
}

}  // namespace

StatusOr<std::string> ReadFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd.get(), buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read " + path);
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

Status WriteFile(const std::string& path, std::string_view data, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return ErrnoError("open " + path);
  RETURN_IF_ERROR(WriteAll(fd.get(), data, path));
  if (::fchmod(fd.get(), mode) != 0) return ErrnoError("fchmod " + path);
  return OkStatus();
}

Status CopyFile(const std::string& from, const std::string& to, mode_t mode) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return FromErrorCode(ec, "copy " + from + " -> " + to);
  if (::chmod(to.c_str(), mode) != 0) return ErrnoError("chmod " + to);
  return OkStatus();
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return FromErrorCode(ec, "mkdir -p " + path);
  return OkStatus();
}

Status RemoveTree(const std::string& path) {
  if (!Exists(path)) return OkStatus();
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return ErrnoError("realpath " + path);
  std::string top = real;
  ::free(real);
  if (top == "/") return InvalidArgument("refusing to remove /");
  // A build killed mid-way can leave mounts (proc, sys, dev binds) inside its
  // chroot: detach them first, deepest first, and never cross a mount point
  // while deleting, so nothing outside the tree is ever touched.
  std::vector<std::string> mounts;
  if (auto info = ReadFile("/proc/self/mountinfo"); info.ok()) {
    std::istringstream in(*info);
    for (std::string line; std::getline(in, line);) {
      std::istringstream f(line);
      std::string id, parent, devno, root, mnt;
      f >> id >> parent >> devno >> root >> mnt;
      if (mnt.size() > top.size() && mnt.compare(0, top.size() + 1, top + "/") == 0) {
        mounts.push_back(mnt);
      }
    }
  }
  std::sort(mounts.begin(), mounts.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const auto& m : mounts) {
    if (::umount2(m.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
      return ErrnoError("umount " + m);
    }
  }
  static thread_local std::string failed;
  static thread_local int failed_errno;
  failed.clear();
  int rc = ::nftw(
      top.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) -> int {
        if (::remove(p) != 0 && errno != ENOENT) {
          failed = p;
          failed_errno = errno;
          return 1;
        }
        return 0;
      },
      64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
  if (rc != 0) {
    if (!failed.empty()) return ErrnoError("rm -rf " + top + ": remove " + failed, failed_errno);
    return ErrnoError("rm -rf " + top);
  }
  return OkStatus();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return ErrnoError("opendir " + path);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  ::closedir(d);
  return names;
}

StatusOr<TreeUsage> MeasureTree(const std::string& path) {
  TreeUsage u;
  std::set<std::pair<dev_t, ino_t>> seen;
  std::error_code ec;
  auto add = [&](const std::string& p) -> Status {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) return ErrnoError("lstat " + p);
    if (st.st_nlink > 1 && !S_ISDIR(st.st_mode) && !seen.insert({st.st_dev, st.st_ino}).second) {
      return OkStatus();
    }
    u.bytes += static_cast<uint64_t>(st.st_blocks) * 512;
    u.inodes += 1;
    return OkStatus();
  };
  RETURN_IF_ERROR(add(path));
  fs::recursive_directory_iterator it(path, fs::directory_options::none, ec), end;
  if (ec) return FromErrorCode(ec, "walk " + path);
  for (; it != end; it.increment(ec)) {
    if (ec) return FromErrorCode(ec, "walk " + path);
    RETURN_IF_ERROR(add(it->path().string()));
  }
  if (ec) return FromErrorCode(ec, "walk " + path);
  return u;
}

StatusOr<std::string> MakeTempDir(const std::string& parent, const std::string& prefix) {
  std::string tmpl = parent + "/" + prefix + "XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoError("mkdtemp " + tmpl);
  return tmpl;
}

StatusOr<UniqueFd> LockFile(const std::string& path, const std::function<void()>& on_wait) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return ErrnoError("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return fd;
  if (errno != EWOULDBLOCK) return ErrnoError("flock " + path);
  if (on_wait) on_wait();
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return ErrnoError("flock " + path);
  }
  return fd;
}

}  // namespace airlock::image
