#include "mcp/call_queue.h"

namespace airlock::mcp {

Status FairCallQueue::Check(size_t threads, size_t per_team) {
  if (threads < 3) return InvalidArgument("MCP tool threads: " + std::to_string(threads) + " (at least 3)");
  if (per_team == 0) per_team = DefaultPerTeam(threads);
  if (2 * per_team >= threads)
    return InvalidArgument("MCP calls per team: " + std::to_string(per_team) + " is not below half of the " +
                           std::to_string(threads) + " tool threads");
  return OkStatus();
}

StatusOr<std::shared_ptr<FairCallQueue>> FairCallQueue::Create(size_t threads, size_t per_team, Launch launch) {
  RETURN_IF_ERROR(Check(threads, per_team));
  if (per_team == 0) per_team = DefaultPerTeam(threads);
  return std::shared_ptr<FairCallQueue>(new FairCallQueue(threads, per_team, std::move(launch)));
}

Status FairCallQueue::Submit(const std::string& team, Task task) {
  return Submit(team, FinishingTask([task = std::move(task)](const std::function<void()>&) { task(); }));
}

Status FairCallQueue::Submit(const std::string& team, FinishingTask task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Team& t = teams_[team];
    if (t.running + t.waiting.size() >= per_team_) {
      if (t.running == 0 && t.waiting.empty()) teams_.erase(team);
      return ResourceExhausted("too many MCP calls in flight for this team (" + std::to_string(per_team_) +
                               "); retry when one ends");
    }
    if (running_ >= threads_) {
      t.waiting.push_back(std::move(task));
      if (t.waiting.size() == 1) turns_.push_back(team);
      return OkStatus();
    }
    ++running_;
    ++t.running;
  }
  launch_(Wrap(team, std::move(task)));
  return OkStatus();
}

FairCallQueue::Task FairCallQueue::Wrap(const std::string& team, FinishingTask task) {
  return [self = shared_from_this(), team, task = std::move(task)] {
    bool finished = false;  // this thread only
    std::function<void()> finish = [&] {
      if (finished) return;
      finished = true;
      self->Finished(team);
    };
    struct Done {
      const std::function<void()>& finish;
      ~Done() { finish(); }
    } done{finish};
    task(finish);
  };
}

void FairCallQueue::Finished(const std::string& team) {
  std::string next;
  FinishingTask task;
  {
    std::lock_guard<std::mutex> l(mu_);
    --running_;
    if (auto it = teams_.find(team); it != teams_.end()) {
      --it->second.running;
      if (it->second.running == 0 && it->second.waiting.empty()) teams_.erase(it);
    }
    if (turns_.empty()) return;
    next = std::move(turns_.front());
    turns_.pop_front();
    Team& t = teams_[next];
    task = std::move(t.waiting.front());
    t.waiting.pop_front();
    if (!t.waiting.empty()) turns_.push_back(next);  // its next call waits for its next turn
    ++t.running;
    ++running_;
  }
  launch_(Wrap(next, std::move(task)));
}

size_t FairCallQueue::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

size_t FairCallQueue::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [_, t] : teams_) n += t.waiting.size();
  return n;
}

}  // namespace airlock::mcp
