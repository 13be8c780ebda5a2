// Integration tests of checkpoints and rollback in place (docs/snapshots.md
// "Checkpoints and rollback", core/checkpoints.cc) against a real daemon and
// microVMs: files and a background process come back, same sandbox id and
// token; 20 checkpoint/rollback cycles lose nothing; another team's key gets
// 404; unknown or deleted checkpoints are 404, a paused sandbox 409;
// checkpoints survive a daemon restart and go with their sandbox; a start
// sweeps uncommitted and orphaned checkpoints. Skips without root / QEMU / image.
#include <gtest/gtest.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "image/hash.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"
#include "tests/wait_for.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct CkptSandbox {
  std::string id;
  std::string token;
};

CkptSandbox CkptCreate(const TestDaemon& d, const std::string& key = "") {
  auto r = d.Do("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":900})", true, {}, key);
  EXPECT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  if (!r.ok() || r->status != 201) return {};
  auto j = json::parse(r->body);
  return {j["sandboxID"], j["envdAccessToken"]};
}

std::string CkptKey(const std::string& dir, const std::string& name, const std::string& team) {
  auto r = RunCli({"apikey", "--db", dir + "/airlock.db", "create", "--name", name, "--team", team});
  EXPECT_EQ(r.code, 0) << r.err;
  return r.out.substr(0, r.out.find('\n'));
}

// POST /sandboxes/{id}/checkpoints → its checkpointID ("" and a failure otherwise).
std::string Checkpoint(const TestDaemon& d, const std::string& id) {
  auto r = d.Do("POST", "/sandboxes/" + id + "/checkpoints", "{}");
  EXPECT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
  if (!r.ok() || r->status != 201) return "";
  auto j = json::parse(r->body);
  EXPECT_EQ(j.value("sandboxID", ""), id);
  EXPECT_GT(j.value("memoryBytes", 0), 0);
  return j.value("checkpointID", "");
}

StatusOr<HttpReply> Rollback(const TestDaemon& d, const std::string& id, const std::string& checkpoint,
                             const std::string& key = "") {
  return d.Do("POST", "/sandboxes/" + id + "/rollback", json{{"checkpointID", checkpoint}}.dump(), true, {}, key);
}

std::string CkptState(const TestDaemon& d, const std::string& id) {
  auto r = d.Do("GET", "/sandboxes/" + id);
  if (!r.ok() || r->status != 200) return r.ok() ? "http " + std::to_string(r->status) : r.status().ToString();
  return json::parse(r->body).value("state", "?");
}

std::vector<std::string> CheckpointDirsOf(const std::string& id) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(StateDir() + "/snapshots/checkpoints", ec)) {
    if (e.path().filename().string().rfind(id + "-", 0) == 0) out.push_back(e.path().filename().string());
  }
  return out;
}

std::string DiskBackingOf(const std::string& id) {
  std::ifstream f(StateDir() + "/run/" + id + "/vm/vm.json");
  auto j = json::parse(f, nullptr, false);
  return j.is_object() ? j.value("disk_backing", "") : "";
}

TEST(CheckpointTest, RollbackBringsBackFilesAndProcessesInTheSameSandbox) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty());
  std::string a = CkptKey(dir, "alice", "team-a"), b = CkptKey(dir, "bob", "team-b");
  CkptSandbox sb = CkptCreate(d, a);
  ASSERT_FALSE(sb.id.empty());

  // Files and a background process (a shell loop that keeps a counter file).
  auto setup = d.Run(sb.id, sb.token,
                     "set -e; mkdir -p /home/user/work; head -c 200000 /dev/urandom > /home/user/work/data.bin\n"
                     "sha256sum /home/user/work/data.bin | cut -d' ' -f1 > /home/user/work/data.sha\n"
                     "setsid bash -c 'while true; do sleep 0.2; done' </dev/null >/dev/null 2>&1 &\n"
                     "echo $! > /home/user/work/loop.pid; cat /home/user/work/data.sha");
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  ASSERT_EQ(setup->exit_code, 0) << setup->err;
  const std::string sha = setup->out;

  // A guest HTTP server on an exposed port: after the rollback it answers
  // again through the same network (netns, nft rules kept).
  auto web = d.Run(sb.id, sb.token,
                   "cd /home/user/work && (setsid python3 -m http.server 8000 >/dev/null 2>&1 &); "
                   "for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/8000) 2>/dev/null && exit 0; sleep 0.1; done; "
                   "exit 1");
  ASSERT_TRUE(web.ok() && web->exit_code == 0) << (web.ok() ? web->err : web.status().ToString());
  auto to_port = [&] {
    return d.Do("GET", "/data.sha", "", false, {{"E2b-Sandbox-Id", sb.id}, {"E2b-Sandbox-Port", "8000"}});
  };
  auto page = to_port();
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->status, 200) << page->body;
  EXPECT_EQ(page->body, sha);

  auto t0 = std::chrono::steady_clock::now();
  const std::string ckpt = Checkpoint(d, sb.id);
  ASSERT_FALSE(ckpt.empty());
  std::printf("checkpoint: %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  // The sandbox kept running through the checkpoint.
  auto alive = d.Run(sb.id, sb.token, "kill -0 $(cat /home/user/work/loop.pid) && echo up");
  ASSERT_TRUE(alive.ok());
  EXPECT_EQ(alive->out, "up\n");
  auto list = d.Do("GET", "/sandboxes/" + sb.id + "/checkpoints", "", true, {}, a);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->status, 200) << list->body;
  auto arr = json::parse(list->body);
  ASSERT_EQ(arr.size(), 1u) << list->body;
  EXPECT_EQ(arr[0].value("checkpointID", ""), ckpt);
  EXPECT_FALSE(arr[0].value("createdAt", "").empty());

  // Another team's key: every checkpoint route is 404, as for a sandbox that does not exist.
  for (auto [method, path, body] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/sandboxes/" + sb.id + "/checkpoints", "{}"},
           {"GET", "/sandboxes/" + sb.id + "/checkpoints", ""},
           {"DELETE", "/sandboxes/" + sb.id + "/checkpoints/" + ckpt, ""},
           {"POST", "/sandboxes/" + sb.id + "/rollback", json{{"checkpointID", ckpt}}.dump()}}) {
    auto r = d.Do(method, path, body, true, {}, b);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->status, 404) << method << " " << path << ": " << r->body;
  }

  // Destroy: files gone, process killed, a file the checkpoint never saw.
  auto wreck = d.Run(
      sb.id, sb.token,
      "kill -9 $(cat /home/user/work/loop.pid); pkill -9 -f 'python3 -m http[.]server'; rm -rf /home/user/work; echo "
      "later > /home/user/new.txt");
  ASSERT_TRUE(wreck.ok());
  auto gone = d.Run(sb.id, sb.token, "ls /home/user/work 2>&1 || echo gone");
  ASSERT_TRUE(gone.ok());
  EXPECT_NE(gone->out.find("gone"), std::string::npos) << gone->out;
  auto dead = to_port();
  ASSERT_TRUE(dead.ok());
  EXPECT_NE(dead->status, 200) << "the web server was killed";

  // Bad requests: no checkpointID 400, unknown checkpoint 404.
  auto bad = d.Do("POST", "/sandboxes/" + sb.id + "/rollback", "{}", true, {}, a);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto unknown = Rollback(d, sb.id, "ckpt-0000000000000000", a);
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->status, 404) << unknown->body;
  auto garbage = Rollback(d, sb.id, "../../etc", a);
  ASSERT_TRUE(garbage.ok());
  EXPECT_EQ(garbage->status, 404) << garbage->body;

  t0 = std::chrono::steady_clock::now();
  auto rb = Rollback(d, sb.id, ckpt, a);
  ASSERT_TRUE(rb.ok());
  ASSERT_EQ(rb->status, 200) << rb->body;
  std::printf("rollback: %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  auto rj = json::parse(rb->body);
  EXPECT_EQ(rj.value("sandboxID", ""), sb.id);
  EXPECT_EQ(rj.value("envdAccessToken", ""), sb.token) << "same token";
  EXPECT_EQ(rj.value("checkpointID", ""), ckpt);
  EXPECT_EQ(CkptState(d, sb.id), "running");

  // Same id and token on the data plane; the files and the process are back,
  // the later file is not.
  auto back = d.Run(sb.id, sb.token,
                    "sha256sum /home/user/work/data.bin | cut -d' ' -f1; cat /home/user/work/data.sha; "
                    "kill -0 $(cat /home/user/work/loop.pid) && echo process-up; "
                    "test -e /home/user/new.txt && echo new-exists || echo new-absent");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->out, sha + sha + "process-up\nnew-absent\n");
  auto page_again = to_port();
  ASSERT_TRUE(page_again.ok());
  EXPECT_EQ(page_again->status, 200) << page_again->body;
  EXPECT_EQ(page_again->body, sha) << "the guest's web server, restored, on the same exposed port";
  // The guest's clock was set again (not the checkpoint's, which is behind).
  auto clock = d.Run(sb.id, sb.token, "date +%s");
  ASSERT_TRUE(clock.ok());
  const int64_t guest_s = std::atoll(clock->out.c_str());
  const int64_t host_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(std::llabs(guest_s - host_s), 5) << "guest clock " << guest_s << " host " << host_s;

  // The checkpoint stays: roll back to it again, then delete it; a deleted one is 404.
  auto again = Rollback(d, sb.id, ckpt, a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 200) << again->body;
  auto del = d.Do("DELETE", "/sandboxes/" + sb.id + "/checkpoints/" + ckpt, "", true, {}, a);
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->status, 204) << del->body;
  auto del2 = d.Do("DELETE", "/sandboxes/" + sb.id + "/checkpoints/" + ckpt, "", true, {}, a);
  ASSERT_TRUE(del2.ok());
  EXPECT_EQ(del2->status, 404) << del2->body;
  auto deleted = Rollback(d, sb.id, ckpt, a);
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->status, 404) << deleted->body;

  // The CLI: airlock sandbox checkpoint | checkpoint ls | rollback | checkpoint rm.
  {
    const std::vector<std::string> cli = {"--state-dir", dir, "sandbox", "--server",
                                          "127.0.0.1:" + std::to_string(d.port())};
    auto with = [&](std::vector<std::string> more) {
      std::vector<std::string> a = cli;
      a.insert(a.end(), more.begin(), more.end());
      return RunCli(a);
    };
    auto c = with({"checkpoint", sb.id});
    ASSERT_EQ(c.code, 0) << c.err;
    const std::string id = c.out.substr(0, c.out.find('\n'));
    EXPECT_EQ(id.rfind("ckpt-", 0), 0u) << c.out;
    auto ls = with({"checkpoint", "ls", sb.id});
    EXPECT_EQ(ls.code, 0) << ls.err;
    EXPECT_NE(ls.out.find(id), std::string::npos) << ls.out;
    auto r = with({"rollback", sb.id, id});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("rolled back"), std::string::npos) << r.out;
    auto rm = with({"checkpoint", "rm", sb.id, id});
    EXPECT_EQ(rm.code, 0) << rm.err;
    auto rm2 = with({"checkpoint", "rm", sb.id, id});
    EXPECT_NE(rm2.code, 0) << "deleting it again fails";
  }

  // Paused: no checkpoint, no rollback (409); a kill removes every checkpoint.
  const std::string ckpt2 = Checkpoint(d, sb.id);
  ASSERT_FALSE(ckpt2.empty());
  auto p = d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->status, 204) << p->body;
  auto pc = d.Do("POST", "/sandboxes/" + sb.id + "/checkpoints", "{}");
  ASSERT_TRUE(pc.ok());
  EXPECT_EQ(pc->status, 409) << pc->body;
  auto pr = Rollback(d, sb.id, ckpt2);
  ASSERT_TRUE(pr.ok());
  EXPECT_EQ(pr->status, 409) << pr->body;

  // Checkpoints survive pause/resume (a resume makes a new network): roll back after one.
  auto resumed = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
  ASSERT_TRUE(resumed.ok());
  ASSERT_EQ(resumed->status, 201) << resumed->body;
  auto after_resume = Rollback(d, sb.id, ckpt2);
  ASSERT_TRUE(after_resume.ok());
  EXPECT_EQ(after_resume->status, 200) << after_resume->body;
  auto works = d.Run(sb.id, sb.token, "cat /home/user/work/data.sha");
  ASSERT_TRUE(works.ok()) << works.status().ToString();
  EXPECT_EQ(works->out, sha);

  // The audit trail has the checkpoint and the rollbacks.
  auto audit = d.Do("GET", "/sandboxes/" + sb.id + "/audit");
  ASSERT_TRUE(audit.ok());
  EXPECT_NE(audit->body.find("sandbox.checkpointed"), std::string::npos);
  EXPECT_NE(audit->body.find("sandbox.rolled_back"), std::string::npos);

  auto metrics = d.Do("GET", "/metrics", "", false);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("airlock_rollbacks_total{result=\"ok\"} 4"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("airlock_checkpoints_total 3"), std::string::npos) << metrics->body;

  EXPECT_EQ(CheckpointDirsOf(sb.id).size(), 1u);
  auto k = d.Do("DELETE", "/sandboxes/" + sb.id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204);
  EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)))
      << "kill deletes the sandbox's checkpoints";
  fs::remove_all(dir);
}

// Each cycle writes a file, checkpoints, wrecks the home directory, rolls
// back, and checks every file so far. Checkpoints are deleted as it goes
// (at most Manager::kMaxCheckpoints per sandbox).
TEST(CheckpointTest, TwentyCheckpointRollbackCyclesLoseNothing) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  TestDaemon d(dir);
  CkptSandbox sb = CkptCreate(d);
  ASSERT_FALSE(sb.id.empty());
  const std::string backing = DiskBackingOf(sb.id);
  double ckpt_ms = 0, rb_ms = 0;
  constexpr int kCycles = 20;
  for (int i = 0; i < kCycles; ++i) {
    SCOPED_TRACE("cycle " + std::to_string(i));
    auto w = d.Run(sb.id, sb.token,
                   "head -c 50000 /dev/urandom > /home/user/f" + std::to_string(i) +
                       " && sha256sum /home/user/f* > /home/user/sums && sync");
    ASSERT_TRUE(w.ok() && w->exit_code == 0) << (w.ok() ? w->err : w.status().ToString());
    auto t0 = std::chrono::steady_clock::now();
    const std::string ckpt = Checkpoint(d, sb.id);
    ASSERT_FALSE(ckpt.empty());
    auto t1 = std::chrono::steady_clock::now();
    auto wreck = d.Run(sb.id, sb.token, "rm -f /home/user/f* /home/user/sums; echo junk > /home/user/junk");
    ASSERT_TRUE(wreck.ok());
    auto t2 = std::chrono::steady_clock::now();
    auto rb = Rollback(d, sb.id, ckpt);
    ASSERT_TRUE(rb.ok());
    ASSERT_EQ(rb->status, 200) << rb->body;
    auto t3 = std::chrono::steady_clock::now();
    ckpt_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
    rb_ms += std::chrono::duration<double, std::milli>(t3 - t2).count();
    auto check = d.Run(sb.id, sb.token,
                       "cd /home/user && sha256sum -c --quiet sums && ls f* | wc -l && "
                       "(test -e junk && echo junk || echo clean)");
    ASSERT_TRUE(check.ok());
    EXPECT_EQ(check->exit_code, 0) << check->out << check->err;
    EXPECT_EQ(check->out, std::to_string(i + 1) + "\nclean\n");
    auto del = d.Do("DELETE", "/sandboxes/" + sb.id + "/checkpoints/" + ckpt);
    ASSERT_TRUE(del.ok());
    EXPECT_EQ(del->status, 204);
  }
  std::printf("%d cycles: checkpoint %.0f ms, rollback %.0f ms on average (HTTP round trip included)\n", kCycles,
              ckpt_ms / kCycles, rb_ms / kCycles);
  EXPECT_EQ(DiskBackingOf(sb.id), backing) << "rollbacks copy the checkpoint's disk: the chain never grows";
  EXPECT_TRUE(CheckpointDirsOf(sb.id).empty());
  fs::remove_all(dir);
}

// The limit per sandbox, and checkpoints across a daemon restart: an adopted
// sandbox's checkpoints stay usable; uncommitted ones and those of sandboxes
// that are gone are removed at start.
TEST(CheckpointTest, LimitRestartAndStartSweep) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  CkptSandbox sb;
  std::string ckpt;
  const std::string root = StateDir() + "/snapshots/checkpoints/";
  // A save a dead daemon never committed, and a checkpoint of a sandbox that is gone.
  const std::string orphan = root + "zzzzzzzzzzzzzzzzzzzz-ckpt-00000000000000aa";
  const std::string forks = StateDir() + "/snapshots/forks/";
  const std::string leftover_forks[2] = {forks + "zzzzzzzzzzzzzzzzzzzz-0000aaaa",
                                         forks + "zzzzzzzzzzzzzzzzzzzz-0000bbbb"};
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false, port);
    sb = CkptCreate(d);
    ASSERT_FALSE(sb.id.empty());
    ckpt = Checkpoint(d, sb.id);
    ASSERT_FALSE(ckpt.empty());
    for (int i = 1; i < 16; ++i) ASSERT_FALSE(Checkpoint(d, sb.id).empty()) << i;
    auto over = d.Do("POST", "/sandboxes/" + sb.id + "/checkpoints", "{}");
    ASSERT_TRUE(over.ok());
    EXPECT_EQ(over->status, 409) << "the 17th: " << over->body;
    auto w = d.Run(sb.id, sb.token, "echo after > /home/user/after.txt && sync");
    ASSERT_TRUE(w.ok());
    fs::create_directories(root + sb.id + "-ckpt-00000000000000ff.tmp");
    fs::create_directories(orphan);
    std::ofstream(orphan + "/memory") << "x";
    // Two leftover fork snapshots (issue 32 item 12), the second layered on
    // the first (a fork of a fork child), both unused and older than any
    // fork in progress: one start removes both, not one per start.
    for (const auto& [name, backing] : {std::pair{leftover_forks[0], std::string("/nonexistent/base.qcow2")},
                                        std::pair{leftover_forks[1], leftover_forks[0] + "/disk.qcow2"}}) {
      fs::create_directories(name);
      std::ofstream(name + "/manifest.json") << json{{"disk_backing", backing}}.dump();
      fs::last_write_time(name, fs::file_time_type::clock::now() - std::chrono::hours(1));
    }
  }  // SIGTERM without --kill-on-exit: the sandbox keeps running
  TestDaemon d(dir, {}, false, port);
  EXPECT_FALSE(fs::exists(root + sb.id + "-ckpt-00000000000000ff.tmp")) << "uncommitted checkpoint swept";
  EXPECT_FALSE(fs::exists(orphan)) << "checkpoint of a sandbox that is gone swept";
  for (const auto& f : leftover_forks) EXPECT_FALSE(fs::exists(f)) << "leftover fork snapshot swept: " << f;
  ASSERT_EQ(CkptState(d, sb.id), "running");
  auto list = d.Do("GET", "/sandboxes/" + sb.id + "/checkpoints");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(json::parse(list->body).size(), 16u) << list->body;
  auto rb = Rollback(d, sb.id, ckpt);
  ASSERT_TRUE(rb.ok());
  ASSERT_EQ(rb->status, 200) << rb->body;
  auto check = d.Run(sb.id, sb.token, "test -e /home/user/after.txt && echo present || echo absent");
  ASSERT_TRUE(check.ok());
  EXPECT_EQ(check->out, "absent\n");
  auto k = d.Do("DELETE", "/sandboxes/" + sb.id);
  ASSERT_TRUE(k.ok());
  EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)));
  fs::remove_all(dir);
}

// A daemon killed with SIGKILL in the middle of a checkpoint or a rollback,
// at moments timed by the clock (Kill9AtEachMomentOfARollbackLosesNothing
// holds a rollback at each named moment): the next start leaves no
// uncommitted checkpoint and the sandbox runs (a checkpoint: the VMM
// stopped for the save is continued; a rollback: completed, or never
// begun); nothing leaks once it is killed.
TEST(CheckpointTest, Kill9DuringCheckpointOrRollbackLeavesNothingBehind) {
  AIRLOCK_REQUIRE_VM();
  for (const char* phase : {"checkpoint", "rollback"}) {
    for (int delay_ms : {40, 150, 400}) {
      if (std::string(phase) == "rollback" && delay_ms != 150) continue;  // the held test covers each moment
      SCOPED_TRACE(std::string(phase) + ", kill -9 after " + std::to_string(delay_ms) + " ms");
      std::string dir = MakeTempDir();
      uint16_t port = FreeTcpPort();
      SandboxResources resources;
      CkptSandbox sb;
      {
        TestDaemon d(dir, {}, /*kill_on_exit=*/false, port);
        sb = CkptCreate(d);
        ASSERT_FALSE(sb.id.empty());
        std::string ckpt;
        if (std::string(phase) == "rollback") {
          ckpt = Checkpoint(d, sb.id);
          ASSERT_FALSE(ckpt.empty());
        }
        std::thread op([&] {
          if (ckpt.empty())
            (void)d.Do("POST", "/sandboxes/" + sb.id + "/checkpoints", "{}");
          else
            (void)Rollback(d, sb.id, ckpt);
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));  // the moment of the kill
        d.Kill9();
        op.join();
      }
      TestDaemon d(dir, {}, false, port);
      for (const auto& name : CheckpointDirsOf(sb.id)) {
        EXPECT_EQ(name.find(".tmp"), std::string::npos) << "uncommitted checkpoint left: " << name;
      }
      std::string state = CkptState(d, sb.id);
      std::printf("# %s, kill -9 after %d ms: sandbox %s\n", phase, delay_ms, state.c_str());
      EXPECT_EQ(state, "running");
      if (state == "running") {
        auto e = d.Run(sb.id, sb.token, "echo ok");
        ASSERT_TRUE(e.ok()) << e.status().ToString();
        EXPECT_EQ(e->out, "ok\n");
        EXPECT_FALSE(Checkpoint(d, sb.id).empty()) << "and it checkpoints again";
        auto k = d.Do("DELETE", "/sandboxes/" + sb.id);
        ASSERT_TRUE(k.ok());
      }
      EXPECT_TRUE(WaitFor([&] { return resources.Snapshot() == HostResources{}; }, std::chrono::seconds(30)))
          << resources.Snapshot().ToString();
      EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)));
      fs::remove_all(dir);
    }
  }
}

// The daemon's log from byte `from` on (what a daemon started after that wrote).
std::string LogFrom(const std::string& dir, std::streamoff from) {
  std::ifstream f(dir + "/daemon.log", std::ios::binary);
  f.seekg(from);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::streamoff LogSize(const std::string& dir) {
  std::error_code ec;
  auto n = fs::file_size(dir + "/daemon.log", ec);
  return ec ? 0 : static_cast<std::streamoff>(n);
}

// A daemon killed with SIGKILL at each moment of a rollback (issue 32 item
// 8), held there by the test hook AIRLOCK_TEST_HOLD_ROLLBACK
// (core/checkpoints.cc): before the old VMM stops; after it stopped, nothing
// new up; with the new VMM up and its agent initialised but recorded
// nowhere; with it recorded in the rollback intent but not in the
// sandbox's row. Each time the next daemon completes the rollback: the
// sandbox runs the checkpoint's state, with one VMM and one network (no
// orphan), and both checkpoints are still listed. A rollback that cannot
// be completed leaves the sandbox paused on its checkpoint, every
// checkpoint kept. At the end a further rollback to each works, and a
// kill removes everything.
TEST(CheckpointTest, Kill9AtEachMomentOfARollbackLosesNothing) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  SandboxResources resources;
  CkptSandbox sb;
  std::string first, second;
  auto mark = [&](const TestDaemon& d) -> std::string {
    auto r = d.Run(sb.id, sb.token, "cat /home/user/mark");
    if (!r.ok()) return r.status().ToString();
    return r->out;
  };
  auto write_mark = [&](const TestDaemon& d, const std::string& text) {
    auto r = d.Run(sb.id, sb.token, "echo " + text + " > /home/user/mark && sync");
    ASSERT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->err : r.status().ToString());
  };
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false, port);
    sb = CkptCreate(d);
    ASSERT_FALSE(sb.id.empty());
    write_mark(d, "one");
    first = Checkpoint(d, sb.id);
    write_mark(d, "two");
    second = Checkpoint(d, sb.id);
    ASSERT_FALSE(first.empty() || second.empty());
  }  // SIGTERM without --kill-on-exit: the sandbox keeps running
  int round = 0;
  for (const char* point : {"stopping", "stopped", "restoring", "restored"}) {
    SCOPED_TRACE(std::string("kill -9 with the rollback held at ") + point);
    const std::string& target = round++ % 2 == 0 ? first : second;
    const std::string want = &target == &first ? "one\n" : "two\n";
    const auto from = LogSize(dir);
    {
      TestDaemon d(dir, {}, false, port, {{"AIRLOCK_TEST_HOLD_ROLLBACK", point}});
      ASSERT_EQ(CkptState(d, sb.id), "running");
      write_mark(d, "moved");
      std::thread op([&] { (void)Rollback(d, sb.id, target); });
      const std::string held = std::string("test hook: rollback held at ") + point;
      const bool reached =
          WaitFor([&] { return LogFrom(dir, from).find(held) != std::string::npos; }, std::chrono::seconds(90));
      d.Kill9();
      op.join();
      ASSERT_TRUE(reached) << LogFrom(dir, from);
    }
    const auto restart = LogSize(dir);
    TestDaemon d(dir, {}, false, port);
    ASSERT_EQ(CkptState(d, sb.id), "running") << LogFrom(dir, restart);
    EXPECT_EQ(mark(d), want) << "the rollback to " << target << " was completed";
    // Recorded as up: its new VMM is adopted; otherwise restored again.
    const std::string how = std::string(point) == "restored" ? "completed: new VMM pid" : "completed after a restart";
    EXPECT_NE(LogFrom(dir, restart).find("rollback to " + target + " " + how), std::string::npos)
        << LogFrom(dir, restart);
    auto list = d.Do("GET", "/sandboxes/" + sb.id + "/checkpoints");
    ASSERT_TRUE(list.ok());
    std::set<std::string> listed;
    for (const auto& c : json::parse(list->body)) listed.insert(c.value("checkpointID", ""));
    EXPECT_EQ(listed, (std::set<std::string>{first, second})) << list->body;
    HostResources h = resources.Snapshot();
    EXPECT_EQ(h.vmm_pids.size(), 1u) << "no orphan VMM: " << h.ToString();
    EXPECT_EQ(h.netns.size(), 1u) << h.ToString();
    EXPECT_EQ(h.leases.size(), 1u) << h.ToString();
    std::printf("# held at %s: sandbox %s, mark %s", point, CkptState(d, sb.id).c_str(), mark(d).c_str());
  }
  // A rollback that cannot be completed after the restart (bytes of the
  // checkpoint's memory changed in place: only the restore's CRC finds it):
  // the sandbox is kept paused on that checkpoint, nothing of it running,
  // every checkpoint listed; once the file is right again a resume
  // completes the rollback and the checkpoint stays.
  {
    const auto from = LogSize(dir);
    TestDaemon d(dir, {}, false, port, {{"AIRLOCK_TEST_HOLD_ROLLBACK", "stopped"}});
    write_mark(d, "moved");
    std::thread op([&] { (void)Rollback(d, sb.id, first); });
    const bool reached =
        WaitFor([&] { return LogFrom(dir, from).find("test hook: rollback held at stopped") != std::string::npos; },
                std::chrono::seconds(90));
    d.Kill9();
    op.join();
    ASSERT_TRUE(reached) << LogFrom(dir, from);
  }
  const std::string memory = StateDir() + "/snapshots/checkpoints/" + sb.id + "-" + first + "/memory";
  const auto middle = static_cast<std::streamoff>(fs::file_size(memory) / 2);
  char original[8];
  {
    std::fstream f(memory, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(middle);
    f.read(original, sizeof original);
    f.seekp(middle);
    f.write("\x55\xaa\x55\xaa\x55\xaa\x55\xaa", 8);
  }
  {
    const auto restart = LogSize(dir);
    TestDaemon d(dir, {}, false, port);
    EXPECT_EQ(CkptState(d, sb.id), "paused") << LogFrom(dir, restart);
    auto list = d.Do("GET", "/sandboxes/" + sb.id + "/checkpoints");
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(json::parse(list->body).size(), 2u) << list->body;
    HostResources h = resources.Snapshot();
    EXPECT_TRUE(h.vmm_pids.empty() && h.netns.empty() && h.leases.empty()) << h.ToString();
    auto again = d.Do("POST", "/sandboxes/" + sb.id + "/resume", R"({"timeout":900})");
    ASSERT_TRUE(again.ok());
    EXPECT_GE(again->status, 400) << again->body;
    EXPECT_EQ(CkptState(d, sb.id), "paused");
  }
  {
    std::fstream f(memory, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(middle);
    f.write(original, sizeof original);
  }
  // Every checkpoint is still usable, and a kill removes it all.
  TestDaemon d(dir, {}, /*kill_on_exit=*/true, port);
  auto resumed = d.Do("POST", "/sandboxes/" + sb.id + "/resume", R"({"timeout":900})");
  ASSERT_TRUE(resumed.ok());
  EXPECT_LT(resumed->status, 300) << resumed->body;
  ASSERT_EQ(CkptState(d, sb.id), "running");
  EXPECT_EQ(mark(d), "one\n") << "the resume completed the rollback";
  EXPECT_EQ(CheckpointDirsOf(sb.id).size(), 2u) << "the resume kept the checkpoint";
  for (const auto& [ckpt, want] : {std::pair{first, "one\n"}, std::pair{second, "two\n"}}) {
    auto rb = Rollback(d, sb.id, ckpt);
    ASSERT_TRUE(rb.ok());
    EXPECT_EQ(rb->status, 200) << rb->body;
    EXPECT_EQ(mark(d), want);
  }
  auto k = d.Do("DELETE", "/sandboxes/" + sb.id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204) << k->body;
  EXPECT_TRUE(WaitFor([&] { return resources.Snapshot() == HostResources{}; }, std::chrono::seconds(30)))
      << resources.Snapshot().ToString();
  EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)));
  fs::remove_all(dir);
}

// A rollback that fails: before the VMM is stopped (a truncated checkpoint:
// its sizes are checked first) the sandbox runs on untouched; after (bytes
// changed in place: only the CRC on restore finds it) it is reported lost and
// killed, and nothing of it is left.
TEST(CheckpointTest, FailedRollbackLeavesTheSandboxOrSaysItIsLost) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  SandboxResources resources;
  TestDaemon d(dir);
  CkptSandbox sb = CkptCreate(d);
  ASSERT_FALSE(sb.id.empty());
  auto w = d.Run(sb.id, sb.token, "echo before > /home/user/mark");
  ASSERT_TRUE(w.ok());
  const std::string truncated = Checkpoint(d, sb.id), flipped = Checkpoint(d, sb.id);
  ASSERT_FALSE(truncated.empty());
  ASSERT_FALSE(flipped.empty());
  auto w2 = d.Run(sb.id, sb.token, "echo after > /home/user/mark");
  ASSERT_TRUE(w2.ok());
  const std::string root = StateDir() + "/snapshots/checkpoints/" + sb.id + "-";
  fs::resize_file(root + truncated + "/memory", fs::file_size(root + truncated + "/memory") - 1);
  {
    std::fstream f(root + flipped + "/memory", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(root + flipped + "/memory") / 2));
    f.write("\x55\xaa\x55\xaa\x55\xaa\x55\xaa", 8);
  }

  auto r1 = Rollback(d, sb.id, truncated);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->status, 500) << r1->body;
  EXPECT_EQ(r1->body.find("VMM was stopped"), std::string::npos) << "checked before stopping: " << r1->body;
  EXPECT_EQ(CkptState(d, sb.id), "running");
  auto still = d.Run(sb.id, sb.token, "cat /home/user/mark");
  ASSERT_TRUE(still.ok()) << still.status().ToString();
  EXPECT_EQ(still->out, "after\n") << "untouched";

  auto r2 = Rollback(d, sb.id, flipped);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->status, 500) << r2->body;
  EXPECT_NE(r2->body.find("VMM was stopped"), std::string::npos) << r2->body;
  EXPECT_NE(r2->body.find("must be killed"), std::string::npos) << r2->body;
  EXPECT_TRUE(WaitFor([&] { return CkptState(d, sb.id) == "http 404"; }, std::chrono::seconds(30)))
      << "a lost sandbox is killed: " << CkptState(d, sb.id);
  auto audit = d.Do("GET", "/sandboxes/" + sb.id + "/audit");
  ASSERT_TRUE(audit.ok());
  EXPECT_NE(audit->body.find("sandbox.rollback_failed"), std::string::npos) << audit->body;
  EXPECT_TRUE(WaitFor([&] { return resources.Snapshot() == HostResources{}; }, std::chrono::seconds(30)))
      << resources.Snapshot().ToString();
  EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)));
  fs::remove_all(dir);
}

// Pause, rollback and kill of one sandbox at the same moment are serialised
// (Sandbox::op_mu_): whichever runs second sees the state the first left
// (a rollback after a pause is 409; a pause after a rollback pauses the
// rolled-back sandbox), and a kill racing a rollback leaves nothing behind.
TEST(CheckpointTest, ConcurrentPauseRollbackAndKillAreSerialised) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  SandboxResources resources;
  TestDaemon d(dir);
  CkptSandbox sb = CkptCreate(d);
  ASSERT_FALSE(sb.id.empty());
  const std::string ckpt = Checkpoint(d, sb.id);
  ASSERT_FALSE(ckpt.empty());
  int rollback_status = 0, pause_status = 0;
  std::thread rb([&] {
    auto r = Rollback(d, sb.id, ckpt);
    rollback_status = r.ok() ? r->status : -1;
  });
  std::thread pause([&] {
    auto r = d.Do("POST", "/sandboxes/" + sb.id + "/pause", "{}");
    pause_status = r.ok() ? r->status : -1;
  });
  rb.join();
  pause.join();
  std::printf("# rollback %d, pause %d\n", rollback_status, pause_status);
  EXPECT_EQ(pause_status, 204);
  EXPECT_TRUE(rollback_status == 200 || rollback_status == 409) << rollback_status;
  EXPECT_EQ(CkptState(d, sb.id), "paused");
  auto c = d.Do("POST", "/v2/sandboxes/" + sb.id + "/connect", "{}");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->status, 201) << c->body;
  auto e = d.Run(sb.id, sb.token, "echo ok");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->out, "ok\n");

  int kill_status = 0;
  std::thread rb2([&] {
    auto r = Rollback(d, sb.id, ckpt);
    rollback_status = r.ok() ? r->status : -1;
  });
  std::thread kill([&] {
    auto r = d.Do("DELETE", "/sandboxes/" + sb.id);
    kill_status = r.ok() ? r->status : -1;
  });
  rb2.join();
  kill.join();
  std::printf("# rollback %d, kill %d\n", rollback_status, kill_status);
  EXPECT_EQ(kill_status, 204);
  EXPECT_TRUE(WaitFor([&] { return CkptState(d, sb.id) == "http 404"; }, std::chrono::seconds(30)));
  EXPECT_TRUE(WaitFor([&] { return resources.Snapshot() == HostResources{}; }, std::chrono::seconds(30)))
      << resources.Snapshot().ToString();
  EXPECT_TRUE(WaitFor([&] { return CheckpointDirsOf(sb.id).empty(); }, std::chrono::seconds(30)));
  fs::remove_all(dir);
}

// A checkpoint needs the guest's memory in free disk beyond --disk-reserve:
// refused with 507 and the numbers otherwise, and the sandbox runs on.
TEST(CheckpointTest, CheckpointOnALowDiskIs507AndTheSandboxRunsOn) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(StateDir().c_str(), &vfs), 0);
  const int64_t free_mib = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  // Creates fit (they need the reserve only), a 512 MiB guest's checkpoint does not.
  const int64_t reserve = free_mib - 150;
  ASSERT_GT(reserve, 0);
  // Creates also check the registry's filesystem (the temp dir).
  struct statvfs db;
  ASSERT_EQ(::statvfs(dir.c_str(), &db), 0);
  if ((static_cast<int64_t>(db.f_bavail) * static_cast<int64_t>(db.f_frsize) >> 20) < reserve)
    GTEST_SKIP() << "the temp dir's filesystem has less free space than the state dir's: no reserve fits both";
  TestDaemon d(dir, {"--disk-reserve", std::to_string(reserve), "--disk-per-create", "0"});
  CkptSandbox sb = CkptCreate(d);
  ASSERT_FALSE(sb.id.empty());
  auto r = d.Do("POST", "/sandboxes/" + sb.id + "/checkpoints", "{}");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 507) << r->body;
  EXPECT_NE(r->body.find("--disk-reserve"), std::string::npos) << r->body;
  EXPECT_TRUE(CheckpointDirsOf(sb.id).empty());
  auto e = d.Run(sb.id, sb.token, "echo ok");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->out, "ok\n");
  (void)d.Do("DELETE", "/sandboxes/" + sb.id);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace airlock::testing
