// Integration tests of pause/resume (docs/snapshots.md) against real
// microVMs: 50 pause/resume cycles keep every byte (Manager, in-process); a
// paused sandbox survives a daemon restart; a daemon killed with SIGKILL
// mid-pause leaves the sandbox running or validly paused, never torn.
// Skips without root / QEMU / image.
#include "runtime/qemu/snapshot.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/subprocess.h"
#include "core/http_client.h"
#include "core/manager.h"
#include "image/hash.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

ExecRequest Bash(const std::string& script) {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  return r;
}

std::string RandomHexForTest() {
  std::random_device rd;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", rd());
  return buf;
}

// A Manager on the shared state dir that never builds the image.
StatusOr<std::unique_ptr<Manager>> OpenManager(bool template_snapshots) {
  ManagerConfig c;
  c.state_dir = StateDir();
  c.build_image_if_missing = false;
  c.template_snapshots = template_snapshots;
  c.runtime = RuntimeName();
  return Manager::Open(c);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomData(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(gen());
  return s;
}

void WriteLocal(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  f << data;
}

// Every snapshot directory of sandbox `id` under snapshots/paused must be
// complete (no manifest-less or torn dir under the visible name). `<id>.tmp`
// (the temporary name) may exist only while `allow_tmp` (right after a crash,
// before the daemon's start-up sweep).
void ExpectNoPartialSnapshots(const std::string& state_dir, const std::string& id, bool allow_tmp) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(state_dir + "/snapshots/paused", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(id, 0) != 0) continue;  // other tests' sandboxes
    if (allow_tmp && name == id + ".tmp") continue;
    EXPECT_EQ(name, id) << "leftover " << e.path();
    auto m = qemu::ReadSnapshot(e.path().string());
    EXPECT_TRUE(m.ok()) << e.path() << ": " << m.status().ToString();
  }
}

TEST(SnapshotTest, FiftyPauseResumeCyclesKeepEveryByte) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager(ManagerConfig{}.template_snapshots);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto sb = (*m)->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string id = (*sb)->id();
  std::string local = MakeTempDir();
  constexpr int kCycles = 50;
  std::vector<std::string> sums;
  double pause_ms = 0, resume_ms = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCycles; ++i) {
    // A file with a known checksum (random, 64 KiB + i bytes) and a log line.
    std::string data = RandomData(65536 + i, static_cast<uint32_t>(i));
    sums.push_back(image::Sha256Hex(data));
    WriteLocal(local + "/f", data);
    std::string guest = "/home/user/f" + std::to_string(i) + ".bin";
    ASSERT_TRUE((*sb)->agent().UploadFile(local + "/f", guest).ok()) << "cycle " << i;
    auto r = (*sb)->agent().Exec(Bash("echo cycle " + std::to_string(i) + " >> /home/user/cycles.log"), {});
    ASSERT_TRUE(r.ok() && r->exit_code == 0) << "cycle " << i << ": " << r.status().ToString();

    auto p = (*m)->Pause(id);
    ASSERT_TRUE(p.ok()) << "cycle " << i << ": " << p.status().ToString();
    ASSERT_EQ((*sb)->state(), SandboxState::kPaused);
    ASSERT_EQ((*sb)->vmm_pid(), -1) << "no VMM while paused";
    EXPECT_EQ((*m)->Pause(id).status().code(), StatusCode::kAlreadyExists);
    auto again = (*m)->Resume(id);
    ASSERT_TRUE(again.ok()) << "cycle " << i << ": " << again.status().ToString();
    ASSERT_TRUE(again->resumed);
    pause_ms += p->total_ms;
    resume_ms += again->total_ms;
  }
  double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("# %d cycles in %.1f s: pause %.0f ms, resume %.0f ms on average\n", kCycles, total_s, pause_ms / kCycles,
              resume_ms / kCycles);
  // Every byte present at the end.
  for (int i = 0; i < kCycles; ++i) {
    ASSERT_TRUE((*sb)->agent().DownloadFile("/home/user/f" + std::to_string(i) + ".bin", local + "/g").ok());
    EXPECT_EQ(image::Sha256Hex(ReadFileOrDie(local + "/g")), sums[i]) << "file " << i;
  }
  ASSERT_TRUE((*sb)->agent().DownloadFile("/home/user/cycles.log", local + "/log").ok());
  std::string want;
  for (int i = 0; i < kCycles; ++i) want += "cycle " + std::to_string(i) + "\n";
  EXPECT_EQ(ReadFileOrDie(local + "/log"), want);
  // The resumed VM runs on a private copy of the disk: no snapshot stays
  // behind, and the disk chain does not grow with the cycles.
  EXPECT_FALSE(fs::exists(StateDir() + "/snapshots/paused/" + id));
  auto info = RunChecked(
      {"qemu-img", "info", "-U", "--backing-chain", "--output=json", (*sb)->run_dir() + "/vm/vmm/overlay.qcow2"});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  auto chain = json::parse(*info, nullptr, false);
  ASSERT_TRUE(chain.is_array()) << *info;
  EXPECT_LE(chain.size(), 3u) << "backing chain grew: " << *info;
  ASSERT_TRUE((*m)->Destroy(id).ok());
  fs::remove_all(local);
}

// ---- through the daemon ----

struct Created {
  std::string id, token;
};

Created CreateVia(const TestDaemon& d) {
  auto r = d.Do("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":600})");
  EXPECT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  if (!r.ok() || r->status != 201) return {};
  auto j = json::parse(r->body);
  return {j["sandboxID"], j["envdAccessToken"]};
}

std::string StateOf(const TestDaemon& d, const std::string& id) {
  auto r = d.Do("GET", "/sandboxes/" + id);
  if (!r.ok() || r->status != 200) return r.ok() ? "http " + std::to_string(r->status) : r.status().ToString();
  return json::parse(r->body).value("state", "?");
}

TEST(SnapshotTest, PausedSandboxSurvivesDaemonRestart) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  Created sb;
  const std::string data = RandomData(100000, 7);
  {
    TestDaemon d(dir, {}, false, port);
    sb = CreateVia(d);
    ASSERT_FALSE(sb.id.empty());
    auto w = d.Data(sb.id, sb.token, "POST", "/files?path=/home/user/keep.bin&username=user", data);
    ASSERT_TRUE(w.ok() && w->status == 200) << (w.ok() ? w->body : w.status().ToString());
    auto p = d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->status, 204) << p->body;
    auto p2 = d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}");
    ASSERT_TRUE(p2.ok());
    EXPECT_EQ(p2->status, 409) << p2->body;
    EXPECT_EQ(StateOf(d, sb.id), "paused");
    auto h = d.Data(sb.id, sb.token, "GET", "/health");
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->status, 502) << "a paused sandbox is not running";
  }  // SIGTERM: the daemon stops; the paused sandbox stays on disk
  TestDaemon d(dir, {}, false, port);
  EXPECT_EQ(StateOf(d, sb.id), "paused");
  auto c = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, 201) << c->body;
  auto c2 = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ(c2->status, 200) << "already running: " << c2->body;
  auto r = d.Data(sb.id, sb.token, "GET", "/files?path=/home/user/keep.bin&username=user");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(image::Sha256Hex(r->body), image::Sha256Hex(data));
  auto k = d.Do("DELETE", "/sandboxes/" + sb.id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204);
  EXPECT_FALSE(fs::exists(StateDir() + "/snapshots/paused/" + sb.id)) << "kill deletes the sandbox's snapshot";
  fs::remove_all(dir);
}

TEST(SnapshotTest, Kill9DuringPauseLeavesRunningOrValidlyPaused) {
  AIRLOCK_REQUIRE_VM();
  // Kill the daemon at different moments of a pause (~150-300 ms under TCG:
  // stop, memory stream, disk copy, rename, registry, teardown).
  for (int delay_ms : {5, 60, 120, 250}) {
    SCOPED_TRACE("kill -9 after " + std::to_string(delay_ms) + " ms");
    std::string dir = MakeTempDir();
    uint16_t port = FreeTcpPort();
    const std::string data = RandomData(50000, static_cast<uint32_t>(delay_ms));
    Created sb;
    {
      TestDaemon d(dir, {}, false, port);
      sb = CreateVia(d);
      ASSERT_FALSE(sb.id.empty());
      auto w = d.Data(sb.id, sb.token, "POST", "/files?path=/home/user/k.bin&username=user", data);
      ASSERT_TRUE(w.ok() && w->status == 200);
      std::thread pause([&] { (void)d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}"); });
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      d.Kill9();
      pause.join();
    }
    ExpectNoPartialSnapshots(StateDir(), sb.id, /*allow_tmp=*/true);
    TestDaemon d(dir, {}, false, port);
    ExpectNoPartialSnapshots(StateDir(), sb.id, /*allow_tmp=*/false);
    std::string state = StateOf(d, sb.id);
    std::printf("# kill -9 after %d ms: sandbox %s\n", delay_ms, state.c_str());
    ASSERT_TRUE(state == "running" || state == "paused") << state;
    if (state == "paused") {
      auto c = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
      ASSERT_TRUE(c.ok());
      EXPECT_EQ(c->status, 201) << c->body;
    }
    auto r = d.Data(sb.id, sb.token, "GET", "/files?path=/home/user/k.bin&username=user");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(image::Sha256Hex(r->body), image::Sha256Hex(data));
    // And it still pauses and resumes normally.
    auto p = d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->status, 204) << p->body;
    auto c = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->status, 201) << c->body;
    (void)d.Do("DELETE", "/sandboxes/" + sb.id);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace airlock::testing

namespace airlock::testing {
namespace {

// Creates from the template snapshot: fast path taken, and each sandbox is
// fresh where it matters (hostname, entropy, clock, token) and private on disk.
TEST(SnapshotTest, CreateFromTemplateSnapshotIsFreshAndPrivate) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager(/*template_snapshots=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE((*m)->template_snapshots().Ensure("base", 1, 512).ok());
  CreateOptions o;
  o.env_vars = {{"WHO", "me"}};
  auto a = (*m)->Create(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = (*m)->Create(o);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*a)->timings().from_snapshot);
  EXPECT_TRUE((*b)->timings().from_snapshot);
  EXPECT_NE((*a)->access_token(), (*b)->access_token());
  auto probe = [](const Sandbox& sb) {
    std::string out;
    ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view s) { out.append(s); };
    auto r = sb.agent().Exec(Bash("hostname; echo $WHO; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; "
                                  "date +%s%3N; echo private > /home/user/mine-$(hostname)"),
                             cb);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << r.status().ToString();
    return out;
  };
  auto lines = [](const std::string& s) {
    std::vector<std::string> v;
    size_t i = 0, j;
    while ((j = s.find('\n', i)) != std::string::npos) v.push_back(s.substr(i, j - i)), i = j + 1;
    return v;
  };
  auto la = lines(probe(**a)), lb = lines(probe(**b));
  ASSERT_EQ(la.size(), 4u);
  ASSERT_EQ(lb.size(), 4u);
  EXPECT_EQ(la[0], (*a)->id());
  EXPECT_EQ(lb[0], (*b)->id());
  EXPECT_EQ(la[1], "me");
  EXPECT_NE(la[2], lb[2]) << "two sandboxes from one snapshot share RNG output";
  int64_t now_ms = NowMs();
  EXPECT_LT(std::llabs(std::stoll(lb[3]) - now_ms), 2000) << "guest clock not set on restore";
  // Private disks: a's file is not in b.
  auto st = (*b)->agent().Stat("/home/user/mine-" + (*a)->id());
  EXPECT_FALSE(st.ok());
  // Other shapes have no snapshot: cold boot.
  o.memory_mib = 384;
  auto cold = (*m)->Create(o);
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_FALSE((*cold)->timings().from_snapshot);
}

// Snapshots chain: a fork child's disk is layered on the fork checkpoint, a
// named snapshot of it on that, a sandbox from the named snapshot on the
// named snapshot, and a named snapshot of that sandbox on the first one.
// Killing the sandboxes must not delete a snapshot another is layered on,
// and deleting a named snapshot another is layered on is refused.
TEST(SnapshotTest, SnapshotsLayeredOnForksAndNamedSnapshotsKeepTheirBase) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager(/*template_snapshots=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Manager& mgr = **m;
  auto run = [](const Sandbox& sb, const std::string& script) {
    std::string out;
    ExecCallbacks cb;
    cb.on_stdout = [&](std::string_view s) { out.append(s); };
    auto r = sb.agent().Exec(Bash(script), cb);
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << script << ": " << r.status().ToString();
    return out;
  };
  auto parent = mgr.Create(CreateOptions{});
  ASSERT_TRUE(parent.ok()) << parent.status().ToString();
  run(**parent, "echo parent > /home/user/p.txt; sync");
  auto kids = mgr.Fork((*parent)->id(), 1);
  ASSERT_TRUE(kids.ok() && kids->size() == 1 && (*kids)[0].ok()) << kids.status().ToString();
  std::shared_ptr<Sandbox> child = *(*kids)[0];
  ASSERT_TRUE(mgr.Destroy((*parent)->id()).ok());
  run(*child, "echo child > /home/user/c.txt; sync");
  const std::string tag = RandomHexForTest();
  auto first = mgr.CreateNamedSnapshot(child->id(), "chain-a-" + tag);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  // The last fork child goes: its checkpoint stays, the named snapshot is on it.
  ASSERT_TRUE(mgr.Destroy(child->id()).ok());
  ASSERT_TRUE(qemu::ReadSnapshot(first->dir).ok()) << qemu::ReadSnapshot(first->dir).status().ToString();

  CreateOptions from_first;
  from_first.named_snapshot_dir = mgr.snapshot_dirs().FindNamed("chain-a-" + tag, "");
  ASSERT_EQ(from_first.named_snapshot_dir, first->dir);
  auto d = mgr.Create(from_first);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(run(**d, "cat /home/user/p.txt /home/user/c.txt"), "parent\nchild\n");
  run(**d, "echo d > /home/user/d.txt; sync");
  auto second = mgr.CreateNamedSnapshot((*d)->id(), "chain-b-" + tag);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_TRUE(mgr.Destroy((*d)->id()).ok());

  Status refused = mgr.DeleteNamedSnapshot("chain-a-" + tag);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  CreateOptions from_second;
  from_second.named_snapshot_dir = mgr.snapshot_dirs().FindNamed("chain-b-" + tag, "");
  ASSERT_EQ(from_second.named_snapshot_dir, second->dir);
  auto e = mgr.Create(from_second);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(run(**e, "cat /home/user/p.txt /home/user/c.txt /home/user/d.txt"), "parent\nchild\nd\n");
  ASSERT_TRUE(mgr.Destroy((*e)->id()).ok());
  // Top down, both go, and the fork checkpoint with the last of them.
  const std::string fork_dir = fs::path(qemu::ReadSnapshot(first->dir)->disk_backing).parent_path().string();
  EXPECT_EQ(fork_dir.rfind(StateDir() + "/snapshots/forks/", 0), 0u) << fork_dir;
  EXPECT_TRUE(mgr.DeleteNamedSnapshot("chain-b-" + tag).ok());
  EXPECT_TRUE(fs::exists(fork_dir));
  EXPECT_TRUE(mgr.DeleteNamedSnapshot("chain-a-" + tag).ok());
  EXPECT_FALSE(fs::exists(fork_dir));
}

}  // namespace
}  // namespace airlock::testing

namespace airlock::testing {
namespace {

// A disk that fills during a pause: a clear ResourceExhausted error, nothing
// half-written left behind, and the sandbox keeps running.
TEST(SnapshotTest, DiskFullDuringPauseKeepsTheSandboxRunning) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenManager(ManagerConfig{}.template_snapshots);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto sb = (*m)->Create({});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  // The paused-snapshot directory on an 8 MiB tmpfs: the ~70 MB memory stream cannot fit.
  std::string paused = (*m)->snapshot_dirs().paused();
  fs::create_directories(paused);
  auto mount = RunChecked({"mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", paused});
  ASSERT_TRUE(mount.ok()) << mount.status().ToString();
  auto p = (*m)->Pause((*sb)->id());
  auto files_left = std::distance(fs::directory_iterator(paused), fs::directory_iterator());
  (void)RunChecked({"umount", paused});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().ToString();
  EXPECT_NE(p.status().message().find("No space left on device"), std::string::npos) << p.status().ToString();
  EXPECT_EQ(files_left, 0) << "a failed pause left files behind";
  EXPECT_EQ((*sb)->state(), SandboxState::kRunning);
  auto r = (*sb)->agent().Exec(Bash("echo still here"), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  // And a pause with room works afterwards.
  auto p2 = (*m)->Pause((*sb)->id());
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  ASSERT_TRUE((*m)->Resume((*sb)->id()).ok());
  ASSERT_TRUE((*m)->Destroy((*sb)->id()).ok());
}

}  // namespace
}  // namespace airlock::testing
