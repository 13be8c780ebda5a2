// What a guest user can do through the agent, in a real microVM (issue 11
// items 15 and 16): the files API acts with the requesting user's
// permissions, and a fork bomb stays inside its own command cgroup so the
// agent keeps answering and SIGKILL ends the whole tree.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "core/manager.h"
#include "tests/integration/harness.h"
#include "tests/integration/manager_fixture.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ExecRequest Bash(const std::string& script, const std::string& user) {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  r.user = user;
  return r;
}

// stdout of a command that must succeed.
std::string Sh(const EnvdClient& agent, const std::string& script, const std::string& user = "root") {
  std::string out;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { out.append(b); };
  auto r = agent.Exec(Bash(script, user), cb);
  EXPECT_TRUE(r.ok()) << script << ": " << r.status().ToString();
  if (r.ok()) {
    EXPECT_EQ(r->exit_code, 0) << script << "\n" << out;
  }
  return out;
}

TEST(GuestUserTest, FilesApiActsAsTheRequestingUser) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();
  std::string local = MakeTempDir();

  // Reading /etc/shadow: permission denied for `user`, the file for root.
  Status shadow = agent.DownloadFile("/etc/shadow", local + "/shadow-user", EnvdClient::kDefaultMaxDownload, "user");
  EXPECT_EQ(shadow.code(), StatusCode::kPermissionDenied) << shadow.ToString();
  EXPECT_FALSE(fs::exists(local + "/shadow-user"));
  ASSERT_TRUE(agent.DownloadFile("/etc/shadow", local + "/shadow-root", EnvdClient::kDefaultMaxDownload, "root").ok());
  EXPECT_EQ(ReadFileOrDie(local + "/shadow-root").rfind("root:", 0), 0u);

  // Writing through symlinks the user made into /etc: refused, /etc unchanged.
  // /etc's entries and its own mtime (a file made and removed there moves it);
  // not "..", which gVisor's overlay changes when a write elsewhere copies a
  // directory of / up.
  const std::string kEtc = "ls -la --time-style=full-iso /etc | grep -v ' [.][.]$'; sha256sum /etc/passwd";
  std::string etc_before = Sh(agent, kEtc);
  Sh(agent, "ln -s /etc ~/etc-link && ln -s /etc/passwd ~/pw-link", "user");
  std::ofstream(local + "/evil") << "evil:x:0:0::/root:/bin/bash\n";
  Status via_dir = agent.UploadFile(local + "/evil", "/home/user/etc-link/airlock-evil", "user");
  EXPECT_EQ(via_dir.code(), StatusCode::kPermissionDenied) << via_dir.ToString();
  Status via_file = agent.UploadFile(local + "/evil", "/home/user/pw-link", "user");
  EXPECT_FALSE(via_file.ok());
  Status direct = agent.UploadFile(local + "/evil", "/etc/passwd", "user");
  EXPECT_EQ(direct.code(), StatusCode::kPermissionDenied) << direct.ToString();
  auto mkdir_etc = agent.MakeDir("/home/user/etc-link/airlock-dir", "user");
  EXPECT_EQ(mkdir_etc.code(), StatusCode::kPermissionDenied) << mkdir_etc.ToString();
  auto rm = agent.Call("filesystem.Filesystem/Remove", {{"path", "/etc/hostname"}}, "user");
  EXPECT_EQ(rm.status().code(), StatusCode::kPermissionDenied) << rm.status().ToString();
  auto stat_root = agent.Stat("/root/.bashrc", "user");
  EXPECT_EQ(stat_root.status().code(), StatusCode::kPermissionDenied) << stat_root.status().ToString();
  EXPECT_EQ(Sh(agent, kEtc), etc_before);

  // Writing into /home/user creates files (and parents) owned by uid 1000.
  std::ofstream(local + "/mine") << "mine";
  ASSERT_TRUE(agent.UploadFile(local + "/mine", "/home/user/new/dir/mine.txt", "user").ok());
  EXPECT_EQ(Sh(agent, "stat -c %u:%g /home/user/new/dir/mine.txt /home/user/new/dir /home/user/new"),
            "1000:1000\n1000:1000\n1000:1000\n");
  ASSERT_TRUE(agent.MakeDir("/home/user/made", "user").ok());
  EXPECT_EQ(Sh(agent, "stat -c %u /home/user/made"), "1000\n");
  // Root's requests keep root's rights.
  ASSERT_TRUE(agent.UploadFile(local + "/mine", "/etc/airlock-root-file", "root").ok());
  EXPECT_EQ(Sh(agent, "stat -c %u /etc/airlock-root-file && rm /etc/airlock-root-file"), "0\n");
  fs::remove_all(local);
}

TEST(GuestUserTest, ForkBombStaysInItsCgroupAndIsKilled) {
  AIRLOCK_REQUIRE_VM();
  if (RuntimeName() == "gvisor")
    GTEST_SKIP() << "the agent's per-command cgroups need cgroup v2, which gVisor's guest has not: a fork bomb "
                    "there fills the sandbox's host pids limit and ends the sandbox, the host untouched "
                    "(docs/runtime-gvisor.md \"Limits\")";
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();
  // The largest leaf below commands/: "<pids.current> <pids.max> <dir>".
  const std::string kLeaves =
      "for d in /sys/fs/cgroup/commands/c*/; do echo $(cat $d/pids.current) $(cat $d/pids.max) $d; done"
      " | sort -n | tail -1";
  EXPECT_EQ(Sh(agent, "cat /proc/1/oom_score_adj"), "-1000\n");

  auto bomb = agent.StartBackground(Bash(":(){ :|:& };:", "user"));
  ASSERT_TRUE(bomb.ok()) << bomb.status().ToString();
  // Wait until the bomb has filled its leaf.
  long current = 0, max = 0;
  for (auto until = Clock::now() + std::chrono::seconds(180); Clock::now() < until;) {
    std::istringstream in(Sh(agent, kLeaves));
    in >> current >> max;
    if (max > 0 && current >= max - 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_GT(max, 0);
  ASSERT_GE(current, max - 2) << "the bomb never reached its pids.max";

  // A second command answers while the bomb runs.
  auto t0 = Clock::now();
  auto second = std::async(std::launch::async, [&] {
    std::string out;
    ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view b) { out.append(b); };
    auto r = agent.Exec(Bash("echo ok", "user"), cb);
    return std::make_pair(r.ok() && r->exit_code == 0, out);
  });
  const auto kDeadline = std::chrono::seconds(30);
  if (second.wait_for(kDeadline) != std::future_status::ready) {
    agent.CancelAll();
    FAIL() << "echo ok did not answer within " << kDeadline.count() << " s during the fork bomb";
  }
  auto [ok, out] = second.get();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(ok);
  EXPECT_EQ(out, "ok\n");
  std::printf("[ measured ] echo ok during the fork bomb (%ld/%ld pids in its leaf): %.3f s\n", current, max, secs);

  // SIGKILL of the bomb's process ends its whole tree and frees the pids.
  Status kill = agent.SendSignal(*bomb, "SIGNAL_SIGKILL");
  ASSERT_TRUE(kill.ok()) << kill.ToString();
  std::string left;
  for (auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
    left = Sh(agent, "cat /sys/fs/cgroup/commands/pids.current");
    if (std::atol(left.c_str()) <= 5) break;  // this query's own processes
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_LE(std::atol(left.c_str()), 5) << "pids still in use after the kill: " << left;
  EXPECT_EQ(Sh(agent, "ps -e -o user= | grep -c '^user' || true"), "0\n");

  // A leader that already exited (its end event is out) left a child in its
  // leaf: SIGKILL of the leader's pid still ends what is left.
  std::string child;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { child.append(b); };
  auto leader = agent.Exec(Bash("setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $!", "user"), cb);
  ASSERT_TRUE(leader.ok()) << leader.status().ToString();
  ASSERT_FALSE(child.empty());
  child.pop_back();
  EXPECT_EQ(Sh(agent, "kill -0 " + child + " && echo alive"), "alive\n");
  Status late = agent.SendSignal(leader->pid, "SIGNAL_SIGKILL");
  EXPECT_TRUE(late.ok()) << late.ToString();
  std::string state;
  for (auto until = Clock::now() + std::chrono::seconds(30); Clock::now() < until;) {
    state = Sh(agent, "kill -0 " + child + " 2>/dev/null && echo alive || echo gone");
    if (state == "gone\n") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(state, "gone\n") << "the leftover child " << child << " survived SIGKILL of its leader";
}

}  // namespace
}  // namespace airlock::testing
