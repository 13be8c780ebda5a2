// Sandbox lifecycle through the Manager, against real microVMs: cleanup,
// re-attach, signals, boot failures, hostile programs, Ctrl-C.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <thread>

#include "core/manager.h"
#include "tests/integration/harness.h"
#include "tests/integration/manager_fixture.h"
#include "tests/wait_for.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;

ExecRequest Bash(const std::string& script) {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  return r;
}

TEST(LifecycleTest, TwentyCreateDestroyCyclesLeaveNothingBehind) {
  AIRLOCK_REQUIRE_VM();
  SandboxResources own;
  HostResources before = own.Snapshot();
  std::vector<std::string> made;
  auto m = OpenManager();
  ASSERT_TRUE(m);
  for (int i = 0; i < 20; ++i) {
    auto sb = m->Create({});
    ASSERT_TRUE(sb.ok()) << "cycle " << i << ": " << sb.status().ToString();
    made.push_back((*sb)->id());
    auto r = (*sb)->agent().Exec(Bash("echo $((6*7))"), {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->exit_code, 0);
    pid_t vmm = (*sb)->vmm_pid();
    ASSERT_TRUE(m->Destroy((*sb)->id()).ok());
    EXPECT_EQ((*sb)->state(), SandboxState::kKilled);
    EXPECT_NE(::kill(vmm, 0), 0) << "VMM " << vmm << " still alive";
  }
  m.reset();
  HostResources after = own.Snapshot();
  for (const auto& id : made) EXPECT_EQ(own.ids().count(id), 1u) << "the leak check did not see sandbox " << id;
  EXPECT_EQ(before, after) << "before: " << before.ToString() << "\nafter: " << after.ToString();
}

TEST(LifecycleTest, BackgroundProcessOutlivesItsStreamAndReattaches) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();
  auto pid = agent.StartBackground(Bash("sleep 1; for i in 1 2 3; do echo tick $i; sleep 0.5; done; exit 7"));
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  std::string out;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { out.append(b); };
  auto r = agent.Attach(*pid, cb);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_NE(out.find("tick 3\n"), std::string::npos) << out;
  // A late Connect still gets the end event.
  auto late = agent.Attach(*pid, {});
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ(late->exit_code, 7);
}

TEST(LifecycleTest, SendSignalKillsTheProcessTree) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();
  auto pid = agent.StartBackground(Bash("sleep 1000 & sleep 1000; wait"));
  ASSERT_TRUE(pid.ok());
  // The kill comes while the stream is attached (its start event arrived).
  std::atomic<bool> attached{false};
  ExecCallbacks cb;
  cb.on_start = [&](uint32_t) { attached = true; };
  std::thread killer([&] {
    EXPECT_TRUE(WaitFor([&] { return attached.load(); }, std::chrono::seconds(60)));
    EXPECT_TRUE(agent.SendSignal(*pid, "SIGNAL_SIGKILL").ok());
  });
  auto r = agent.Attach(*pid, cb);
  killer.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->exited);
  EXPECT_EQ(r->status, "signal: killed");
  EXPECT_EQ(r->ShellCode(), 137);
  // Nothing of the tree survives.
  auto ps = agent.Exec(Bash("pgrep -c -x sleep || true"), {});
  ASSERT_TRUE(ps.ok());
  auto unknown = agent.SendSignal(999999, "SIGNAL_SIGKILL");
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound) << unknown.ToString();
}

TEST(LifecycleTest, GuestThatNeverBecomesReadyIsCleanedUp) {
  AIRLOCK_REQUIRE_VM();
  if (RuntimeName() == "gvisor")
    GTEST_SKIP() << "a gVisor sandbox's agent is up when runsc run returns: no boot slow enough to time out";
  SandboxResources own;
  HostResources before = own.Snapshot();
  const size_t before_ids = own.ids().size();
  auto m = OpenManager(/*cold_boot=*/true);
  ASSERT_TRUE(m);
  CreateOptions o;
  o.ready_timeout = std::chrono::milliseconds(50);  // far shorter than any boot
  auto sb = m->Create(o);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.status().code(), StatusCode::kDeadlineExceeded) << sb.status().ToString();
  EXPECT_NE(sb.status().message().find("did not become ready"), std::string::npos);
  m.reset();
  HostResources after = own.Snapshot();
  EXPECT_GT(own.ids().size(), before_ids) << "the failed sandbox's id was not seen";
  EXPECT_EQ(before, after) << "before: " << before.ToString() << "\nafter: " << after.ToString();
}

TEST(LifecycleTest, UnknownTemplateNamesTheFix) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  CreateOptions o;
  o.template_name = "no-such-template";
  auto sb = m->Create(o);
  ASSERT_FALSE(sb.ok());
  EXPECT_EQ(sb.status().code(), StatusCode::kNotFound);
  EXPECT_NE(sb.status().message().find("no-such-template"), std::string::npos) << sb.status().ToString();
}

TEST(LifecycleTest, HostileProgramsDoNotHurtTheHost) {
  AIRLOCK_REQUIRE_VM();
  SandboxResources own;
  HostResources before = own.Snapshot();
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const EnvdClient& agent = (*sb)->agent();
  // A thousand children, a spinning loop and a filling disk, all at once.
  auto forks = agent.StartBackground(Bash("for i in $(seq 1000); do (sleep 300 &) ; done; wait"));
  auto spin = agent.StartBackground(Bash("while :; do :; done"));
  auto fill = agent.StartBackground(Bash("dd if=/dev/zero of=/home/user/fill bs=1M count=300 2>&1; sync"));
  EXPECT_TRUE(forks.ok() && spin.ok() && fill.ok());
  // The behaviour under test: three seconds of this load, then destroy.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  pid_t vmm = (*sb)->vmm_pid();
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(m->Destroy((*sb)->id()).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(::kill(vmm, 0), 0);
  m.reset();
  HostResources after = own.Snapshot();
  EXPECT_EQ(before, after) << "before: " << before.ToString() << "\nafter: " << after.ToString();
}

// Fields of the "<name>:" line of /proc/<pid>/status ("Uid:\t0\t0\t0\t0").
std::vector<long> StatusFields(const std::string& status, const std::string& name) {
  std::vector<long> out;
  size_t at = status.find("\n" + name + ":");
  if (at == std::string::npos) return out;
  std::istringstream line(status.substr(at + name.size() + 2, status.find('\n', at + 1) - at - name.size() - 2));
  for (long v; line >> v;) out.push_back(v);
  return out;
}

std::string NsOf(const std::string& proc, const char* ns) {
  std::error_code ec;
  return fs::read_symlink(proc + "/ns/" + ns, ec).string();
}

// The gVisor Sentry seen from the host: not uid 0 or gid 0, in a user
// namespace of its own that maps no host uid 0, chrooted away from the
// host's files, in a pid namespace of its own where the platform allows (docs/runtime-gvisor.md
// "Security posture"). The microVM's VMM has JailTest.
TEST(LifecycleTest, GvisorSentryIsUnprivilegedOnTheHost) {
  AIRLOCK_REQUIRE_VM();
  if (RuntimeName() != "gvisor") GTEST_SKIP() << "gVisor only: the microVM's VMM jail is JailTest's";
  auto m = OpenManager();
  ASSERT_TRUE(m);
  auto sb = m->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string proc = "/proc/" + std::to_string((*sb)->vmm_pid());
  const std::string status = ReadFileOrDie(proc + "/status");
  for (const char* ids : {"Uid", "Gid"}) {
    auto v = StatusFields(status, ids);
    ASSERT_EQ(v.size(), 4u) << ids << " in " << status;
    for (long id : v) EXPECT_NE(id, 0) << "the Sentry has host " << ids << " 0:\n" << status;
  }
  EXPECT_NE(NsOf(proc, "user"), NsOf("/proc/self", "user")) << "the Sentry is in the host's user namespace";
  // systrap and ptrace keep the Sentry in the caller's pid namespace (their
  // stubs are its children: runsc's RequiresCurrentPIDNS); kvm does not.
  const std::string platform = ReadFileOrDie(StateDir() + "/gvisor-platform");
  if (platform.rfind("kvm\n", 0) == 0)
    EXPECT_NE(NsOf(proc, "pid"), NsOf("/proc/self", "pid")) << "the Sentry is in the host's pid namespace";
  std::istringstream map(ReadFileOrDie(proc + "/uid_map"));
  for (long inside, outside, count; map >> inside >> outside >> count;)
    EXPECT_FALSE(outside <= 0 && 0 < outside + count)
        << "host uid 0 is mapped into the Sentry's user namespace (as " << inside << ")";
  std::error_code ec;
  EXPECT_FALSE(fs::exists(proc + "/root/etc/passwd", ec)) << "the Sentry's root holds the host's /etc";
  // And the guest is still root in its own world.
  std::string out;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view b) { out.append(b); };
  ExecRequest as_root = Bash("id -u; echo hi > /root/f && cat /root/f");
  as_root.user = "root";
  auto r = (*sb)->agent().Exec(as_root, cb);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(out, "0\nhi\n");
  ASSERT_TRUE(m->Destroy((*sb)->id()).ok());
}

TEST(LifecycleTest, CtrlCOfAirlockRunDestroysTheSandbox) {
  AIRLOCK_REQUIRE_VM();
  SandboxResources own;
  HostResources before = own.Snapshot();
  SpawnOptions so;
  so.argv = {AirlockBin(), "--state-dir", StateDir(), "run", "--runtime", RuntimeName(), "--", "bash", "-c",
             "echo started; sleep 600"};
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  so.stdout_fd = p[1];
  so.stderr_to_devnull = true;
  auto child = Spawn(so);
  ::close(p[1]);
  ASSERT_TRUE(child.ok());
  // Wait for the command to be running in the guest.
  std::string got;
  char buf[256];
  while (got.find("started") == std::string::npos) {
    ssize_t n = ::read(p[0], buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, n);
  }
  ::close(p[0]);
  ASSERT_NE(got.find("started"), std::string::npos);
  ASSERT_TRUE(child->Signal(SIGINT).ok());
  auto st = child->WaitFor(std::chrono::seconds(30));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->ShellCode(), 130);
  HostResources after = own.Snapshot();
  EXPECT_EQ(before, after) << "before: " << before.ToString() << "\nafter: " << after.ToString();
}

}  // namespace
}  // namespace airlock::testing
