#include "agent/root_changes.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "common/fd.h"
#include "common/file_util.h"

namespace airlock::agent {
namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxPaxHeader = 1 << 20;  // our own records are a path or two long
constexpr char kDeletedKey[] = "AIRLOCK.deleted";
// Directories deep: the walk and a removal recurse once a level (and the walk
// holds two fds a level), so a guest's deeper tree is refused, never a stack
// or fd table run out in PID 1. A shell's `mkdir -p` stops at PATH_MAX
// (4096 bytes), so no tree made by path names alone gets near it.
constexpr int kMaxDepth = 4096;

// ---------------------------------------------------------------- writing

void Octal(char* field, size_t width, uint64_t v) {
  // width-1 digits and a NUL (ustar); callers keep v in range.
  std::string s(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && v > 0; v >>= 3) s[i] = static_cast<char>('0' + (v & 7));
  std::memcpy(field, s.data(), width - 1);
  field[width - 1] = '\0';
}

// One pax record: "<len> <key>=<value>\n", len counting itself.
std::string PaxRecord(const std::string& key, const std::string& value) {
  size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) ++len;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

std::string TimeValue(const struct timespec& t) {
  char ns[16];
  std::snprintf(ns, sizeof ns, "%09ld", static_cast<long>(t.tv_nsec));
  return std::to_string(static_cast<long long>(t.tv_sec)) + "." + ns;
}

class TarWriter {
 public:
  explicit TarWriter(int fd) : fd_(fd) {}

  Status Entry(const std::string& path, char type, const struct stat& st, const std::string& link, uint64_t size,
               bool deleted) {
    std::string pax = PaxRecord("path", path) + PaxRecord("mtime", TimeValue(st.st_mtim));
    if (!link.empty()) pax += PaxRecord("linkpath", link);
    if (deleted) pax += PaxRecord(kDeletedKey, "1");
    if (st.st_uid > 07777777) pax += PaxRecord("uid", std::to_string(st.st_uid));
    if (st.st_gid > 07777777) pax += PaxRecord("gid", std::to_string(st.st_gid));
    if (size > 077777777777ull) pax += PaxRecord("size", std::to_string(size));
    RETURN_IF_ERROR(Header("././@PaxHeader", 'x', 0644, 0, 0, pax.size(), 0, "", 0, 0));
    RETURN_IF_ERROR(Put(pax));
    RETURN_IF_ERROR(Pad(pax.size()));
    const bool dev = type == '3' || type == '4';
    return Header(path, type, st.st_mode & 07777, st.st_uid, st.st_gid, size,
                  st.st_mtim.tv_sec > 0 ? static_cast<uint64_t>(st.st_mtim.tv_sec) : 0, link,
                  dev ? major(st.st_rdev) : 0, dev ? minor(st.st_rdev) : 0);
  }
  Status Put(std::string_view d) {
    buf_.append(d);
    return buf_.size() >= (1 << 16) ? Flush() : OkStatus();
  }
  Status Pad(uint64_t size) {
    size_t r = size % kBlock;
    return r == 0 ? OkStatus() : Put(std::string(kBlock - r, '\0'));
  }
  Status End() {
    RETURN_IF_ERROR(Put(std::string(2 * kBlock, '\0')));
    return Flush();
  }
  Status Flush() {
    RETURN_IF_ERROR(airlock::WriteAll(fd_, buf_, "the archive"));
    buf_.clear();
    return OkStatus();
  }

 private:
  Status Header(const std::string& name, char type, uint32_t mode, uint64_t uid, uint64_t gid, uint64_t size,
                uint64_t mtime, const std::string& link, uint32_t devmajor, uint32_t devminor) {
    char h[kBlock] = {};
    // The pax record carries the whole path; ustar's fields its tail.
    std::string n = name.size() > 99 ? name.substr(name.size() - 99) : name;
    std::memcpy(h, n.data(), n.size());
    Octal(h + 100, 8, mode);
    Octal(h + 108, 8, uid > 07777777 ? 0 : uid);
    Octal(h + 116, 8, gid > 07777777 ? 0 : gid);
    Octal(h + 124, 12, size > 077777777777ull ? 0 : size);
    Octal(h + 136, 12, std::min<uint64_t>(mtime, 077777777777ull));
    std::memset(h + 148, ' ', 8);
    h[156] = type;
    std::string l = link.substr(0, 99);
    std::memcpy(h + 157, l.data(), l.size());
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    Octal(h + 329, 8, devmajor);
    Octal(h + 337, 8, devminor);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    Octal(h + 148, 7, sum);  // six digits, NUL, and the space left there
    return Put(std::string_view(h, kBlock));
  }

  int fd_;
  std::string buf_;
};

// ---------------------------------------------------------------- walking

// The names in directory `fd` (not consumed), sorted; "." and ".." left out.
StatusOr<std::vector<std::string>> Names(int fd) {
  int d = ::openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return ErrnoError("open directory");
  DIR* dir = ::fdopendir(d);
  if (!dir) {
    ::close(d);
    return ErrnoError("fdopendir");
  }
  std::vector<std::string> out;
  errno = 0;
  while (struct dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    out.emplace_back(e->d_name);
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return Status(StatusCode::kInternal, std::string("readdir: ") + std::strerror(err));
  std::sort(out.begin(), out.end());
  return out;
}

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

class Walker {
 public:
  Walker(TarWriter& w, std::set<std::string> skip, RootChangesStats& stats)
      : w_(w), skip_(std::move(skip)), stats_(stats) {}

  // The device of files written in the guest's root: a file made there now.
  // An overlay (gVisor's) reports each non-directory with the device of the
  // layer it is in, so once a file known unchanged shows the template
  // layer's device, and that differs from this one, every file on it is
  // known unchanged without a look at the base.
  void ProbeUpperDevice(int rfd) {
    const std::string probe = ".airlock-probe-" + std::to_string(::getpid());
    UniqueFd fd(::openat(rfd, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return;
    struct stat st;
    if (::fstat(fd.get(), &st) == 0) {
      upper_dev_ = st.st_dev;
      know_upper_ = true;
    }
    ::unlinkat(rfd, probe.c_str(), 0);
  }

  // `rel`: "" for the root, else "a/b/". `same_mtime`: the directory's mtime
  // is its base's.
  Status Dir(int rfd, int bfd, const std::string& rel, bool same_mtime = false, int depth = 0) {
    if (depth > kMaxDepth) {
      return FailedPrecondition("/" + rel + " is more than " + std::to_string(kMaxDepth) +
                                " directories deep: the root cannot be exported");
    }
    auto names = Names(rfd);
    if (!names.ok()) {
      Skip(rel, names.status());
      return OkStatus();
    }
    std::set<std::string> present(names->begin(), names->end());
    for (const auto& name : *names) {
      const std::string path = rel + name;
      if (skip_.count(path)) continue;
      struct stat r;
      if (::fstatat(rfd, name.c_str(), &r, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) Skip(path, ErrnoError("lstat"));
        continue;
      }
      if (!S_ISDIR(r.st_mode) && dev_trick_ && r.st_dev == lower_dev_) continue;  // ProbeUpperDevice
      struct stat b;
      const bool has_base = bfd >= 0 && ::fstatat(bfd, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0;
      if (S_ISDIR(r.st_mode)) {
        const bool changed = !has_base || r.st_mode != b.st_mode || r.st_uid != b.st_uid || r.st_gid != b.st_gid ||
                             !SameTime(r.st_mtim, b.st_mtim);
        // Never copied up: an overlay shows a directory only in its lower
        // layer as that layer's inode, ctime included (no process can set
        // a ctime), and anything written beneath copies up every ancestor,
        // which moves their ctimes. So nothing under it is the guest's, and
        // the walk skips it whole (most of a template's tree).
        if (!changed && has_base && SameTime(r.st_ctim, b.st_ctim)) continue;
        // Its header even when only its entries changed: the import moves
        // its mtime, which the header then sets back.
        RETURN_IF_ERROR(Emit(path, '5', r, "", 0, false));
        UniqueFd child(::openat(rfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) {
          // Out of fds is the walk's end, not a directory quietly left out.
          if (errno == EMFILE || errno == ENFILE) return ErrnoError("open /" + path);
          Skip(path, ErrnoError("open"));
          continue;
        }
        UniqueFd bchild;
        if (has_base && S_ISDIR(b.st_mode))
          bchild.Reset(::openat(bfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        RETURN_IF_ERROR(Dir(child.get(), bchild ? bchild.get() : -1, path + "/",
                            has_base && S_ISDIR(b.st_mode) && SameTime(r.st_mtim, b.st_mtim), depth + 1));
        continue;
      }
      if (S_ISSOCK(r.st_mode)) continue;
      std::string target;
      if (S_ISLNK(r.st_mode)) {
        auto t = ReadLink(rfd, name);
        if (!t.ok()) {
          Skip(path, t.status());
          continue;
        }
        target = *t;
      }
      bool changed = !has_base || r.st_mode != b.st_mode || r.st_uid != b.st_uid || r.st_gid != b.st_gid ||
                     r.st_size != b.st_size || !SameTime(r.st_mtim, b.st_mtim) || !SameTime(r.st_ctim, b.st_ctim);
      if (!changed && (S_ISCHR(r.st_mode) || S_ISBLK(r.st_mode))) changed = r.st_rdev != b.st_rdev;
      if (!changed && S_ISLNK(r.st_mode)) {
        auto bt = ReadLink(bfd, name);
        changed = !bt.ok() || *bt != target;
      }
      if (!changed) {
        LearnLowerDevice(r.st_dev);
        continue;
      }
      if (S_ISLNK(r.st_mode)) {
        RETURN_IF_ERROR(Emit(path, '2', r, target, 0, false));
      } else if (S_ISFIFO(r.st_mode)) {
        RETURN_IF_ERROR(Emit(path, '6', r, "", 0, false));
      } else if (S_ISCHR(r.st_mode)) {
        RETURN_IF_ERROR(Emit(path, '3', r, "", 0, false));
      } else if (S_ISBLK(r.st_mode)) {
        RETURN_IF_ERROR(Emit(path, '4', r, "", 0, false));
      } else if (S_ISREG(r.st_mode)) {
        RETURN_IF_ERROR(File(rfd, name, path, r));
      }
    }
    // What the template has here and the guest no longer does. A directory
    // whose mtime is the template's had no entry made or removed (an
    // overlay's copy-up keeps the mtime; a removal moves it): not listed.
    if (bfd >= 0 && !same_mtime) {
      auto base_names = Names(bfd);
      if (!base_names.ok()) {
        Skip(rel, base_names.status());
        return OkStatus();
      }
      for (const auto& name : *base_names) {
        const std::string path = rel + name;
        if (present.count(name) || skip_.count(path)) continue;
        struct stat gone;
        if (::fstatat(rfd, name.c_str(), &gone, AT_SYMLINK_NOFOLLOW) == 0) continue;  // made since the listing
        struct stat zero = {};
        RETURN_IF_ERROR(Emit(path, '0', zero, "", 0, true));
        ++stats_.deleted;
      }
    }
    return OkStatus();
  }

 private:
  static StatusOr<std::string> ReadLink(int dirfd, const std::string& name) {
    std::string buf(4096, '\0');
    ssize_t n = ::readlinkat(dirfd, name.c_str(), buf.data(), buf.size());
    if (n < 0) return ErrnoError("readlink");
    buf.resize(static_cast<size_t>(n));
    return buf;
  }

  Status Emit(const std::string& path, char type, const struct stat& st, const std::string& link, uint64_t size,
              bool deleted) {
    ++stats_.entries;
    return w_.Entry(path, type, st, link, size, deleted);
  }

  // A write error is the walk's end (the reader is gone); anything else in
  // the guest's tree is skipped and counted.
  void Skip(const std::string& path, const Status& why) {
    ++stats_.skipped;
    if (stats_.first_error.empty()) stats_.first_error = "/" + path + ": " + why.message();
  }

  Status File(int rfd, const std::string& name, const std::string& path, const struct stat& listed) {
    if (listed.st_nlink > 1) {
      auto key = std::make_pair(listed.st_dev, listed.st_ino);
      auto it = links_.find(key);
      if (it != links_.end()) return Emit(path, '1', listed, it->second, 0, false);
      links_.emplace(key, path);
    }
    // O_NONBLOCK: a file swapped for a FIFO since the lstat must not hold the walk.
    UniqueFd fd(::openat(rfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      Skip(path, fd ? InvalidArgument("no longer a regular file") : ErrnoError("open"));
      return OkStatus();
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    RETURN_IF_ERROR(Emit(path, '0', st, "", size, false));
    // Exactly `size` bytes, as the header says: a file that shrinks while
    // read is padded with zeros (and counted), one that grows is cut there.
    std::vector<char> buf(1 << 16);
    uint64_t left = size;
    bool short_read = false;
    while (left > 0) {
      ssize_t n = short_read ? 0 : ::read(fd.get(), buf.data(), std::min<uint64_t>(buf.size(), left));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!short_read) Skip(path, n < 0 ? ErrnoError("read") : Status(StatusCode::kDataLoss, "shrank while read"));
        short_read = true;
        std::fill(buf.begin(), buf.end(), '\0');
        n = static_cast<ssize_t>(std::min<uint64_t>(buf.size(), left));
      }
      RETURN_IF_ERROR(w_.Put(std::string_view(buf.data(), static_cast<size_t>(n))));
      left -= static_cast<uint64_t>(n);
    }
    stats_.bytes += size;
    return w_.Pad(size);
  }

  void LearnLowerDevice(dev_t dev) {
    if (dev_trick_ || !know_upper_ || dev == upper_dev_) return;
    lower_dev_ = dev;
    dev_trick_ = true;
  }

  TarWriter& w_;
  std::set<std::string> skip_;
  bool know_upper_ = false, dev_trick_ = false;
  dev_t upper_dev_ = 0, lower_dev_ = 0;
  RootChangesStats& stats_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
};

// "/proc" -> "proc"; paths not below "/" (or "/" itself) -> "".
std::string Relative(const std::string& p) {
  size_t i = 0;
  while (i < p.size() && p[i] == '/') ++i;
  std::string r = p.substr(i);
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r;
}

// mountinfo escapes ' ', '\t', '\n' and '\\' as octal (\040).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t j) { return s[j] >= '0' && s[j] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// ---------------------------------------------------------------- applying

StatusOr<uint64_t> ParseOctal(const char* f, size_t width) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < width && (f[i] == ' ' || f[i] == '\0')) ++i;
  for (; i < width && f[i] >= '0' && f[i] <= '7'; ++i) v = (v << 3) | static_cast<uint64_t>(f[i] - '0');
  for (; i < width; ++i) {
    if (f[i] != ' ' && f[i] != '\0') return InvalidArgument("not an octal number in a tar header");
  }
  return v;
}

std::string Field(const char* f, size_t width) { return std::string(f, strnlen(f, width)); }

// "a/b/c" -> {"a","b","c"}; empty, "." or ".." components refused.
StatusOr<std::vector<std::string>> Components(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream ss(path);
  std::string c;
  while (std::getline(ss, c, '/')) {
    if (c.empty()) continue;
    if (c == "." || c == "..") return InvalidArgument("'" + path + "' has a . or .. component");
    out.push_back(c);
  }
  if (out.empty()) return InvalidArgument("an empty path");
  return out;
}

// Removes `name` in `dirfd`, a directory with everything in it; no link
// followed. Gone already is fine.
Status RemoveAt(int dirfd, const std::string& name, int depth = 0) {
  if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return OkStatus();
  if (errno != EISDIR && errno != EPERM) return ErrnoError("unlink " + name);
  if (depth >= kMaxDepth) return FailedPrecondition(name + ": more than " + std::to_string(kMaxDepth) + " directories deep");
  UniqueFd d(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) return ErrnoError("open " + name);
  ASSIGN_OR_RETURN(auto names, Names(d.get()));
  for (const auto& n : names) RETURN_IF_ERROR(RemoveAt(d.get(), n, depth + 1));
  if (::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) return ErrnoError("rmdir " + name);
  return OkStatus();
}

}  // namespace

Status WriteRootChanges(const std::string& root, const std::string& base, const std::vector<std::string>& skip,
                        int out, RootChangesStats* stats) {
  RootChangesStats local;
  RootChangesStats& s = stats ? *stats : local;
  UniqueFd rfd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rfd) return ErrnoError("open " + root);
  UniqueFd bfd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!bfd) return ErrnoError("open " + base);
  std::set<std::string> skipped;
  for (const auto& p : skip) {
    if (std::string r = Relative(p); !r.empty()) skipped.insert(r);
  }
  TarWriter w(out);
  Walker walker(w, std::move(skipped), s);
  walker.ProbeUpperDevice(rfd.get());
  RETURN_IF_ERROR(walker.Dir(rfd.get(), bfd.get(), ""));
  return w.End();
}

std::vector<std::string> MountPointsBelowRoot() {
  std::vector<std::string> out = {kRootBaseMount};
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    // id parent major:minor root mount-point ...
    std::stringstream ss(line);
    std::string id, parent, dev, mroot, point;
    if (!(ss >> id >> parent >> dev >> mroot >> point)) continue;
    point = Unescape(point);
    if (point != "/" && !point.empty() && point[0] == '/') out.push_back(point);
  }
  return out;
}

struct RootChangesImporter::State {
  std::string root;
  UniqueFd root_fd;
  RootChangesStats stats;
  std::string header;  // a header block being gathered
  int zero_blocks = 0;
  bool ended = false;
  // The entry whose data is being read.
  uint64_t data_left = 0;
  uint64_t pad_left = 0;
  char type = 0;
  std::string pax;  // an 'x' or 'g' header's data being gathered
  UniqueFd file;    // a regular file being written; none: data skipped
  struct stat meta = {};
  // Overrides from the last 'x' header, for the next entry.
  std::map<std::string, std::string> pending;
  // Directories made or changed, with their mtimes: set at Finish.
  std::vector<std::pair<std::string, struct timespec>> dir_times;

  void Note(const std::string& path, const Status& why) {
    ++stats.skipped;
    if (stats.first_error.empty()) stats.first_error = "/" + path + ": " + why.message();
  }

  // The directory holding the last component of `parts`, entered without
  // following links; made (0755) where missing when `create`.
  StatusOr<UniqueFd> Parent(const std::vector<std::string>& parts, bool create) {
    UniqueFd cur(::dup(root_fd.get()));
    if (!cur) return ErrnoError("dup");
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int next = ::openat(cur.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next < 0 && errno == ENOENT && create) {
        if (::mkdirat(cur.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir");
        next = ::openat(cur.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (next < 0) return ErrnoError("enter " + parts[i]);
      cur.Reset(next);
    }
    return cur;
  }

  Status Owner(int dirfd, const std::string& name, const struct stat& m, int flags) {
    if (::fchownat(dirfd, name.c_str(), m.st_uid, m.st_gid, flags) != 0) return ErrnoError("chown");
    return OkStatus();
  }

  // Applies the entry whose header is in `h` (its data, if any, follows).
  Status Begin(const char* h) {
    ASSIGN_OR_RETURN(uint64_t size, ParseOctal(h + 124, 12));
    ASSIGN_OR_RETURN(uint64_t mode, ParseOctal(h + 100, 8));
    ASSIGN_OR_RETURN(uint64_t uid, ParseOctal(h + 108, 8));
    ASSIGN_OR_RETURN(uint64_t gid, ParseOctal(h + 116, 8));
    ASSIGN_OR_RETURN(uint64_t mtime, ParseOctal(h + 136, 12));
    ASSIGN_OR_RETURN(uint64_t devmajor, ParseOctal(h + 329, 8));
    ASSIGN_OR_RETURN(uint64_t devminor, ParseOctal(h + 337, 8));
    type = h[156];
    if (type == 'x' || type == 'g') {
      if (size > kMaxPaxHeader) return InvalidArgument("a pax header of " + std::to_string(size) + " bytes");
      pax.clear();
      data_left = size;
      pad_left = (kBlock - size % kBlock) % kBlock;
      return OkStatus();
    }
    std::string path = Field(h, 100);
    if (std::string prefix = Field(h + 345, 155); !prefix.empty()) path = prefix + "/" + path;
    std::string link = Field(h + 157, 100);
    struct timespec mt = {static_cast<time_t>(mtime), 0};
    bool deleted = false;
    for (const auto& [k, v] : pending) {
      try {
        if (k == "path") path = v;
        else if (k == "linkpath") link = v;
        else if (k == "size") size = std::stoull(v);
        else if (k == "uid") uid = std::stoull(v);
        else if (k == "gid") gid = std::stoull(v);
        else if (k == kDeletedKey) deleted = v == "1";
        else if (k == "mtime") {
          size_t dot = v.find('.');
          mt.tv_sec = static_cast<time_t>(std::stoll(v.substr(0, dot)));
          if (dot != std::string::npos) {
            std::string ns = (v.substr(dot + 1) + "000000000").substr(0, 9);
            mt.tv_nsec = std::stol(ns);
          }
        }
      } catch (const std::exception&) {
        return InvalidArgument("a malformed pax record " + k);
      }
    }
    pending.clear();
    if (type != '0' && type != '\0' && type != '1' && type != '2' && type != '3' && type != '4' && type != '5' &&
        type != '6')
      return InvalidArgument(std::string("tar entry type '") + type + "' is not one this archive has");
    data_left = (type == '0' || type == '\0') ? size : 0;
    pad_left = (kBlock - data_left % kBlock) % kBlock;
    file.Reset();
    meta = {};
    meta.st_mode = static_cast<mode_t>(mode & 07777);
    meta.st_uid = static_cast<uid_t>(uid);
    meta.st_gid = static_cast<gid_t>(gid);
    meta.st_mtim = mt;
    ++stats.entries;
    Status st = Apply(path, link, deleted, makedev(devmajor, devminor));
    if (!st.ok()) Note(path, st);
    return OkStatus();
  }

  Status Apply(const std::string& path, const std::string& link, bool deleted, dev_t rdev) {
    ASSIGN_OR_RETURN(auto parts, Components(path));
    ASSIGN_OR_RETURN(UniqueFd dir, Parent(parts, /*create=*/true));
    const std::string& name = parts.back();
    const struct timespec times[2] = {meta.st_mtim, meta.st_mtim};
    if (deleted) {
      ++stats.deleted;
      return RemoveAt(dir.get(), name);
    }
    struct stat old;
    const bool exists = ::fstatat(dir.get(), name.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0;
    switch (type) {
      case '5': {
        if (exists && !S_ISDIR(old.st_mode)) RETURN_IF_ERROR(RemoveAt(dir.get(), name));
        if ((!exists || !S_ISDIR(old.st_mode)) && ::mkdirat(dir.get(), name.c_str(), 0700) != 0)
          return ErrnoError("mkdir");
        RETURN_IF_ERROR(Owner(dir.get(), name, meta, AT_SYMLINK_NOFOLLOW));
        if (::fchmodat(dir.get(), name.c_str(), meta.st_mode, 0) != 0) return ErrnoError("chmod");
        dir_times.emplace_back(path, meta.st_mtim);
        return OkStatus();
      }
      case '0':
      case '\0': {
        if (exists) RETURN_IF_ERROR(RemoveAt(dir.get(), name));
        file.Reset(::openat(dir.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file) return ErrnoError("create");
        if (data_left == 0) return FinishFile();
        return OkStatus();
      }
      case '1': {
        ASSIGN_OR_RETURN(auto tparts, Components(link));
        ASSIGN_OR_RETURN(UniqueFd tdir, Parent(tparts, /*create=*/false));
        if (exists) RETURN_IF_ERROR(RemoveAt(dir.get(), name));
        if (::linkat(tdir.get(), tparts.back().c_str(), dir.get(), name.c_str(), 0) != 0) return ErrnoError("link");
        return OkStatus();
      }
      case '2': {
        if (exists) RETURN_IF_ERROR(RemoveAt(dir.get(), name));
        if (::symlinkat(link.c_str(), dir.get(), name.c_str()) != 0) return ErrnoError("symlink");
        RETURN_IF_ERROR(Owner(dir.get(), name, meta, AT_SYMLINK_NOFOLLOW));
        if (::utimensat(dir.get(), name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("utimensat");
        return OkStatus();
      }
      default: {  // '3', '4', '6'
        if (exists) RETURN_IF_ERROR(RemoveAt(dir.get(), name));
        mode_t kind = type == '3' ? S_IFCHR : type == '4' ? S_IFBLK : S_IFIFO;
        if (::mknodat(dir.get(), name.c_str(), kind | 0600, type == '6' ? 0 : rdev) != 0) return ErrnoError("mknod");
        RETURN_IF_ERROR(Owner(dir.get(), name, meta, AT_SYMLINK_NOFOLLOW));
        if (::fchmodat(dir.get(), name.c_str(), meta.st_mode, 0) != 0) return ErrnoError("chmod");
        if (::utimensat(dir.get(), name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) return ErrnoError("utimensat");
        return OkStatus();
      }
    }
  }

  // Owner before mode (a chown clears set-id bits), times last.
  Status FinishFile() {
    UniqueFd f = std::move(file);
    if (::fchown(f.get(), meta.st_uid, meta.st_gid) != 0) return ErrnoError("chown");
    if (::fchmod(f.get(), meta.st_mode) != 0) return ErrnoError("chmod");
    const struct timespec times[2] = {meta.st_mtim, meta.st_mtim};
    if (::futimens(f.get(), times) != 0) return ErrnoError("utimensat");
    return OkStatus();
  }

  void ParsePax() {
    // Records "<len> <key>=<value>\n"; a malformed one ends the parse (the
    // entry then keeps its ustar fields).
    size_t at = 0;
    while (at < pax.size()) {
      size_t sp = pax.find(' ', at);
      if (sp == std::string::npos) return;
      size_t len = 0;
      try {
        len = std::stoul(pax.substr(at, sp - at));
      } catch (const std::exception&) {
        return;
      }
      if (len <= sp - at + 1 || at + len > pax.size()) return;
      std::string rec = pax.substr(sp + 1, at + len - sp - 2);  // without the '\n'
      size_t eq = rec.find('=');
      if (eq != std::string::npos) pending[rec.substr(0, eq)] = rec.substr(eq + 1);
      at += len;
    }
  }
};

RootChangesImporter::RootChangesImporter(std::string root) : s_(std::make_unique<State>()) {
  s_->root = std::move(root);
  s_->root_fd.Reset(::open(s_->root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

RootChangesImporter::~RootChangesImporter() = default;

const RootChangesStats& RootChangesImporter::stats() const { return s_->stats; }

Status RootChangesImporter::Feed(std::string_view bytes) {
  State& s = *s_;
  if (!s.root_fd) return ErrnoError("open " + s.root);
  while (!bytes.empty()) {
    if (s.ended) return OkStatus();  // what follows the end of the archive (its padding) is not read
    if (s.data_left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(s.data_left, bytes.size()));
      std::string_view d = bytes.substr(0, n);
      if (s.type == 'x' || s.type == 'g') {
        s.pax.append(d);
      } else if (s.file) {
        if (Status w = airlock::WriteAll(s.file.get(), d, "a file"); !w.ok()) {
          s.Note("(a file)", w);
          s.file.Reset();
        }
        s.stats.bytes += n;
      }
      s.data_left -= n;
      bytes.remove_prefix(n);
      if (s.data_left == 0) {
        if (s.type == 'x') s.ParsePax();
        if (s.file) {
          if (Status st = s.FinishFile(); !st.ok()) s.Note("(a file)", st);
        }
      }
      continue;
    }
    if (s.pad_left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(s.pad_left, bytes.size()));
      s.pad_left -= n;
      bytes.remove_prefix(n);
      continue;
    }
    size_t n = std::min(kBlock - s.header.size(), bytes.size());
    s.header.append(bytes.substr(0, n));
    bytes.remove_prefix(n);
    if (s.header.size() < kBlock) continue;
    std::string h = std::move(s.header);
    s.header.clear();
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == '\0'; })) {
      if (++s.zero_blocks == 2) s.ended = true;
      continue;
    }
    s.zero_blocks = 0;
    auto sum = ParseOctal(h.data() + 148, 8);
    unsigned computed = 0;
    for (size_t i = 0; i < kBlock; ++i) computed += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
    if (!sum.ok() || *sum != computed) return Status(StatusCode::kDataLoss, "not a tar archive (a header's checksum does not match)");
    RETURN_IF_ERROR(s.Begin(h.data()));
  }
  return OkStatus();
}

Status RootChangesImporter::Finish() {
  State& s = *s_;
  if (!s.ended) return Status(StatusCode::kDataLoss, "the archive ends early (no end-of-archive blocks)");
  // Deepest first: setting a directory's time after its parent's would
  // not move the parent's, but the order keeps it obvious.
  for (auto it = s.dir_times.rbegin(); it != s.dir_times.rend(); ++it) {
    auto parts = Components(it->first);
    if (!parts.ok()) continue;
    auto dir = s.Parent(*parts, /*create=*/false);
    const struct timespec times[2] = {it->second, it->second};
    if (!dir.ok() || ::utimensat(dir->get(), parts->back().c_str(), times, AT_SYMLINK_NOFOLLOW) != 0)
      s.Note(it->first, dir.ok() ? ErrnoError("utimensat") : dir.status());
  }
  return OkStatus();
}

}  // namespace airlock::agent
