#include "agent/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <vector>

#include "agent/file_metadata.h"
#include "agent/paths.h"

namespace airlock::agent {

std::string PermissionString(mode_t m) {
  std::string s(10, '-');
  switch (m & S_IFMT) {
    case S_IFDIR: s[0] = 'd'; break;
    case S_IFLNK: s[0] = 'l'; break;
    case S_IFCHR: s[0] = 'c'; break;
    case S_IFBLK: s[0] = 'b'; break;
    case S_IFIFO: s[0] = 'p'; break;
    case S_IFSOCK: s[0] = 's'; break;
    default: break;
  }
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (m & (1 << (8 - i))) s[static_cast<size_t>(i + 1)] = rwx[i];
  }
  if (m & S_ISUID) s[3] = (m & S_IXUSR) ? 's' : 'S';
  if (m & S_ISGID) s[6] = (m & S_IXGRP) ? 's' : 'S';
  if (m & S_ISVTX) s[9] = (m & S_IXOTH) ? 't' : 'T';
  return s;
}

std::string ResolveSymlinkTarget(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return path;  // dangling, a loop, or not searchable
  return buf;
}

StatusOr<envd::EntryInfo> StatEntry(const std::string& path, const UserDb& users) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  envd::EntryInfo e;
  e.name = BaseName(path);
  e.path = path;
  e.mode = st.st_mode & 0777;
  if (S_ISDIR(st.st_mode)) {
    e.type = envd::FileType::kDirectory;
  } else if (S_ISLNK(st.st_mode)) {
    // As envd (shared/pkg/filesystem GetEntryInfo): the resolved target, and
    // the target's type and permission bits; a dangling or looping link is
    // of no type, mode 0. FILE_TYPE_SYMLINK is never sent: SDKs before it
    // existed fail to decode it.
    e.symlink_target = ResolveSymlinkTarget(path);
    struct stat target;
    if (stat(e.symlink_target->c_str(), &target) == 0) {
      e.type = S_ISDIR(target.st_mode) ? envd::FileType::kDirectory : envd::FileType::kFile;
      e.mode = target.st_mode & 0777;
    } else {
      e.type = envd::FileType::kUnspecified;
      e.mode = 0;
    }
  } else {
    // Regular files, and special files too, so that clients list them.
    e.type = envd::FileType::kFile;
  }
  e.size = st.st_size;
  e.permissions = PermissionString(st.st_mode);
  e.owner = users.UserName(st.st_uid);
  e.group = users.GroupName(st.st_gid);
  e.modified_time = {st.st_mtim.tv_sec, static_cast<int32_t>(st.st_mtim.tv_nsec)};
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode)) e.metadata = ReadMetadata(path);
  return e;
}

Status MakeDirs(const std::string& path) {
  std::string norm = NormalizePath(path);
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = norm.find('/', pos + 1);
    std::string prefix = norm.substr(0, pos);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) == 0) continue;
    if (errno != EEXIST) return ErrnoError("mkdir " + prefix);
    struct stat st;
    if (stat(prefix.c_str(), &st) != 0) return ErrnoError("stat " + prefix);
    if (!S_ISDIR(st.st_mode)) return InvalidArgument("path '" + prefix + "' exists and is not a directory");
  }
  return OkStatus();
}

namespace {
Status RemoveAt(int dirfd, const std::string& name, const std::string& display) {
  if (unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return OkStatus();
  if (errno != EISDIR && errno != EPERM) return ErrnoError("remove " + display);
  int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoError("open " + display);
  }
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return ErrnoError("opendir " + display);
  }
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  Status result;
  for (const auto& n : names) {
    Status st = RemoveAt(::dirfd(d), n, display + "/" + n);
    if (!st.ok() && result.ok()) result = st;
  }
  closedir(d);
  if (!result.ok()) return result;
  if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return ErrnoError("rmdir " + display);
  return OkStatus();
}
}  // namespace

Status RemoveAll(const std::string& path) {
  std::string norm = NormalizePath(path);
  if (norm == "/") return InvalidArgument("refusing to remove /");
  std::string parent = ParentPath(norm);
  int dfd = open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return OkStatus();
    return ErrnoError("open " + parent);
  }
  Status st = RemoveAt(dfd, BaseName(norm), norm);
  close(dfd);
  return st;
}

}  // namespace airlock::agent
