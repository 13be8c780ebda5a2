// The reaper's decisions by time (core/reaper.h): the lifetime cap per team
// (serve --max-lifetime, --team-max-lifetime) against the TTL, on a
// Sandbox::Clock built by hand (no Manager, no VMM).
#include <gtest/gtest.h>

#include "core/reaper.h"

namespace airlock {
namespace {

constexpr int64_t kCreated = 1'700'000'000'000;  // Unix ms
constexpr int64_t kHour = 3600 * 1000;

Sandbox::Clock Running(const std::string& team, int64_t ends_at_ms) {
  Sandbox::Clock c;
  c.state = SandboxState::kRunning;
  c.created_at_ms = kCreated;
  c.running_since_ms = kCreated;
  c.ends_at_ms = ends_at_ms;
  c.owner_team = team;
  return c;
}

LifetimeCaps Caps() {
  LifetimeCaps caps;
  caps.default_s = 3600;              // --max-lifetime 3600
  caps.per_team["short"] = 60;        // --team-max-lifetime short=60
  caps.per_team["long"] = 86400 * 3;  // a team whose sandboxes may live for days
  caps.per_team["free"] = 0;          // no cap for this team
  return caps;
}

TEST(LifetimeCapsTest, ATeamOverridesTheDefaultEitherWay) {
  const LifetimeCaps caps = Caps();
  EXPECT_EQ(caps.For("other"), 3600);
  EXPECT_EQ(caps.For(""), 3600);  // a row from before tenancy
  EXPECT_EQ(caps.For("short"), 60);
  EXPECT_EQ(caps.For("long"), 86400 * 3);
  EXPECT_EQ(caps.For("free"), 0);
  EXPECT_EQ(caps.EndMs("short", kCreated), kCreated + 60 * 1000);
  EXPECT_EQ(caps.EndMs("free", kCreated), 0);
  EXPECT_EQ(caps.EndMs("other", 0), 0);  // not created yet
  EXPECT_EQ(LifetimeCaps{}.For("any"), 0);
}

TEST(LifetimeCapsTest, LongestIsUnboundedWhenAnyTeamIsUncapped) {
  LifetimeCaps caps = Caps();
  EXPECT_EQ(caps.Longest(), 0);  // "free" has none
  caps.per_team.erase("free");
  EXPECT_EQ(caps.Longest(), 86400 * 3);
  caps.per_team.clear();
  EXPECT_EQ(caps.Longest(), 3600);
  caps.default_s = 0;  // teams not listed have none
  caps.per_team["short"] = 60;
  EXPECT_EQ(caps.Longest(), 0);
}

TEST(ReaperDecisionTest, EachTeamMeetsItsOwnCap) {
  const LifetimeCaps caps = Caps();
  const int64_t far_ttl = kCreated + 30 * 24 * kHour;
  const int64_t at = kCreated + 61 * 1000;  // 61 s after create
  EXPECT_EQ(DecideByTime(Running("short", far_ttl), caps, at), TimeVerdict::kLifetimeCap);
  EXPECT_EQ(DecideByTime(Running("other", far_ttl), caps, at), TimeVerdict::kKeep);
  EXPECT_EQ(DecideByTime(Running("other", far_ttl), caps, kCreated + kHour - 1), TimeVerdict::kKeep);
  EXPECT_EQ(DecideByTime(Running("other", far_ttl), caps, kCreated + kHour), TimeVerdict::kLifetimeCap);
  // A longer team cap outlives the default.
  EXPECT_EQ(DecideByTime(Running("long", far_ttl), caps, kCreated + 2 * 24 * kHour), TimeVerdict::kKeep);
  EXPECT_EQ(DecideByTime(Running("long", far_ttl), caps, kCreated + 3 * 24 * kHour), TimeVerdict::kLifetimeCap);
  // A team with 0 runs as long as its TTL says.
  EXPECT_EQ(DecideByTime(Running("free", far_ttl), caps, far_ttl - 1), TimeVerdict::kKeep);
  EXPECT_EQ(DecideByTime(Running("free", far_ttl), caps, far_ttl), TimeVerdict::kTtlExpired);
}

TEST(ReaperDecisionTest, AnExtendedTtlNeverOutlivesTheCap) {
  const LifetimeCaps caps = Caps();
  // setTimeout / refreshes moved the TTL a day past the team's 60 s cap:
  // the cap still ends it, as a cap (not a TTL: no autoPause).
  Sandbox::Clock c = Running("short", kCreated + 24 * kHour);
  c.auto_pause = true;
  EXPECT_EQ(DecideByTime(c, caps, kCreated + 60 * 1000), TimeVerdict::kLifetimeCap);
  // A TTL that ends before the cap still ends it first (autoPause applies).
  c.ends_at_ms = kCreated + 30 * 1000;
  EXPECT_EQ(DecideByTime(c, caps, kCreated + 30 * 1000), TimeVerdict::kTtlExpired);
  // Both passed between two ticks: the earlier one decides.
  EXPECT_EQ(DecideByTime(c, caps, kCreated + 90 * 1000), TimeVerdict::kTtlExpired);
  c.ends_at_ms = kCreated + 61 * 1000;
  EXPECT_EQ(DecideByTime(c, caps, kCreated + 90 * 1000), TimeVerdict::kLifetimeCap);
}

TEST(ReaperDecisionTest, OnlyARunningSandboxsClockRuns) {
  const LifetimeCaps caps = Caps();
  const int64_t late = kCreated + 30 * 24 * kHour;
  for (SandboxState s : {SandboxState::kCreating, SandboxState::kPausing, SandboxState::kResuming,
                         SandboxState::kRollingBack, SandboxState::kKilling}) {
    Sandbox::Clock c = Running("short", kCreated + 1000);
    c.state = s;
    EXPECT_EQ(DecideByTime(c, caps, late), TimeVerdict::kKeep) << SandboxStateName(s);
  }
  // Paused: no TTL, but the lifetime cap still counts from the create.
  Sandbox::Clock paused = Running("short", kCreated + 1000);
  paused.state = SandboxState::kPaused;
  EXPECT_EQ(DecideByTime(paused, caps, kCreated + 2000), TimeVerdict::kKeep);
  EXPECT_EQ(DecideByTime(paused, caps, late), TimeVerdict::kLifetimeCap);
  paused.owner_team = "free";
  EXPECT_EQ(DecideByTime(paused, caps, late), TimeVerdict::kKeep);
  // No cap and no TTL: kept for ever.
  EXPECT_EQ(DecideByTime(Running("x", 0), LifetimeCaps{}, late), TimeVerdict::kKeep);
}

}  // namespace
}  // namespace airlock
