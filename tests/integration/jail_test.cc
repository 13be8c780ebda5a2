// The VMM jail (docs/runtime-qemu.md "Jail"), checked from the outside on
// sandboxes started by a real daemon: each QEMU runs as its own non-root uid
// with no capabilities, in a mount namespace of its own, and with its own
// credentials, inside its own namespace (and even in the host's), it can
// open neither the daemon's secrets.key nor its database nor another
// sandbox's files; its cpu cgroup caps it at its vCPU count.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/manager.h"
#include "runtime/qemu/snapshot.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::map<std::string, std::string> ProcStatus(pid_t pid) {
  std::map<std::string, std::string> out;
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    out[line.substr(0, colon)] = v;
  }
  return out;
}

// In a child: (optionally) enter `pid`'s mount namespace and root, take
// uid:gid with no groups and no capabilities, then open(path, flags).
// 0 when the open worked, else its errno (or -1 when the setup failed).
int OpenAs(pid_t pid, bool its_mount_ns, uid_t uid, gid_t gid, const std::string& path, int flags) {
  const std::string ns = "/proc/" + std::to_string(pid) + "/ns/mnt";
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t c = ::fork();
  if (c == 0) {
    int result = -1;
    int nsfd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    int rootfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = nsfd >= 0 && rootfd >= 0;
    if (ok && its_mount_ns) ok = ::setns(nsfd, CLONE_NEWNS) == 0 && ::fchdir(rootfd) == 0 && ::chroot(".") == 0;
    ok = ok && ::setgroups(0, nullptr) == 0 && ::setresgid(gid, gid, gid) == 0 && ::setresuid(uid, uid, uid) == 0;
    if (ok) {
      int fd = ::open(path.c_str(), flags | O_CLOEXEC);
      result = fd >= 0 ? 0 : errno;
    }
    (void)!::write(p[1], &result, sizeof result);
    ::_exit(0);
  }
  ::close(p[1]);
  int result = -1;
  if (::read(p[0], &result, sizeof result) != sizeof result) result = -1;
  ::close(p[0]);
  int ws;
  ::waitpid(c, &ws, 0);
  return result;
}

std::string CgroupPath(pid_t pid, const std::string& controller) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    // "<n>:<controllers>:<path>"
    auto a = line.find(':'), b = line.find(':', a + 1);
    std::stringstream ctls(line.substr(a + 1, b - a - 1));
    std::string c;
    while (std::getline(ctls, c, ',')) {
      if (c == controller) return line.substr(b + 1);
    }
  }
  return "";
}

std::string Trimmed(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

TEST(JailTest, VmmIsUnprivilegedAndSeesNothingButItsOwnFiles) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  // A secret, so that secrets.key and the database exist beside --db.
  auto set = RunCli({"secret", "--db", dir + "/airlock.db", "set", "JAIL_CANARY"}, "jail-canary-value\n");
  ASSERT_EQ(set.code, 0) << set.err;
  const std::string secrets_key = dir + "/secrets.key", db = dir + "/airlock.db";
  ASSERT_TRUE(fs::exists(secrets_key)) << "the daemon keeps its key elsewhere now; update this test";
  ASSERT_TRUE(fs::exists(db));

  TestDaemon d(dir);
  ASSERT_FALSE(d.key().empty()) << ReadFileOrDie(dir + "/daemon.log");
  std::vector<std::string> ids, tokens;
  for (int i = 0; i < 2; ++i) {
    auto created = d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}, {"cpuCount", 1}}.dump());
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    ASSERT_EQ(created->status, 201) << created->body << "\n" << ReadFileOrDie(dir + "/daemon.log");
    json j = json::parse(created->body);
    ids.push_back(j["sandboxID"]);
    tokens.push_back(j.value("envdAccessToken", ""));
  }
  auto record = [&](const std::string& id) {
    return json::parse(ReadFileOrDie(StateDir() + "/run/" + id + "/vm/vm.json"));
  };
  json a = record(ids[0]), b = record(ids[1]);
  const pid_t pid = a["pid"].get<pid_t>();
  ASSERT_GT(pid, 0);

  // Who it is: not root, no capabilities at all, no way back.
  auto st = ProcStatus(pid);
  std::cerr << "vmm pid=" << pid << " Uid: " << st["Uid"] << " CapEff: " << st["CapEff"] << "\n";
  uid_t uid = 0;
  gid_t gid = 0;
  {
    std::stringstream u(st["Uid"]), g(st["Gid"]);
    u >> uid;
    g >> gid;
  }
  EXPECT_NE(uid, 0u) << st["Uid"];
  EXPECT_NE(gid, 0u) << st["Gid"];
  EXPECT_EQ(st["Uid"],
            std::to_string(uid) + "\t" + std::to_string(uid) + "\t" + std::to_string(uid) + "\t" + std::to_string(uid));
  for (const char* cap : {"CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb"})
    EXPECT_EQ(st[cap], "0000000000000000") << cap;
  EXPECT_EQ(st["NoNewPrivs"], "1");
  EXPECT_EQ(st["Groups"], "");
  ASSERT_TRUE(a["jail"].is_object()) << a.dump();
  EXPECT_EQ(a["jail"]["uid"].get<uid_t>(), uid);
  // Two sandboxes, two uids.
  ASSERT_TRUE(b["jail"].is_object());
  EXPECT_NE(b["jail"]["uid"].get<uid_t>(), uid);

  // Where it is: a mount namespace of its own.
  auto ns = [](const std::string& p) { return fs::read_symlink(p).string(); };
  EXPECT_NE(ns("/proc/" + std::to_string(pid) + "/ns/mnt"), ns("/proc/self/ns/mnt"));

  // What it can open, with its own credentials.
  const std::string own_overlay = StateDir() + "/run/" + ids[0] + "/vm/vmm/overlay.qcow2";
  const std::string other_overlay = StateDir() + "/run/" + ids[1] + "/vm/vmm/overlay.qcow2";
  const std::string other_run = StateDir() + "/run/" + ids[1];
  const std::string own_record = StateDir() + "/run/" + ids[0] + "/vm/vm.json";
  const std::string rootfs = a["rootfs_template"];
  ASSERT_TRUE(fs::exists(other_overlay));
  // Positive controls: the open itself works, so the refusals below mean something.
  EXPECT_EQ(OpenAs(pid, true, uid, gid, own_overlay, O_RDWR), 0) << own_overlay;
  EXPECT_EQ(OpenAs(pid, true, uid, gid, rootfs, O_RDONLY), 0) << rootfs;
  EXPECT_NE(OpenAs(pid, true, uid, gid, rootfs, O_RDWR), 0) << "template rootfs writable from the VMM";
  for (bool its_ns : {true, false}) {
    SCOPED_TRACE(its_ns ? "in the VMM's mount namespace" : "in the host's mount namespace");
    for (const std::string& path : {secrets_key, db, other_overlay, other_run, own_record, StateDir() + "/run"}) {
      int err = OpenAs(pid, its_ns, uid, gid, path, O_RDONLY);
      EXPECT_GT(err, 0) << path << " opened by the VMM's uid";
    }
  }
  // Nothing of the host but what it needs: no /proc, /sys, /etc/shadow, /root.
  // (A clone of a shared-RAM template has a procfs of its own process only:
  // no other pid, no system file.)
  for (const char* path : {"/proc/1/cmdline", "/proc/meminfo", "/proc/sys/kernel/hostname", "/sys/kernel",
                           "/etc/shadow", "/etc/passwd", "/root", "/tmp"})
    EXPECT_EQ(OpenAs(pid, true, uid, gid, path, O_RDONLY), ENOENT) << path;

  // CPU: at most its vCPU count in host cores.
  std::string cpu = CgroupPath(pid, "cpu");
  if (!cpu.empty()) {  // cgroup v1
    std::string base = "/sys/fs/cgroup/cpu" + cpu;
    EXPECT_NE(cpu, "/");
    long period = std::stol(Trimmed(base + "/cpu.cfs_period_us"));
    EXPECT_EQ(std::stol(Trimmed(base + "/cpu.cfs_quota_us")), 1 * period) << base;
  } else {
    std::string v2 = CgroupPath(pid, "");
    EXPECT_EQ(Trimmed("/sys/fs/cgroup" + v2 + "/cpu.max"), "100000 100000");
  }

  // And it still works: a command runs, the sandbox is destroyed cleanly.
  auto e = d.Run(ids[0], tokens[0], "echo jailed-ok");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->out, "jailed-ok\n");
  for (const auto& id : ids) {
    auto k = d.Do("DELETE", "/sandboxes/" + id);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(k->status, 204) << k->body;
  }
  EXPECT_FALSE(fs::exists(StateDir() + "/run/" + ids[0]));
}

// A jailed VMM adopted by a restarted daemon (vm.json) keeps its jail and
// its uid lease, and can still be paused (QEMU, as its uid, connects to the
// daemon's migration socket) and resumed (into a new jail, a new uid).
TEST(JailTest, AdoptedJailedVmmPausesResumesAndFreesItsUid) {
  AIRLOCK_REQUIRE_VM();
  std::string dir = MakeTempDir();
  uint16_t port = FreeTcpPort();
  std::string id, token;
  auto jail_of = [&](const std::string& sid) {
    return json::parse(ReadFileOrDie(StateDir() + "/run/" + sid + "/vm/vm.json"))["jail"];
  };
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false, port);
    auto created = d.Do("POST", "/v2/sandboxes", json{{"templateID", "base"}}.dump());
    ASSERT_TRUE(created.ok() && created->status == 201) << (created.ok() ? created->body : "");
    json j = json::parse(created->body);
    id = j["sandboxID"];
    token = j.value("envdAccessToken", "");
    auto w = d.Data(id, token, "POST", "/files?path=/home/user/keep.txt&username=user", "kept-through-the-jail");
    ASSERT_TRUE(w.ok() && w->status == 200);
    d.Kill9();  // the VMM keeps running, jailed
  }
  json before = jail_of(id);
  ASSERT_TRUE(before.is_object());
  const std::string lease = before["uid_lease"];
  ASSERT_TRUE(fs::exists(lease)) << lease;
  TestDaemon d(dir, {}, /*kill_on_exit=*/true, port);
  auto p = d.Do("POST", "/sandboxes/" + id + "/pause", "{}");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->status, 204) << p->body << "\n" << ReadFileOrDie(dir + "/daemon.log");
  EXPECT_FALSE(fs::exists(lease)) << "the paused VMM's uid is free again";
  auto c = d.Do("POST", "/v2/sandboxes/" + id + "/connect", "{}");
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->status, 201) << c->body;
  json after = jail_of(id);
  ASSERT_TRUE(after.is_object());
  auto st = ProcStatus(json::parse(ReadFileOrDie(StateDir() + "/run/" + id + "/vm/vm.json"))["pid"].get<pid_t>());
  EXPECT_EQ(st["Uid"].substr(0, st["Uid"].find('\t')), std::to_string(after["uid"].get<uid_t>()));
  EXPECT_EQ(st["CapEff"], "0000000000000000");
  auto r = d.Data(id, token, "GET", "/files?path=/home/user/keep.txt&username=user");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "kept-through-the-jail");
  const std::string lease2 = after["uid_lease"];
  auto k = d.Do("DELETE", "/sandboxes/" + id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204);
  EXPECT_FALSE(fs::exists(lease2)) << "destroy frees the uid";
}

// A VMM writes its overlay, qcow2 header included, and a snapshot copies
// that overlay. A header rewritten to name a host file as backing file must
// not make the next VMM (or root's qemu-img) read that file: the jail holds
// only the chain our manifests name, so the restore fails instead.
TEST(JailTest, BackingFileNamedInAVmmWrittenHeaderIsNotOpened) {
  AIRLOCK_REQUIRE_VM();
  ManagerConfig config;
  config.state_dir = StateDir();
  config.build_image_if_missing = false;
  config.template_snapshots = true;
  auto m = Manager::Open(config);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::string dir = MakeTempDir();
  const std::string secret = dir + "/host-secret";
  {
    std::ofstream f(secret);
    for (int i = 0; i < 65536; ++i) f << "HOSTSECRET-0123456789abcdef-";
  }
  ::chmod(secret.c_str(), 0600);
  auto sb = (*m)->Create(CreateOptions{});
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string name = "tamper-" + std::to_string(::getpid());
  auto snap = (*m)->CreateNamedSnapshot((*sb)->id(), name);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  ASSERT_TRUE((*m)->Destroy((*sb)->id()).ok());
  // What a compromised VMM could have written into its overlay before the snapshot.
  const std::string disk = snap->dir + "/" + qemu::kSnapshotDisk;
  ::chmod(disk.c_str(), 0644);
  auto rebase = airlock::Run({"qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "raw", "-b", secret, disk});
  ::chmod(disk.c_str(), 0444);
  ASSERT_TRUE(rebase.ok() && rebase->status.success()) << (rebase.ok() ? rebase->err : "");
  auto info = airlock::Run({"qemu-img", "info", "-U", disk});
  ASSERT_TRUE(info.ok());
  ASSERT_NE(info->out.find(secret), std::string::npos) << info->out;
  ASSERT_TRUE(qemu::ReadSnapshot(snap->dir).ok()) << qemu::ReadSnapshot(snap->dir).status().ToString();

  CreateOptions from;
  from.named_snapshot_dir = snap->dir;
  auto e = (*m)->Create(from);
  if (e.ok()) {
    ADD_FAILURE() << "a sandbox started on a disk whose header names " << secret << " as its backing file";
    (void)(*m)->Destroy((*e)->id());
  } else {
    std::cerr << "refused as it should be: " << e.status().ToString().substr(0, 400) << "\n";
  }
  EXPECT_TRUE((*m)->DeleteNamedSnapshot(name).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace airlock::testing
