// FairCallQueue: admission and order of MCP tool calls on a fixed pool of
// threads (docs/mcp.md "Fairness between teams").
//
// Contract:
//   - at most `threads` calls run at once (one per pool thread);
//   - a team holds at most `per_team` calls, running and waiting together;
//     one more is refused at once (ResourceExhausted), never queued;
//   - `per_team` is below half of `threads`, so two teams together never
//     hold every thread;
//   - when every thread is busy, an admitted call waits; waiting teams take
//     turns (round robin, one call per turn, in the order they began to
//     wait), so one team's backlog never starves another's.
// The queue does not own threads: `launch` hands a ready task to the pool
// (asio::post in the daemon; a vector in tests, which run tasks one by one).
// `launch` is called without the queue's lock held, possibly from inside a
// task that just ended. Thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

namespace airlock::mcp {

class FairCallQueue : public std::enable_shared_from_this<FairCallQueue> {
 public:
  using Task = std::function<void()>;
  using Launch = std::function<void(Task)>;
  // A call that may give its place back before it returns: `finish` (once;
  // later calls do nothing) frees it at once, e.g. right before its answer
  // is sent, so that a client's next call, sent the moment it has the
  // answer, never finds this one still counted. Not called: freed on return.
  using FinishingTask = std::function<void(const std::function<void()>& finish)>;

  // The default cap for a pool of `threads`: the largest number below half.
  static size_t DefaultPerTeam(size_t threads) { return threads > 2 ? (threads - 1) / 2 : 1; }
  // InvalidArgument unless threads >= 3 and 1 <= per_team < threads / 2
  // (per_team 0: DefaultPerTeam(threads)).
  static StatusOr<std::shared_ptr<FairCallQueue>> Create(size_t threads, size_t per_team, Launch launch);
  // OK, or the InvalidArgument Create returns for these numbers.
  static Status Check(size_t threads, size_t per_team);

  // Runs `task` now (a thread is free) or when its team's turn comes;
  // ResourceExhausted when `team` already holds per_team() calls.
  Status Submit(const std::string& team, Task task);
  Status Submit(const std::string& team, FinishingTask task);

  size_t threads() const { return threads_; }
  size_t per_team() const { return per_team_; }
  size_t running() const;
  size_t waiting() const;

 private:
  FairCallQueue(size_t threads, size_t per_team, Launch launch)
      : threads_(threads), per_team_(per_team), launch_(std::move(launch)) {}
  // The task wrapped so that its end frees its thread for the next turn.
  Task Wrap(const std::string& team, FinishingTask task);
  void Finished(const std::string& team);

  struct Team {
    size_t running = 0;
    std::deque<FinishingTask> waiting;
  };
  const size_t threads_, per_team_;
  const Launch launch_;
  mutable std::mutex mu_;
  size_t running_ = 0;                 // guarded by mu_
  std::map<std::string, Team> teams_;  // teams holding calls (guarded by mu_)
  std::deque<std::string> turns_;      // teams with waiting calls, next first (guarded by mu_)
};

}  // namespace airlock::mcp
