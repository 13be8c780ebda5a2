// Ctrl-C handling for commands that own a sandbox: SIGINT, SIGTERM and SIGHUP
// are blocked in the calling thread (and so in every thread it starts later)
// and delivered to `on_signal(sig)` on a watcher thread, at most once, so the
// handler may do real work (destroy the sandbox) instead of async-signal-safe
// work only. Call BlockTerminationSignals() before anything starts a thread
// (Manager::Open does: the reaper, the egress host-address refresh), else a
// signal may land on such a thread and kill the process with nothing cleaned.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace airlock::cli {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread, and so in every
// thread it starts afterwards; a signal that arrives before a watcher exists
// stays pending and is delivered to the watcher.
void BlockTerminationSignals();

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
