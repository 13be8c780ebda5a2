#include "core/volume_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <utility>

#include "common/clock.h"
#include "common/file_util.h"

namespace airlock {
namespace {

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
constexpr size_t kMaxPathBytes = 4096;
constexpr size_t kMaxNameBytes = 255;
constexpr mode_t kParentMode = 0755;
// Remove keeps the fds of this many of the deepest directories it is in;
// shallower ones are reopened by name from the nearest one kept.
constexpr size_t kHeldFds = 64;
// Directory reads one Remove may do before it gives up on a tree that keeps
// growing under it.
constexpr uint64_t kMaxRemoveScans = uint64_t{1} << 24;

// The component `name` beneath `dir_fd`, never following a symlink nor
// crossing into a filesystem other than `dev`: openat2 with kResolve, or
// openat(O_NOFOLLOW) and an st_dev check where the kernel has no openat2.
// -1 and errno on failure (ELOOP or ENOTDIR for a symlink, EXDEV for a
// mount point).
int OpenAt(int dir_fd, const std::string& name, int flags, dev_t dev, mode_t mode = 0) {
  int fd = OpenComponentBeneath(dir_fd, name, flags, kResolve, mode);
  struct stat st {};
  if (fd >= 0 && (::fstat(fd, &st) != 0 || st.st_dev != dev)) {
    ::close(fd);
    errno = EXDEV;
    return -1;
  }
  return fd;
}

// A volume path: as given (for messages) and as components.
struct VPath {
  std::string given;
  std::vector<std::string> parts;

  bool root() const { return parts.empty(); }
  const std::string& name() const { return parts.back(); }
  // "/a/b" of the first `n` components ("/" for none).
  std::string Shown(size_t n) const {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += "/" + parts[i];
    return s.empty() ? "/" : s;
  }
  std::string Shown() const { return Shown(parts.size()); }
  std::string Quoted() const { return "'" + given + "'"; }
};

StatusOr<VPath> ParsePath(std::string_view path) {
  if (path.find('\0') != std::string_view::npos) return InvalidArgument("a volume path may not hold a NUL byte");
  if (path.size() > kMaxPathBytes)
    return InvalidArgument("a volume path may be at most " + std::to_string(kMaxPathBytes) + " bytes");
  VPath p{std::string(path), {}};
  size_t pos = 0;
  while (pos < path.size()) {
    size_t slash = std::min(path.find('/', pos), path.size());
    std::string_view part = path.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty()) continue;
    if (part == "." || part == "..")
      return InvalidArgument("path " + p.Quoted() + " has a '" + std::string(part) + "' component");
    if (part.size() > kMaxNameBytes)
      return InvalidArgument("path " + p.Quoted() + " has a component over " + std::to_string(kMaxNameBytes) +
                             " bytes");
    p.parts.emplace_back(part);
  }
  return p;
}

const char* KindOf(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "symlink";
  if (S_ISFIFO(m)) return "fifo";
  if (S_ISSOCK(m)) return "socket";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  return "special file";
}

int64_t Ms(const struct timespec& t) { return int64_t{t.tv_sec} * 1000 + t.tv_nsec / 1000000; }

VolumeEntry FromStat(const struct stat& st, std::string name, std::string path) {
  VolumeEntry e;
  e.name = std::move(name);
  e.path = std::move(path);
  if (S_ISREG(st.st_mode))
    e.type = VolumeEntry::Type::kFile;
  else if (S_ISDIR(st.st_mode))
    e.type = VolumeEntry::Type::kDirectory;
  else if (S_ISLNK(st.st_mode))
    e.type = VolumeEntry::Type::kSymlink;
  e.size = st.st_size;
  e.mode = st.st_mode & 07777;
  e.uid = st.st_uid;
  e.gid = st.st_gid;
  e.atime_ms = Ms(st.st_atim);
  e.mtime_ms = Ms(st.st_mtim);
  e.ctime_ms = Ms(st.st_ctim);
  return e;
}

std::string ReadLink(int dir_fd, const std::string& name) {
  char buf[kMaxPathBytes];
  ssize_t n = ::readlinkat(dir_fd, name.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Why component `i` of `p` in `dir_fd` could not be opened (`err` the errno
// of the open) as a directory (`want_dir`) or a regular file.
Status Refusal(int dir_fd, const VPath& p, size_t i, int err, bool want_dir, dev_t dev) {
  const bool last = i + 1 == p.parts.size();
  const std::string shown = p.Shown(i + 1);
  const std::string in = last ? "" : " (a component of " + p.Quoted() + ")";
  if (err == ENOENT)
    return NotFound(last ? p.Quoted() + " does not exist in the volume"
                         : "no directory '" + shown + "' in the volume" + in);
  struct stat st {};
  const bool have = ::fstatat(dir_fd, p.parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (have && S_ISLNK(st.st_mode)) return InvalidArgument("'" + shown + "' is a symlink" + in);
  if (err == EXDEV || (have && st.st_dev != dev))
    return InvalidArgument("'" + shown + "' is on another filesystem" + in);
  if (want_dir && (err == ENOTDIR || (have && !S_ISDIR(st.st_mode))))
    return InvalidArgument(last ? p.Quoted() + " is not a directory"
                                : "a component of " + p.Quoted() + " is not a directory");
  if (!want_dir && have && !S_ISREG(st.st_mode)) return InvalidArgument(p.Quoted() + " is a " + KindOf(st.st_mode));
  return ErrnoError("open '" + shown + "' in the volume", err);
}

// Sets a new entry's owner and exact mode on its fd.
Status Adopt(int fd, uint32_t uid, uint32_t gid, mode_t mode, const std::string& shown) {
  if (::fchown(fd, uid, gid) != 0) return ErrnoError("chown '" + shown + "' in the volume");
  if (::fchmod(fd, mode) != 0) return ErrnoError("chmod '" + shown + "' in the volume");
  return OkStatus();
}

StatusOr<mode_t> ModeOf(const VolumeFs::Owner& o, mode_t fallback) {
  uint32_t mode = o.mode.value_or(fallback);
  if (mode > 07777) return InvalidArgument("mode " + std::to_string(mode) + " is over 07777");
  return static_cast<mode_t>(mode);
}

// The names in directory `fd` but "." and "..", sorted, into `names`.
// 0, or the errno of the call that failed.
int ReadNames(int fd, std::vector<std::string>* names) {
  names->clear();
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return errno;
  DIR* d = ::fdopendir(dup);
  if (d == nullptr) {
    int err = errno;
    ::close(dup);
    return err;
  }
  ::rewinddir(d);  // the dup shares the offset of an earlier read
  errno = 0;
  while (struct dirent* de = ::readdir(d)) {
    std::string_view n = de->d_name;
    if (n != "." && n != "..") names->emplace_back(n);
    errno = 0;
  }
  int err = errno;
  ::closedir(d);
  std::sort(names->begin(), names->end());
  return err;
}

}  // namespace

nlohmann::json VolumeEntryJson(const VolumeEntry& e) {
  const char* type = "unknown";
  switch (e.type) {
    case VolumeEntry::Type::kFile:
      type = "file";
      break;
    case VolumeEntry::Type::kDirectory:
      type = "directory";
      break;
    case VolumeEntry::Type::kSymlink:
      type = "symlink";
      break;
    case VolumeEntry::Type::kUnknown:
      break;
  }
  nlohmann::json j = {{"name", e.name},
                      {"path", e.path},
                      {"type", type},
                      {"size", e.size},
                      {"mode", e.mode},
                      {"uid", e.uid},
                      {"gid", e.gid},
                      {"atime", FormatRfc3339Ms(e.atime_ms)},
                      {"mtime", FormatRfc3339Ms(e.mtime_ms)},
                      {"ctime", FormatRfc3339Ms(e.ctime_ms)}};
  if (e.type == VolumeEntry::Type::kSymlink) j["target"] = e.target;
  return j;
}

namespace {

// The directory of the first `n` components of `p` beneath `root_fd`. With
// `o`, missing ones are made (kParentMode, owned by o->uid/gid).
StatusOr<UniqueFd> Walk(int root_fd, dev_t dev, const VPath& p, size_t n, const VolumeFs::Owner* o) {
  UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!cur) return ErrnoError("dup the volume's root fd");
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = p.parts[i];
    UniqueFd next(OpenAt(cur.get(), name, O_RDONLY | O_DIRECTORY, dev));
    if (!next && errno == ENOENT && o != nullptr) {
      bool made = ::mkdirat(cur.get(), name.c_str(), 0700) == 0;
      if (!made && errno != EEXIST) return ErrnoError("mkdir '" + p.Shown(i + 1) + "' in the volume");
      next.Reset(OpenAt(cur.get(), name, O_RDONLY | O_DIRECTORY, dev));
      if (next && made) RETURN_IF_ERROR(Adopt(next.get(), o->uid, o->gid, kParentMode, p.Shown(i + 1)));
    }
    if (!next) return Refusal(cur.get(), p, i, errno, /*want_dir=*/true, dev);
    cur = std::move(next);
  }
  return cur;
}

// The entry named p.name() in `dir_fd` (lstat).
StatusOr<VolumeEntry> StatIn(int dir_fd, dev_t dev, const VPath& p) {
  struct stat st {};
  if (::fstatat(dir_fd, p.name().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return NotFound(p.Quoted() + " does not exist in the volume");
    return ErrnoError("stat '" + p.Shown() + "' in the volume");
  }
  if (st.st_dev != dev) return InvalidArgument("'" + p.Shown() + "' is on another filesystem");
  VolumeEntry e = FromStat(st, p.name(), p.Shown());
  if (S_ISLNK(st.st_mode)) e.target = ReadLink(dir_fd, p.name());
  return e;
}

// fstat of an fd opened O_NONBLOCK: a regular file, made blocking.
Status KeepRegular(int fd, const VPath& p) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("stat '" + p.Shown() + "' in the volume");
  if (!S_ISREG(st.st_mode)) return InvalidArgument(p.Quoted() + " is a " + KindOf(st.st_mode));
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return ErrnoError("fcntl '" + p.Shown() + "'");
  return OkStatus();
}

}  // namespace

StatusOr<VolumeFs> VolumeFs::Open(const std::string& root_dir) {
  UniqueFd fd(::open(root_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoError("open the volume's root");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat the volume's root");
  return VolumeFs(std::move(fd), st.st_dev);
}

StatusOr<VolumeEntry> VolumeFs::Stat(std::string_view path) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  if (p.root()) {
    struct stat st {};
    if (::fstat(root_.get(), &st) != 0) return ErrnoError("stat the volume's root");
    return FromStat(st, "/", "/");
  }
  ASSIGN_OR_RETURN(UniqueFd dir, Walk(root_.get(), dev_, p, p.parts.size() - 1, nullptr));
  return StatIn(dir.get(), dev_, p);
}

StatusOr<std::vector<VolumeEntry>> VolumeFs::List(std::string_view path, int depth) const {
  if (depth > kMaxListDepth) return InvalidArgument("depth may be at most " + std::to_string(kMaxListDepth));
  depth = std::max(depth, 1);
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  ASSIGN_OR_RETURN(UniqueFd top, Walk(root_.get(), dev_, p, p.parts.size(), nullptr));
  std::vector<VolumeEntry> out;
  // Pre-order: each directory's entries right after its own entry.
  struct Frame {
    UniqueFd fd;
    std::string prefix;  // "/a/b", "" for the root
    std::vector<std::string> names;
    size_t next = 0;
  };
  std::vector<Frame> stack;
  const std::string prefix = p.root() ? "" : p.Shown();
  std::vector<std::string> names;
  if (int err = ReadNames(top.get(), &names)) return ErrnoError("read '" + p.Shown() + "' in the volume", err);
  stack.push_back(Frame{std::move(top), prefix, std::move(names)});
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next == f.names.size()) {
      stack.pop_back();
      continue;
    }
    const std::string name = f.names[f.next++];
    const std::string entry_path = f.prefix + "/" + name;
    struct stat st {};
    if (::fstatat(f.fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since the read
      return ErrnoError("stat '" + entry_path + "' in the volume");
    }
    VolumeEntry e = FromStat(st, name, entry_path);
    if (S_ISLNK(st.st_mode)) e.target = ReadLink(f.fd.get(), name);
    if (out.size() == kMaxListEntries) {
      return InvalidArgument("more than " + std::to_string(kMaxListEntries) + " entries under '" + p.Shown() +
                             "'; list it with a smaller depth");
    }
    out.push_back(std::move(e));
    if (!S_ISDIR(st.st_mode) || st.st_dev != dev_ || static_cast<int>(stack.size()) >= depth) continue;
    // Replaced by a link or removed since the stat: listed, not entered.
    UniqueFd sub(OpenAt(f.fd.get(), name, O_RDONLY | O_DIRECTORY, dev_));
    if (!sub) continue;
    std::vector<std::string> sub_names;
    if (int err = ReadNames(sub.get(), &sub_names)) return ErrnoError("read '" + entry_path + "' in the volume", err);
    stack.push_back(Frame{std::move(sub), entry_path, std::move(sub_names)});  // `f` is invalid from here
  }
  return out;
}

StatusOr<VolumeEntry> VolumeFs::MakeDir(std::string_view path, const Owner& o, bool parents) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  ASSIGN_OR_RETURN(mode_t mode, ModeOf(o, 0755));
  if (p.root()) {
    if (parents) return Stat("/");
    return AlreadyExists("the volume's root already exists");
  }
  ASSIGN_OR_RETURN(UniqueFd parent, Walk(root_.get(), dev_, p, p.parts.size() - 1, parents ? &o : nullptr));
  if (::mkdirat(parent.get(), p.name().c_str(), 0700) != 0) {
    int err = errno;
    if (err != EEXIST) return ErrnoError("mkdir '" + p.Shown() + "' in the volume", err);
    if (parents) {
      ASSIGN_OR_RETURN(VolumeEntry e, StatIn(parent.get(), dev_, p));
      if (e.type == VolumeEntry::Type::kDirectory) return e;
    }
    return AlreadyExists(p.Quoted() + " already exists in the volume");
  }
  UniqueFd fd(OpenAt(parent.get(), p.name(), O_RDONLY | O_DIRECTORY, dev_));
  if (!fd) return Refusal(parent.get(), p, p.parts.size() - 1, errno, /*want_dir=*/true, dev_);
  RETURN_IF_ERROR(Adopt(fd.get(), o.uid, o.gid, mode, p.Shown()));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat '" + p.Shown() + "' in the volume");
  return FromStat(st, p.name(), p.Shown());
}

StatusOr<UniqueFd> VolumeFs::CreateFile(std::string_view path, const Owner& o, bool force) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  ASSIGN_OR_RETURN(mode_t mode, ModeOf(o, 0644));
  if (p.root()) return InvalidArgument(p.Quoted() + " is the volume's root, a directory");
  ASSIGN_OR_RETURN(UniqueFd parent, Walk(root_.get(), dev_, p, p.parts.size() - 1, force ? &o : nullptr));
  // O_NONBLOCK: a fifo or device must not block the open; O_TRUNC only
  // once the fstat has shown a regular file.
  UniqueFd fd(OpenAt(parent.get(), p.name(), O_WRONLY | O_CREAT | O_NONBLOCK, dev_, 0600));
  if (!fd) return Refusal(parent.get(), p, p.parts.size() - 1, errno, /*want_dir=*/false, dev_);
  RETURN_IF_ERROR(KeepRegular(fd.get(), p));
  if (::ftruncate(fd.get(), 0) != 0) return ErrnoError("truncate '" + p.Shown() + "' in the volume");
  RETURN_IF_ERROR(Adopt(fd.get(), o.uid, o.gid, mode, p.Shown()));
  return fd;
}

StatusOr<VolumeEntry> VolumeFs::FinishFile(std::string_view path, int fd) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  if (::fsync(fd) != 0) return ErrnoError("fsync '" + p.Shown() + "' in the volume");
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoError("stat '" + p.Shown() + "' in the volume");
  return FromStat(st, p.root() ? "/" : p.name(), p.Shown());
}

StatusOr<UniqueFd> VolumeFs::OpenRead(std::string_view path) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  if (p.root()) return InvalidArgument(p.Quoted() + " is the volume's root, a directory");
  ASSIGN_OR_RETURN(UniqueFd parent, Walk(root_.get(), dev_, p, p.parts.size() - 1, nullptr));
  UniqueFd fd(OpenAt(parent.get(), p.name(), O_RDONLY | O_NONBLOCK, dev_));
  if (!fd) return Refusal(parent.get(), p, p.parts.size() - 1, errno, /*want_dir=*/false, dev_);
  RETURN_IF_ERROR(KeepRegular(fd.get(), p));
  return fd;
}

StatusOr<VolumeEntry> VolumeFs::Update(std::string_view path, std::optional<uint32_t> uid, std::optional<uint32_t> gid,
                                       std::optional<uint32_t> mode) const {
  if (mode && *mode > 07777) return InvalidArgument("mode " + std::to_string(*mode) + " is over 07777");
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  const uid_t u = uid ? static_cast<uid_t>(*uid) : static_cast<uid_t>(-1);
  const gid_t g = gid ? static_cast<gid_t>(*gid) : static_cast<gid_t>(-1);
  if (p.root()) {
    if ((uid || gid) && ::fchown(root_.get(), u, g) != 0) return ErrnoError("chown the volume's root");
    if (mode && ::fchmod(root_.get(), static_cast<mode_t>(*mode)) != 0) return ErrnoError("chmod the volume's root");
    return Stat("/");
  }
  ASSIGN_OR_RETURN(UniqueFd parent, Walk(root_.get(), dev_, p, p.parts.size() - 1, nullptr));
  ASSIGN_OR_RETURN(VolumeEntry before, StatIn(parent.get(), dev_, p));
  if (mode && before.type == VolumeEntry::Type::kSymlink)
    return InvalidArgument(p.Quoted() + " is a symlink: it has no mode of its own");
  const char* name = p.name().c_str();
  if ((uid || gid) && ::fchownat(parent.get(), name, u, g, AT_SYMLINK_NOFOLLOW) != 0)
    return ErrnoError("chown '" + p.Shown() + "' in the volume");
  // glibc does this through an O_PATH|O_NOFOLLOW fd (or fchmodat2): a
  // symlink swapped in since the stat is EOPNOTSUPP, never followed.
  if (mode && ::fchmodat(parent.get(), name, static_cast<mode_t>(*mode), AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == EOPNOTSUPP) return InvalidArgument(p.Quoted() + " is a symlink: it has no mode of its own");
    return ErrnoError("chmod '" + p.Shown() + "' in the volume");
  }
  return StatIn(parent.get(), dev_, p);
}

namespace {

// One directory Remove is in: its name in the one above, its fd (closed
// above the kHeldFds deepest), the subdirectories its last read found.
struct Level {
  std::string name;
  UniqueFd fd;
  std::vector<std::string> pending;
};

std::string ShownAt(const VPath& p, const std::vector<Level>& stack, size_t n) {
  std::string s = p.Shown();
  for (size_t i = 1; i < n && i < stack.size(); ++i) s += "/" + stack[i].name;
  return s;
}

// Reopens the fds of the top of `stack` by name from the nearest level (or
// `base_fd`) that still has one. A level that is gone or no longer a
// directory is dropped with everything below it (its parent reads it again).
Status Reopen(std::vector<Level>& stack, int base_fd, dev_t dev, const VPath& p) {
  const size_t top = stack.size() - 1;
  size_t j = top;
  while (j > 0 && !stack[j - 1].fd) --j;
  UniqueFd walking;
  int prev = j == 0 ? base_fd : stack[j - 1].fd.get();
  for (size_t i = j; i <= top; ++i) {
    UniqueFd fd(OpenAt(prev, stack[i].name, O_RDONLY | O_DIRECTORY, dev));
    if (!fd) {
      int err = errno;
      if (err != ENOENT && err != ENOTDIR && err != ELOOP && err != EXDEV)
        return ErrnoError("open '" + ShownAt(p, stack, i + 1) + "' in the volume", err);
      stack.resize(i);
      return OkStatus();
    }
    if (i + kHeldFds > top) {
      stack[i].fd = std::move(fd);
      prev = stack[i].fd.get();
    } else {
      walking = std::move(fd);
      prev = walking.get();
    }
  }
  return OkStatus();
}

// Empties the directory `name` in `base_fd`, never following a link nor
// leaving `dev`, then removes it.
Status RemoveTree(int base_fd, dev_t dev, const VPath& p) {
  std::vector<Level> stack;
  stack.push_back(Level{p.name(), UniqueFd(OpenAt(base_fd, p.name(), O_RDONLY | O_DIRECTORY, dev)), {}});
  if (!stack[0].fd) return Refusal(base_fd, p, p.parts.size() - 1, errno, /*want_dir=*/true, dev);
  uint64_t scans = 0;
  std::vector<std::string> names;
  while (!stack.empty()) {
    if (!stack.back().fd) {
      RETURN_IF_ERROR(Reopen(stack, base_fd, dev, p));
      continue;
    }
    Level& top = stack.back();
    if (!top.pending.empty()) {
      std::string sub = std::move(top.pending.back());
      top.pending.pop_back();
      UniqueFd fd(OpenAt(top.fd.get(), sub, O_RDONLY | O_DIRECTORY, dev));
      if (!fd) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR || err == ELOOP) continue;  // changed: the next read sees it
        if (err == EXDEV)
          return InvalidArgument("'" + ShownAt(p, stack, stack.size()) + "/" + sub + "' is on another filesystem");
        return ErrnoError("open '" + ShownAt(p, stack, stack.size()) + "/" + sub + "' in the volume", err);
      }
      if (stack.size() >= VolumeFs::kMaxRemoveDepth)
        return FailedPrecondition(p.Quoted() + " is more than " + std::to_string(VolumeFs::kMaxRemoveDepth) +
                                  " directories deep: not removed");
      stack.push_back(Level{std::move(sub), std::move(fd), {}});  // `top` is invalid from here
      if (stack.size() > kHeldFds) stack[stack.size() - 1 - kHeldFds].fd.Reset();
      continue;
    }
    if (++scans > kMaxRemoveScans) return FailedPrecondition(p.Quoted() + " kept changing while it was removed");
    // Messages only: built on an error, not per directory (a deep tree's
    // paths are long).
    auto shown = [&](const std::string& n) { return ShownAt(p, stack, stack.size()) + (n.empty() ? "" : "/" + n); };
    if (int err = ReadNames(top.fd.get(), &names)) return ErrnoError("read '" + shown("") + "' in the volume", err);
    for (const std::string& n : names) {
      struct stat st {};
      if (::fstatat(top.fd.get(), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return ErrnoError("stat '" + shown(n) + "' in the volume");
      }
      if (S_ISDIR(st.st_mode)) {
        if (st.st_dev != dev) return InvalidArgument("'" + shown(n) + "' is on another filesystem");
        top.pending.push_back(n);
      } else if (::unlinkat(top.fd.get(), n.c_str(), 0) != 0) {
        if (errno == EISDIR)
          top.pending.push_back(n);
        else if (errno != ENOENT)
          return ErrnoError("unlink '" + shown(n) + "' in the volume");
      }
    }
    if (!top.pending.empty()) continue;
    // Empty: remove it from the directory above.
    std::string gone = std::move(top.name);
    stack.pop_back();
    const size_t want = stack.size();
    if (!stack.empty() && !stack.back().fd) RETURN_IF_ERROR(Reopen(stack, base_fd, dev, p));
    if (stack.size() != want) continue;  // the level above changed: it is read again
    int parent_fd = stack.empty() ? base_fd : stack.back().fd.get();
    if (::unlinkat(parent_fd, gone.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) continue;
    if (errno != ENOTEMPTY && errno != EEXIST) {
      int err = errno;
      std::string at = stack.empty() ? p.Shown() : ShownAt(p, stack, stack.size()) + "/" + gone;
      return ErrnoError("remove '" + at + "' in the volume", err);
    }
    // Filled again since the read: the level above reads it again; the top
    // one is entered again.
    if (stack.empty()) {
      stack.push_back(Level{gone, UniqueFd(OpenAt(base_fd, gone, O_RDONLY | O_DIRECTORY, dev)), {}});
      if (!stack[0].fd) return Refusal(base_fd, p, p.parts.size() - 1, errno, /*want_dir=*/true, dev);
    }
  }
  return OkStatus();
}

}  // namespace

Status VolumeFs::Remove(std::string_view path) const {
  ASSIGN_OR_RETURN(VPath p, ParsePath(path));
  if (p.root()) return InvalidArgument("cannot delete the volume's root");
  ASSIGN_OR_RETURN(UniqueFd parent, Walk(root_.get(), dev_, p, p.parts.size() - 1, nullptr));
  struct stat st {};
  if (::fstatat(parent.get(), p.name().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return NotFound(p.Quoted() + " does not exist in the volume");
    return ErrnoError("stat '" + p.Shown() + "' in the volume");
  }
  if (st.st_dev != dev_) return InvalidArgument("'" + p.Shown() + "' is on another filesystem");
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent.get(), p.name().c_str(), 0) == 0) return OkStatus();
    if (errno == ENOENT) return NotFound(p.Quoted() + " does not exist in the volume");
    if (errno != EISDIR) return ErrnoError("unlink '" + p.Shown() + "' in the volume");
  }
  return RemoveTree(parent.get(), dev_, p);
}

}  // namespace airlock
