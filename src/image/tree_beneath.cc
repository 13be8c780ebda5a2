#include "image/tree_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <functional>
#include <vector>

#include "common/file_util.h"

namespace airlock::image {
namespace {

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;

// openat2 beneath `dir_fd` with kResolve (common/file_util.h). -1 and errno on failure.
int OpenAt(int dir_fd, const std::string& name, int flags, mode_t mode = 0) {
  return OpenComponentBeneath(dir_fd, name, flags, kResolve, mode);
}

// `path` split into components; "." and ".." refused.
StatusOr<std::vector<std::string>> Components(std::string_view path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty()) continue;
    if (part == "." || part == "..")
      return InvalidArgument("path '" + std::string(path) + "' in the image has a '" + std::string(part) + "' component");
    parts.emplace_back(part);
  }
  return parts;
}

std::string Shown(const std::vector<std::string>& parts, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += "/" + parts[i];
  return s.empty() ? "/" : s;
}

// Why `name` in `dir_fd` could not be entered or replaced (`err` the
// errno of the failed call), naming the image's path `shown`.
Status Refusal(int dir_fd, const std::string& name, const std::string& shown, const std::string& what, int err) {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof buf - 1);
      std::string target = n >= 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
      return FailedPrecondition("the image's '" + shown + "' is a symlink (-> " + target +
                                "): refused, the host never writes through a link in an image");
    }
    if (what == "enter" && !S_ISDIR(st.st_mode))
      return FailedPrecondition("the image's '" + shown + "' is not a directory");
  }
  return ErrnoError(what + " '" + shown + "' in the image", err);
}

// The directory that is to hold `path`'s last component (made when
// missing), with that component's name and its path as the image shows it,
// once the old entry of that name is gone: a symlink is removed itself, a
// hard link into the base layer loses one name.
struct FreedName {
  UniqueFd dir;
  std::string name;
  std::string shown;
};
StatusOr<FreedName> FreeName(int root_fd, std::string_view path) {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Components(path));
  if (parts.empty()) return InvalidArgument("no file name in '" + std::string(path) + "'");
  FreedName out;
  out.name = parts.back();
  out.shown = Shown(parts, parts.size());
  std::string parent_path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) parent_path += "/" + parts[i];
  ASSIGN_OR_RETURN(out.dir, OpenDirInTree(root_fd, parent_path, /*create=*/true));
  if (::unlinkat(out.dir.get(), out.name.c_str(), 0) != 0 && errno != ENOENT) {
    int err = errno;
    if (err == EISDIR) return FailedPrecondition("the image's '" + out.shown + "' is a directory");
    return ErrnoError("unlink '" + out.shown + "' in the image", err);
  }
  return out;
}

Status ReplaceIn(int root_fd, std::string_view path, mode_t mode, const std::function<Status(int, const std::string&)>& fill) {
  ASSIGN_OR_RETURN(FreedName freed, FreeName(root_fd, path));
  const UniqueFd& dir = freed.dir;
  const std::string& name = freed.name;
  const std::string& shown = freed.shown;
  UniqueFd fd(OpenAt(dir.get(), name, O_WRONLY | O_CREAT | O_EXCL, mode));
  if (!fd) return Refusal(dir.get(), name, shown, "create", errno);
  RETURN_IF_ERROR(fill(fd.get(), shown));
  if (::geteuid() == 0 && ::fchown(fd.get(), 0, 0) != 0) return ErrnoError("chown '" + shown + "' in the image");
  if (::fchmod(fd.get(), mode) != 0) return ErrnoError("chmod '" + shown + "' in the image");
  return OkStatus();
}

}  // namespace

StatusOr<UniqueFd> OpenTreeRoot(const std::string& root) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + root);
  return fd;
}

StatusOr<UniqueFd> OpenDirInTree(int root_fd, std::string_view path, bool create, mode_t mode) {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, Components(path));
  UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur) return ErrnoError("dup the image's root fd");
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string shown = Shown(parts, i + 1);
    UniqueFd next(OpenAt(cur.get(), parts[i], O_RDONLY | O_DIRECTORY));
    if (!next && errno == ENOENT && create) {
      if (::mkdirat(cur.get(), parts[i].c_str(), mode) != 0 && errno != EEXIST)
        return ErrnoError("mkdir '" + shown + "' in the image");
      next.Reset(OpenAt(cur.get(), parts[i], O_RDONLY | O_DIRECTORY));
      if (next && ::fchmod(next.get(), mode) != 0) return ErrnoError("chmod '" + shown + "' in the image");
    }
    if (!next) return Refusal(cur.get(), parts[i], shown, "enter", errno);
    cur = std::move(next);
  }
  return cur;
}

Status WriteFileInTree(int root_fd, std::string_view path, std::string_view data, mode_t mode) {
  return ReplaceIn(root_fd, path, mode,
                   [&](int fd, const std::string& shown) { return WriteAll(fd, data, "'" + shown + "' in the image"); });
}

Status CopyFileInTree(int root_fd, std::string_view path, const std::string& from, mode_t mode) {
  UniqueFd in(::open(from.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return ErrnoError("open " + from);
  return ReplaceIn(root_fd, path, mode, [&](int fd, const std::string& shown) -> Status {
    char buf[1 << 16];
    for (;;) {
      ssize_t r = ::read(in.get(), buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return ErrnoError("read " + from);
      if (r == 0) return OkStatus();
      RETURN_IF_ERROR(WriteAll(fd, std::string_view(buf, static_cast<size_t>(r)), "'" + shown + "' in the image"));
    }
  });
}

Status SymlinkInTree(int root_fd, std::string_view path, const std::string& target) {
  if (target.empty()) return InvalidArgument("empty symlink target for '" + std::string(path) + "'");
  ASSIGN_OR_RETURN(FreedName freed, FreeName(root_fd, path));
  if (::symlinkat(target.c_str(), freed.dir.get(), freed.name.c_str()) != 0)
    return ErrnoError("symlink '" + freed.shown + "' in the image");
  if (::geteuid() == 0 && ::fchownat(freed.dir.get(), freed.name.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoError("chown '" + freed.shown + "' in the image");
  return OkStatus();
}

}  // namespace airlock::image
