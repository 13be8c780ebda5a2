#include <gtest/gtest.h>

#include <set>

#include "core/envd_client.h"
#include "core/manager.h"
#include "core/sandbox_state.h"

namespace airlock {
namespace {

using S = SandboxState;

TEST(SandboxStateTest, LegalTransitions) {
  EXPECT_TRUE(CheckTransition(S::kCreating, S::kRunning).ok());
  EXPECT_TRUE(CheckTransition(S::kCreating, S::kFailed).ok());
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kKilling).ok());
  EXPECT_TRUE(CheckTransition(S::kFailed, S::kKilling).ok());
  EXPECT_TRUE(CheckTransition(S::kKilling, S::kKilled).ok());
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kPausing).ok());
  EXPECT_TRUE(CheckTransition(S::kPaused, S::kResuming).ok());
  // Rollback (core/checkpoints.cc): back to running, or failed when the
  // restore failed after the old VMM was stopped.
  EXPECT_TRUE(CheckTransition(S::kRunning, S::kRollingBack).ok());
  EXPECT_TRUE(CheckTransition(S::kRollingBack, S::kRunning).ok());
  EXPECT_TRUE(CheckTransition(S::kRollingBack, S::kFailed).ok());
  EXPECT_TRUE(CheckTransition(S::kRollingBack, S::kKilling).ok());
  EXPECT_FALSE(CheckTransition(S::kPaused, S::kRollingBack).ok());
  EXPECT_FALSE(CheckTransition(S::kRollingBack, S::kPaused).ok());
}

TEST(SandboxStateTest, IllegalTransitionsNameBothStates) {
  Status s = CheckTransition(S::kKilled, S::kRunning);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("killed"), std::string::npos);
  EXPECT_NE(s.message().find("running"), std::string::npos);
  EXPECT_FALSE(CheckTransition(S::kCreating, S::kPaused).ok());
  EXPECT_FALSE(CheckTransition(S::kRunning, S::kCreating).ok());
  EXPECT_FALSE(CheckTransition(S::kKilling, S::kRunning).ok());
  EXPECT_FALSE(CheckTransition(S::kPaused, S::kRunning).ok());  // only through resuming
}

TEST(SandboxStateTest, EveryStateHasAName) {
  for (S s : {S::kCreating, S::kRunning, S::kPausing, S::kPaused, S::kResuming, S::kKilling, S::kKilled, S::kFailed,
              S::kRollingBack}) {
    EXPECT_NE(SandboxStateName(s), "unknown");
  }
}

TEST(SandboxOutcomeTest, EveryOutcomeHasItsOwnNameAndDescription) {
  using O = SandboxOutcome;
  std::set<std::string> names;
  for (O o : {O::kKilled, O::kTtlExpired, O::kLifetimeCap, O::kVmmExited, O::kCreateFailed, O::kAutoPauseFailed,
              O::kDaemonStopped, O::kRollbackFailed}) {
    EXPECT_NE(SandboxOutcomeName(o), "unknown");
    EXPECT_TRUE(names.insert(std::string(SandboxOutcomeName(o))).second) << SandboxOutcomeName(o);
    EXPECT_FALSE((SandboxEnd{o, "", 0}.Describe().empty()));
  }
  EXPECT_EQ((SandboxEnd{O::kTtlExpired, "", 0}.Describe()), "TTL expired");
  EXPECT_EQ((SandboxEnd{O::kVmmExited, "console: Kernel panic", 0}.Describe()), "vmm exited (console: Kernel panic)");
  EXPECT_EQ((SandboxEnd{O::kCreateFailed, "vmm: no such file", 0}.Describe()), "create failed: vmm: no such file");
}

TEST(SandboxIdTest, ShapeAndUniqueness) {
  std::string a = NewSandboxId(), b = NewSandboxId();
  EXPECT_EQ(a.size(), 20u);
  EXPECT_NE(a, b);
  for (char c : a) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) << a;
}

TEST(ExecResultTest, ShellCodeFollowsTheShellConvention) {
  ExecResult r;
  r.exited = true;
  r.exit_code = 3;
  r.status = "exit status 3";
  EXPECT_EQ(r.ShellCode(), 3);
  r = {};
  r.exit_code = -1;
  r.status = "signal: killed";
  EXPECT_EQ(r.ShellCode(), 137);
  r.status = "signal: terminated";
  EXPECT_EQ(r.ShellCode(), 143);
  r.status = "signal: interrupt";
  EXPECT_EQ(r.ShellCode(), 130);
  r.status = "signal: segmentation fault";
  EXPECT_EQ(r.ShellCode(), 139);
}

}  // namespace
}  // namespace airlock
