// Directory watches for filesystem.Filesystem/WatchDir and the polled
// CreateWatcher / GetWatcherEvents / RemoveWatcher (spec §3.3), on inotify.
//
// Semantics follow envd (fsnotify, e2b-dev fork):
//   - inotify mask IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE |
//     IN_DELETE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_MOVE_SELF;
//   - CREATE ← IN_CREATE, IN_MOVED_TO; RENAME ← IN_MOVED_FROM, IN_MOVE_SELF;
//     CHMOD ← IN_ATTRIB; WRITE ← IN_MODIFY; REMOVE ← IN_DELETE,
//     IN_DELETE_SELF; one inotify event gives its types in that order
//     (create, rename, chmod, write, remove);
//   - names are relative to the watched directory ("sub/a.txt"; "." is the
//     directory itself, e.g. REMOVE "." when it is deleted);
//   - recursive: every directory below gets a watch (symlinks are not
//     followed); a directory created later gets one when its IN_CREATE is
//     read, and what it already holds by then (mkdir -p a/b/c; touch
//     a/b/c/f) is reported as CREATE events, each once (an inotify event
//     for a name the scan already reported is dropped); a directory renamed
//     inside the tree keeps its watches under the new name, one moved out
//     loses them, one moved in gets them (its contents are not reported).
//     A subdirectory the user may not read is not watched.
//   - the agent's own temporary upload files (".<name>.airlock-upload-<16
//     hex>", files_handler.cc) are hidden: the rename that publishes an
//     upload shows as CREATE <name> then WRITE <name>.
//
// Bounds (a flood must not grow the agent): reading the inotify fd pauses
// while `max_queued` events wait to be taken (or while the owner paused
// it); the kernel then queues up to fs.inotify.max_queued_events and
// reports IN_Q_OVERFLOW, which ends the watch with resource_exhausted
// after the events read before it. A scan of a new directory that would
// hold more than 2 × max_queued events ends the watch the same way. The
// number of inotify watches is capped per agent (WatchBudget): going past
// it is resource_exhausted at creation, or ends a running watch.
//
// Threading: everything runs on the agent's io_context thread. inotify_add_watch,
// readdir and stat run through `as_user` (RunAsUser, as_user.h) so the
// kernel checks the requesting user's rights.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/users.h"
#include "common/status.h"
#include "envd/messages.h"

namespace airlock::agent {

// Pure helpers (unit-tested).
std::vector<envd::EventType> EventTypesForMask(uint32_t mask);
// "." + "a" → "a"; "sub" + "a" → "sub/a".
std::string JoinRelative(std::string_view dir, std::string_view name);
// ".<name>.airlock-upload-<16 hex>" → "<name>"; nullopt for other names.
std::optional<std::string> UploadTempTarget(std::string_view name);

// Watches held by all watchers of one agent.
struct WatchBudget {
  size_t used = 0;
  size_t max = 8192;
};

class DirWatcher : public std::enable_shared_from_this<DirWatcher> {
 public:
  using AsUserFn = std::function<Status(const std::function<Status()>&)>;
  struct Options {
    std::string root;  // absolute path of an existing directory
    bool recursive = false;
    bool include_entry = false;
    size_t max_queued = 4096;
  };

  // Creates the inotify instance and the watches (the whole tree when
  // recursive). Errors: not_found (no such path), invalid_argument (not a
  // directory), permission_denied, resource_exhausted (inotify instances
  // or watches: the budget, fs.inotify.max_user_watches / _instances).
  static StatusOr<std::shared_ptr<DirWatcher>> Create(boost::asio::io_context& io, Options options,
                                                      WatchBudget* budget, UserDb users, AsUserFn as_user);
  ~DirWatcher();
  DirWatcher(const DirWatcher&) = delete;
  DirWatcher& operator=(const DirWatcher&) = delete;

  // Called on the io thread after events were queued or the watch failed.
  void SetOnReady(std::function<void()> fn) { on_ready_ = std::move(fn); }
  // Starts (or resumes) reading. Pause() stops reading until Resume().
  void Resume();
  void Pause() { paused_ = true; }
  // Takes up to `max` queued events, oldest first; reading resumes when
  // the queue drops below max_queued.
  std::vector<envd::FilesystemEvent> Take(size_t max = SIZE_MAX);
  size_t queued() const { return queue_.size(); }
  // OK while the watch runs; the reason once it has ended (set once).
  const Status& error() const { return error_; }
  size_t watch_count() const { return watches_.size(); }
  const std::string& root() const { return options_.root; }
  // Removes every watch and closes the inotify fd; idempotent.
  void Close();

 private:
  DirWatcher(boost::asio::io_context& io, Options options, WatchBudget* budget, UserDb users, AsUserFn as_user);
  void Arm();
  void OnReadable();
  void Process(const char* buf, size_t n);
  bool NeedsUser(const char* buf, size_t n) const;
  void ProcessOne(int wd, uint32_t mask, uint32_t cookie, std::string name);
  // Adds watches for `rel` and every directory below it (DFS, lexical).
  // synthesize: also queue CREATE for every entry found (a new directory).
  Status AddTree(const std::string& rel, bool synthesize);
  void RemoveWatchesUnder(const std::string& rel);
  void RenameWatches(const std::string& from, const std::string& to);
  void ResolvePendingMove();
  void Emit(const std::string& rel, envd::EventType type);
  void Fail(Status st);
  std::string Absolute(const std::string& rel) const;

  boost::asio::posix::stream_descriptor sd_;
  Options options_;
  WatchBudget* budget_;
  UserDb users_;
  AsUserFn as_user_;
  std::unordered_map<int, std::string> watches_;  // wd → relative path
  // Names a scan of a new directory (by its wd) reported, whose own
  // inotify event may still be queued; cleared when the queue is drained.
  std::unordered_map<int, std::set<std::string>> scanned_;
  struct PendingMove {
    uint32_t cookie;
    std::string rel;
    bool is_dir;
    bool upload_temp;
  };
  std::optional<PendingMove> pending_move_;
  std::deque<envd::FilesystemEvent> queue_;
  std::function<void()> on_ready_;
  Status error_;
  bool armed_ = false;
  bool paused_ = false;
  bool closed_ = false;
  std::vector<char> buf_;
};

}  // namespace airlock::agent
