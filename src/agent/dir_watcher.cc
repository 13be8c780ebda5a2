#include "agent/dir_watcher.h"

#include <fcntl.h>

#include <dirent.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/fs_util.h"
#include "common/fd.h"
#include "agent/log.h"

namespace airlock::agent {
namespace {

constexpr uint32_t kEventMask = IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_DELETE_SELF | IN_MOVED_FROM |
                                IN_MOVED_TO | IN_MOVE_SELF;
constexpr int kReadsPerWakeup = 8;
constexpr size_t kReadBuffer = 64 * 1024;

Status OverflowError() {
  return ResourceExhausted(
      "the inotify event queue overflowed (fs.inotify.max_queued_events): events were lost and the watch has "
      "ended; start a new watch and list the directory again");
}

}  // namespace

std::vector<envd::EventType> EventTypesForMask(uint32_t mask) {
  std::vector<envd::EventType> out;
  if (mask & (IN_CREATE | IN_MOVED_TO)) out.push_back(envd::EventType::kCreate);
  if (mask & (IN_MOVED_FROM | IN_MOVE_SELF)) out.push_back(envd::EventType::kRename);
  if (mask & IN_ATTRIB) out.push_back(envd::EventType::kChmod);
  if (mask & IN_MODIFY) out.push_back(envd::EventType::kWrite);
  if (mask & (IN_DELETE | IN_DELETE_SELF)) out.push_back(envd::EventType::kRemove);
  return out;
}

std::string JoinRelative(std::string_view dir, std::string_view name) {
  if (dir.empty() || dir == ".") return std::string(name);
  if (name.empty()) return std::string(dir);
  std::string out(dir);
  out += '/';
  out += name;
  return out;
}

std::optional<std::string> UploadTempTarget(std::string_view name) {
  constexpr std::string_view kMarker = ".airlock-upload-";
  constexpr size_t kHex = 16;
  if (name.size() < 1 + 1 + kMarker.size() + kHex || name[0] != '.') return std::nullopt;
  size_t marker = name.size() - kHex - kMarker.size();
  if (name.substr(marker, kMarker.size()) != kMarker) return std::nullopt;
  for (char c : name.substr(marker + kMarker.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  if (marker <= 1) return std::nullopt;
  return std::string(name.substr(1, marker - 1));
}

DirWatcher::DirWatcher(boost::asio::io_context& io, Options options, WatchBudget* budget, UserDb users,
                       AsUserFn as_user)
    : sd_(io),
      options_(std::move(options)),
      budget_(budget),
      users_(std::move(users)),
      as_user_(std::move(as_user)),
      buf_(kReadBuffer) {}

DirWatcher::~DirWatcher() { Close(); }

StatusOr<std::shared_ptr<DirWatcher>> DirWatcher::Create(boost::asio::io_context& io, Options options,
                                                         WatchBudget* budget, UserDb users, AsUserFn as_user) {
  std::shared_ptr<DirWatcher> w(new DirWatcher(io, std::move(options), budget, std::move(users), std::move(as_user)));
  int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE) {
      return ResourceExhausted("inotify_init1: too many inotify instances (fs.inotify.max_user_instances)");
    }
    return ErrnoError("inotify_init1");
  }
  w->sd_.assign(fd);
  const std::string& root = w->options_.root;
  Status st = w->as_user_([&]() -> Status {
    struct stat s;
    if (stat(root.c_str(), &s) != 0) {
      if (errno == ENOENT) return NotFound("path '" + root + "' does not exist");
      return ErrnoError("stat " + root);
    }
    if (!S_ISDIR(s.st_mode)) return InvalidArgument("path '" + root + "' is not a directory");
    return w->AddTree(".", false);
  });
  if (st.ok() && !w->error_.ok()) st = w->error_;
  if (!st.ok()) {
    w->Close();
    return st;
  }
  return w;
}

std::string DirWatcher::Absolute(const std::string& rel) const {
  if (rel == ".") return options_.root;
  if (options_.root == "/") return "/" + rel;
  return options_.root + "/" + rel;
}

Status DirWatcher::AddTree(const std::string& top, bool synthesize) {
  std::vector<std::string> stack{top};
  while (!stack.empty()) {
    std::string rel = std::move(stack.back());
    stack.pop_back();
    if (budget_->used >= budget_->max) {
      Status st = ResourceExhausted("too many watched directories: the agent watches at most " +
                                    std::to_string(budget_->max) + " directories in all");
      Fail(st);
      return st;
    }
    std::string abs = Absolute(rel);
    uint32_t mask = kEventMask | IN_ONLYDIR | (rel == "." ? 0 : IN_DONT_FOLLOW);
    // inotify_add_watch needs read access to the directory (inotify(7)).
    // Linux checks it; gVisor's Sentry does not, so the agent opens the
    // directory first, with the requesting user's credentials as the watch;
    // a recursive watch then reads its entries from this same open.
    UniqueFd dir(::open(abs.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (rel == "." ? 0 : O_NOFOLLOW)));
    int wd = dir ? inotify_add_watch(sd_.native_handle(), abs.c_str(), mask) : -1;
    if (wd < 0) {
      int err = errno;
      if (err == ENOSPC) {
        Status st = ResourceExhausted("inotify_add_watch " + abs + ": the kernel's watch limit is reached "
                                      "(fs.inotify.max_user_watches)");
        Fail(st);
        return st;
      }
      if (rel == ".") {
        if (err == EACCES || err == EPERM) return PermissionDenied("cannot watch '" + abs + "': permission denied");
        if (err == ENOENT) return NotFound("path '" + abs + "' does not exist");
        return ErrnoError("inotify_add_watch " + abs, err);
      }
      continue;  // gone, not a directory any more, or not readable by the user
    }
    if (watches_.count(wd)) continue;  // the same directory twice (a bind mount)
    watches_[wd] = rel;
    ++budget_->used;
    if (synthesize) scanned_[wd];
    if (!options_.recursive) continue;  // the root alone: nothing to read
    DIR* d = fdopendir(dir.get());
    if (!d) continue;
    (void)dir.Release();  // closedir closes it
    std::vector<std::pair<std::string, bool>> entries;
    while (dirent* ent = readdir(d)) {
      std::string n = ent->d_name;
      if (n == "." || n == "..") continue;
      bool is_dir = ent->d_type == DT_DIR;
      if (ent->d_type == DT_UNKNOWN) {
        struct stat s;
        is_dir = fstatat(dirfd(d), n.c_str(), &s, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(s.st_mode);
      }
      if (!synthesize && !is_dir) continue;  // only directories matter
      entries.emplace_back(std::move(n), is_dir);
      if (synthesize && queue_.size() + entries.size() > 2 * options_.max_queued) break;
    }
    closedir(d);
    std::sort(entries.begin(), entries.end());
    // Pushed in reverse so that the stack pops them in lexical order.
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->second && options_.recursive) stack.push_back(JoinRelative(rel, it->first));
    }
    if (synthesize) {
      for (const auto& [n, is_dir] : entries) {
        if (UploadTempTarget(n)) continue;
        if (queue_.size() >= 2 * options_.max_queued) {
          Status st = ResourceExhausted("a new directory below the watch holds more entries than the watch can "
                                        "queue (" + std::to_string(2 * options_.max_queued) + "); the watch has ended");
          Fail(st);
          return st;
        }
        Emit(JoinRelative(rel, n), envd::EventType::kCreate);
        scanned_[wd].insert(n);
      }
    }
  }
  return OkStatus();
}

void DirWatcher::RemoveWatchesUnder(const std::string& rel) {
  std::string prefix = rel + "/";
  for (auto it = watches_.begin(); it != watches_.end();) {
    if (it->second == rel || it->second.rfind(prefix, 0) == 0) {
      inotify_rm_watch(sd_.native_handle(), it->first);
      scanned_.erase(it->first);
      --budget_->used;
      it = watches_.erase(it);
    } else {
      ++it;
    }
  }
}

void DirWatcher::RenameWatches(const std::string& from, const std::string& to) {
  std::string prefix = from + "/";
  for (auto& [wd, rel] : watches_) {
    if (rel == from) rel = to;
    else if (rel.rfind(prefix, 0) == 0) rel = to + rel.substr(from.size());
  }
}

// A MOVED_FROM not followed by its MOVED_TO: moved out of the tree.
void DirWatcher::ResolvePendingMove() {
  if (!pending_move_) return;
  if (pending_move_->is_dir && options_.recursive) RemoveWatchesUnder(pending_move_->rel);
  pending_move_.reset();
}

void DirWatcher::Emit(const std::string& rel, envd::EventType type) {
  envd::FilesystemEvent e{rel, type, std::nullopt};
  if (options_.include_entry && type != envd::EventType::kRemove && type != envd::EventType::kRename) {
    auto entry = StatEntry(Absolute(rel), users_);
    if (entry.ok()) e.entry = std::move(*entry);
  }
  // As the kernel does: an event identical to the last one still queued
  // (e.g. a stream of writes to one file) is merged into it.
  if (!queue_.empty() && !e.entry && !queue_.back().entry && queue_.back().name == e.name &&
      queue_.back().type == e.type) {
    return;
  }
  queue_.push_back(std::move(e));
}

void DirWatcher::Fail(Status st) {
  if (!error_.ok()) return;
  error_ = std::move(st);
  LogDebug("watch of %s ended: %s", options_.root.c_str(), error_.ToString().c_str());
}

void DirWatcher::ProcessOne(int wd, uint32_t mask, uint32_t cookie, std::string name) {
  if (mask & IN_Q_OVERFLOW) return Fail(OverflowError());
  auto it = watches_.find(wd);
  if (it == watches_.end()) return;  // removed meanwhile
  const std::string dir = it->second;
  if (mask & IN_IGNORED) {  // the kernel dropped the watch (deleted, unmounted)
    scanned_.erase(wd);
    --budget_->used;
    watches_.erase(it);
    return;
  }
  if (mask & IN_UNMOUNT) return;
  if (pending_move_ && !((mask & IN_MOVED_TO) && cookie == pending_move_->cookie)) ResolvePendingMove();
  bool root = dir == ".";
  if (mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
    // A subdirectory's own deletion or move is reported by its parent.
    if (!root) return;
    if (mask & IN_MOVE_SELF) {
      Emit(".", envd::EventType::kRename);
      scanned_.clear();
      for (auto w = watches_.begin(); w != watches_.end(); w = watches_.erase(w)) {
        inotify_rm_watch(sd_.native_handle(), w->first);
        --budget_->used;
      }
      return;
    }
    Emit(".", envd::EventType::kRemove);
    return;
  }
  std::string rel = JoinRelative(dir, name);
  bool is_dir = mask & IN_ISDIR;
  if (auto s = scanned_.find(wd); s != scanned_.end()) {
    if (s->second.erase(name) && (mask & (IN_CREATE | IN_MOVED_TO))) return;  // a scan reported it
  }
  if (mask & IN_MOVED_FROM) {
    pending_move_ = PendingMove{cookie, rel, is_dir, UploadTempTarget(name).has_value()};
    if (pending_move_->upload_temp) return;
  }
  if (mask & IN_MOVED_TO) {
    bool paired = pending_move_ && pending_move_->cookie == cookie;
    bool from_upload = paired && pending_move_->upload_temp;
    if (paired && is_dir && options_.recursive) RenameWatches(pending_move_->rel, rel);
    if (paired) pending_move_.reset();
    if (from_upload) {
      // What envd's upload shows (open O_CREAT, chown, write): CREATE,
      // CHMOD, then WRITE when there were bytes to write. The file is new
      // (renamed into place), so an overwrite also starts with CREATE.
      Emit(rel, envd::EventType::kCreate);
      Emit(rel, envd::EventType::kChmod);
      struct stat st;
      if (lstat(Absolute(rel).c_str(), &st) != 0 || st.st_size > 0) Emit(rel, envd::EventType::kWrite);
      return;
    }
    if (!paired && is_dir && options_.recursive) (void)AddTree(rel, false);
  }
  if (UploadTempTarget(name)) return;
  for (auto t : EventTypesForMask(mask)) Emit(rel, t);
  if (is_dir && options_.recursive) {
    if (mask & IN_CREATE) (void)AddTree(rel, true);
    if (mask & IN_DELETE) RemoveWatchesUnder(rel);
  }
}

bool DirWatcher::NeedsUser(const char* buf, size_t n) const {
  if (options_.include_entry) return true;
  if (!options_.recursive) return false;
  for (size_t off = 0; off + sizeof(inotify_event) <= n;) {
    auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
    if ((ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO))) return true;
    off += sizeof(inotify_event) + ev->len;
  }
  return false;
}

void DirWatcher::Process(const char* buf, size_t n) {
  for (size_t off = 0; off + sizeof(inotify_event) <= n && error_.ok();) {
    auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
    std::string name = ev->len ? std::string(ev->name, strnlen(ev->name, ev->len)) : std::string();
    ProcessOne(ev->wd, ev->mask, ev->cookie, std::move(name));
    off += sizeof(inotify_event) + ev->len;
  }
}

void DirWatcher::OnReadable() {
  if (closed_ || !error_.ok()) return;
  bool drained = false;
  for (int i = 0; i < kReadsPerWakeup && queue_.size() < options_.max_queued && error_.ok(); ++i) {
    ssize_t n = read(sd_.native_handle(), buf_.data(), buf_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      drained = true;
      break;
    }
    if (n <= 0) {
      Fail(n < 0 ? ErrnoError("read inotify") : Internal("read inotify: end of file"));
      break;
    }
    size_t len = static_cast<size_t>(n);
    if (NeedsUser(buf_.data(), len)) {
      Status st = as_user_([&]() -> Status {
        Process(buf_.data(), len);
        return OkStatus();
      });
      if (!st.ok()) Fail(st);
    } else {
      Process(buf_.data(), len);
    }
  }
  if (drained) {
    // Every event made before the scans above has been read by now.
    scanned_.clear();
    ResolvePendingMove();
  }
  if (on_ready_ && (!queue_.empty() || !error_.ok())) {
    auto keep = shared_from_this();
    auto fn = on_ready_;  // the callback may reset on_ready_
    fn();
  }
  Arm();
}

void DirWatcher::Arm() {
  if (closed_ || armed_ || paused_ || !error_.ok() || queue_.size() >= options_.max_queued) return;
  armed_ = true;
  sd_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                 [weak = weak_from_this()](boost::system::error_code ec) {
                   auto self = weak.lock();
                   if (!self) return;
                   self->armed_ = false;
                   if (ec) return;
                   self->OnReadable();
                 });
}

void DirWatcher::Resume() {
  paused_ = false;
  Arm();
}

std::vector<envd::FilesystemEvent> DirWatcher::Take(size_t max) {
  std::vector<envd::FilesystemEvent> out;
  while (!queue_.empty() && out.size() < max) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  Arm();
  return out;
}

void DirWatcher::Close() {
  if (closed_) return;
  closed_ = true;
  budget_->used -= std::min(budget_->used, watches_.size());
  watches_.clear();
  scanned_.clear();
  boost::system::error_code ec;
  sd_.close(ec);  // drops every watch; a pending wait ends with operation_aborted
}

}  // namespace airlock::agent
