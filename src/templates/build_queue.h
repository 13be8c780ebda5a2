// The template builds waiting for a build slot (templates/builder.h),
// queued fairly per team (issue 32): first come, first served across all
// teams let one team hold every slot for --build-timeout while the others
// waited behind its whole queue.
//
// The rules:
// - the next build goes to the waiting team with the fewest builds
//   running, ties to the team served least recently (round robin);
//   within one team, its builds start in the order they came;
// - with more than one slot, no team holds every slot: at most
//   slots - 1 each, so a team with nothing running never waits behind the
//   builds of a single other team. With one slot that slot is shared by
//   turns (each build still runs to its end or its timeout).
//
// Not thread-safe: the Builder calls it under its own mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace airlock::templates {

class BuildQueue {
 public:
  explicit BuildQueue(int slots) : slots_(slots < 1 ? 1 : slots) {}

  void Push(const std::string& build_id, const std::string& team);
  // The build to start now (counted as running until Done), or nullopt:
  // nothing waits, every slot is busy, or every waiting team is at its cap.
  std::optional<std::string> Next();
  // A build Next() gave has ended (built, failed or canceled).
  void Done(const std::string& build_id);
  // The waiting builds, in arrival order.
  std::vector<std::string> Waiting() const;
  // Drops the waiting builds `drop` says yes to.
  void RemoveIf(const std::function<bool(const std::string& build_id)>& drop);
  int per_team_cap() const { return slots_ > 1 ? slots_ - 1 : 1; }

 private:
  struct Entry {
    std::string build_id, team;
  };
  int slots_;
  int running_total_ = 0;
  std::deque<Entry> waiting_;
  std::map<std::string, std::string> running_;   // build id -> team
  std::map<std::string, int> running_per_team_;  // only teams with builds running
  std::map<std::string, uint64_t> last_served_;  // team -> turn it last got a slot
  uint64_t turn_ = 0;
};

}  // namespace airlock::templates
