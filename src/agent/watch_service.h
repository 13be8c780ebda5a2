// filesystem.Filesystem/WatchDir (server stream) and the polled
// CreateWatcher / GetWatcherEvents / RemoveWatcher (spec §3.3); the
// watching itself is dir_watcher.h.
//
// Limits per agent (= per sandbox): kMaxWatchers live watchers (streams
// and polled ones together) and WatchBudget::max inotify watches (one per
// watched directory); past them a new watch gets resource_exhausted with
// the numbers. A stream ends (end-of-stream envelope) when its client
// goes away, when its Connect-Timeout-Ms deadline passes
// (deadline_exceeded, as connect-go), or when the watch fails
// (resource_exhausted on overflow); keepalive events are sent after
// Keepalive-Ping-Interval seconds of silence. A polled watcher lives until
// RemoveWatcher; GetWatcherEvents returns what is queued (at most
// kMaxEventsPerPoll) and, once the queue is empty, the error that ended it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/dir_watcher.h"
#include "http/conn_fwd.h"

namespace airlock::agent {

class Agent;

class WatchRegistry {
 public:
  static constexpr size_t kMaxWatchers = 64;
  static constexpr size_t kMaxEventsPerPoll = 4096;

  WatchBudget& budget() { return budget_; }
  // resource_exhausted when kMaxWatchers are live.
  Status Reserve();
  void Release() {
    if (active_ > 0) --active_;
  }
  size_t active() const { return active_; }
  std::map<std::string, std::shared_ptr<DirWatcher>>& polled() { return polled_; }

 private:
  WatchBudget budget_;
  size_t active_ = 0;
  std::map<std::string, std::shared_ptr<DirWatcher>> polled_;
};

// Handles WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher;
// false for any other method.
bool HandleWatchRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method);

}  // namespace airlock::agent
