#include "templates/build_queue.h"

#include <algorithm>
#include <tuple>

namespace airlock::templates {

void BuildQueue::Push(const std::string& build_id, const std::string& team) { waiting_.push_back({build_id, team}); }

std::optional<std::string> BuildQueue::Next() {
  if (running_total_ >= slots_) return std::nullopt;
  // The first waiting build of each team is its candidate; the best team
  // has the fewest running, then the oldest last turn (never served: 0).
  const Entry* best = nullptr;
  std::tuple<int, uint64_t> best_key{};
  for (const Entry& e : waiting_) {
    auto it = running_per_team_.find(e.team);
    const int running = it == running_per_team_.end() ? 0 : it->second;
    if (running >= per_team_cap()) continue;
    auto served = last_served_.find(e.team);
    std::tuple<int, uint64_t> key{running, served == last_served_.end() ? 0 : served->second};
    if (!best || key < best_key) best = &e, best_key = key;  // strict: a team's first build wins
  }
  if (!best) return std::nullopt;
  Entry chosen = *best;
  waiting_.erase(std::find_if(waiting_.begin(), waiting_.end(),
                              [&](const Entry& e) { return e.build_id == chosen.build_id; }));
  ++running_total_;
  ++running_per_team_[chosen.team];
  last_served_[chosen.team] = ++turn_;
  running_[chosen.build_id] = chosen.team;
  return chosen.build_id;
}

void BuildQueue::Done(const std::string& build_id) {
  auto it = running_.find(build_id);
  if (it == running_.end()) return;
  --running_total_;
  if (--running_per_team_[it->second] <= 0) running_per_team_.erase(it->second);
  running_.erase(it);
}

std::vector<std::string> BuildQueue::Waiting() const {
  std::vector<std::string> out;
  for (const Entry& e : waiting_) out.push_back(e.build_id);
  return out;
}

void BuildQueue::RemoveIf(const std::function<bool(const std::string& build_id)>& drop) {
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [&](const Entry& e) { return drop(e.build_id); }),
                 waiting_.end());
}

}  // namespace airlock::templates
