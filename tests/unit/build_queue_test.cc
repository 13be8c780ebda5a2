// The build queue's fairness across teams (src/templates/build_queue.h,
// issue 32 item 12): one team's many builds never keep another team's
// single build waiting behind all of them.
#include "templates/build_queue.h"

#include <gtest/gtest.h>

namespace airlock::templates {
namespace {

TEST(BuildQueue, OneSlotIsSharedByTurnsNotFirstComeFirstServed) {
  BuildQueue q(1);
  for (const char* id : {"a1", "a2", "a3"}) q.Push(id, "team-a");
  q.Push("b1", "team-b");
  q.Push("a4", "team-a");
  q.Push("b2", "team-b");
  std::vector<std::string> order;
  while (auto next = q.Next()) {
    EXPECT_FALSE(q.Next().has_value()) << "one slot: one build at a time";
    order.push_back(*next);
    q.Done(*next);
  }
  // Before: a1 a2 a3 b1 a4 b2 (team-b waited for three of team-a's builds).
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "b1", "a2", "b2", "a3", "a4"}));
}

TEST(BuildQueue, NoTeamHoldsEverySlotAndAWaitingTeamGetsTheNextOne) {
  BuildQueue q(3);
  for (const char* id : {"a1", "a2", "a3", "a4"}) q.Push(id, "team-a");
  // team-a alone: two of the three slots, never the third.
  EXPECT_EQ(q.Next(), "a1");
  EXPECT_EQ(q.Next(), "a2");
  EXPECT_FALSE(q.Next().has_value());
  // team-b comes: the free slot is its at once; team-c waits for the next free one.
  q.Push("b1", "team-b");
  q.Push("c1", "team-c");
  EXPECT_EQ(q.Next(), "b1");
  EXPECT_FALSE(q.Next().has_value());
  q.Done("a1");
  EXPECT_EQ(q.Next(), "c1");  // fewest running (none) first, not team-a's a3 that came before
  q.Done("b1");
  EXPECT_EQ(q.Next(), "a3");  // team-a is back under its cap
  EXPECT_EQ(q.Waiting(), std::vector<std::string>{"a4"});
  q.RemoveIf([](const std::string& id) { return id == "a4"; });
  EXPECT_TRUE(q.Waiting().empty());
  q.Done("unknown");  // nothing
  q.Done("a2");
  q.Done("a3");
  q.Done("c1");
  q.Push("a5", "team-a");
  EXPECT_EQ(q.Next(), "a5");
}

}  // namespace
}  // namespace airlock::templates
