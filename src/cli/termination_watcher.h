// Ctrl-C handling for commands that own a sandbox: SIGINT, SIGTERM and SIGHUP
// are blocked in the calling thread (and so in every thread it starts later)
// and delivered to `on_signal(sig)` on a watcher thread, at most once, so the
// handler may do real work (destroy the sandbox) instead of async-signal-safe
// work only. Construct it before starting other threads.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace airlock::cli {

class TerminationWatcher {
 public:
  explicit TerminationWatcher(std::function<void(int sig)> on_signal);
  ~TerminationWatcher();  // stops watching (joins the thread)
  TerminationWatcher(const TerminationWatcher&) = delete;
  TerminationWatcher& operator=(const TerminationWatcher&) = delete;

  // The signal received, or 0.
  int signal() const { return signal_.load(); }

 private:
  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::thread thread_;
};

}  // namespace airlock::cli
