// Integration tests of shared-RAM template snapshots (docs/snapshots.md
// "Shared-RAM templates") against real microVMs: sandboxes created from the
// template map its RAM file copy-on-write; the file never changes and no
// clone's VMM can write it; clones share memory (PSS); pause/resume and fork
// of a clone work; the snapshot GC keeps a template a VMM maps.
// Skips without root / QEMU / image.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/proc_fields.h"
#include "core/manager.h"
#include "image/hash.h"
#include "image/image.h"
#include "runtime/qemu/snapshot.h"
#include "tests/integration/daemon.h"
#include "tests/integration/harness.h"

namespace airlock::testing {
namespace shared_ram_test {

namespace fs = std::filesystem;

StatusOr<std::unique_ptr<Manager>> OpenShmManager(bool shared_memory = true) {
  ManagerConfig c;
  c.state_dir = StateDir();
  c.build_image_if_missing = false;
  c.template_snapshots = true;
  c.template_shared_memory = shared_memory;
  c.runtime = RuntimeName();
  return Manager::Open(c);
}

// The shared-RAM template of "base", 1 vCPU, 512 MiB (made if missing).
std::string EnsureSharedTemplate(Manager& m) {
  Status st = m.template_snapshots().Ensure("base", 1, 512);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto img = image::FindImage(StateDir(), "base");
  EXPECT_TRUE(img.ok()) << img.status().ToString();
  if (!img.ok()) return "";
  auto dir = m.template_snapshots().DirFor(*img, 1, 512);
  EXPECT_TRUE(dir.ok());
  return dir.ok() ? *dir : "";
}

std::string RunIn(const Sandbox& sb, const std::string& script) {
  ExecRequest r;
  r.cmd = "/bin/bash";
  r.args = {"-c", script};
  std::string out;
  ExecCallbacks cb;
  cb.on_stdout = [&](std::string_view s) { out.append(s); };
  auto res = sb.agent().Exec(r, cb);
  EXPECT_TRUE(res.ok() && res->exit_code == 0) << script << ": " << res.status().ToString();
  return out;
}

// kB fields of /proc/PID/smaps_rollup ("Pss", "Rss", "Pss_Shmem", ...).
std::map<std::string, uint64_t, std::less<>> SmapsRollup(pid_t pid) { return ReadSmapsRollupKib(pid); }

uid_t UidOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Uid:", 0) == 0) return static_cast<uid_t>(std::stoul(line.substr(4)));
  }
  return 0;
}

// What a process running as `uid` (as the VMM does, nothing more) can do to
// `path`: the errno of open(O_WRONLY) (0 if it opened), then of write(),
// ftruncate() and a hole punch on what it opened.
struct WriteAttempt {
  int open_errno = -1, write_errno = -1, truncate_errno = -1, punch_errno = -1;
};
WriteAttempt TryToWriteAs(uid_t uid, const std::string& path) {
  int p[2];
  if (::pipe(p) != 0) return {};
  pid_t child = ::fork();
  if (child == 0) {
    ::close(p[0]);
    int r[4] = {-1, -1, -1, -1};
    if (::setgroups(0, nullptr) == 0 && ::setresgid(uid, uid, uid) == 0 && ::setresuid(uid, uid, uid) == 0) {
      int fd = ::open(path.c_str(), O_WRONLY);
      r[0] = fd < 0 ? errno : 0;
      if (fd >= 0) {
        r[1] = ::pwrite(fd, "x", 1, 4096) < 0 ? errno : 0;
        r[2] = ::ftruncate(fd, 0) != 0 ? errno : 0;
        r[3] = ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) != 0 ? errno : 0;
      }
    }
    (void)!::write(p[1], r, sizeof r);
    ::_exit(0);
  }
  ::close(p[1]);
  int r[4] = {-1, -1, -1, -1};
  (void)!::read(p[0], r, sizeof r);
  ::close(p[0]);
  ::waitpid(child, nullptr, 0);
  return {r[0], r[1], r[2], r[3]};
}

// Clones of a shared-RAM template: the manifest says so and the stream is
// device state only; four clones that each dirty memory share the rest
// (PSS); no clone's VMM can write the template's RAM, neither the file nor
// the memfd it maps; the file is byte-for-byte unchanged afterwards.
TEST(SharedRamTest, ClonesShareTheTemplateRamAndNeverChangeIt) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenShmManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string dir = EnsureSharedTemplate(**m);
  ASSERT_FALSE(dir.empty());
  auto man = qemu::ReadSnapshot(dir);
  ASSERT_TRUE(man.ok()) << man.status().ToString();
  EXPECT_EQ(man->format_version, qemu::kSnapshotFormatSharedRam);
  EXPECT_EQ(man->ram_file, "ram");
  EXPECT_EQ(man->ram_bytes, 512ull << 20);
  EXPECT_LT(man->memory_bytes, 4ull << 20) << "the stream should hold device state only";
  const std::string ram = dir + "/ram";
  struct stat st;
  ASSERT_EQ(::stat(ram.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  auto before = image::Sha256File(ram);
  ASSERT_TRUE(before.ok()) << before.status().ToString();

  std::vector<std::shared_ptr<Sandbox>> clones;
  CreateOptions o;
  o.detach = true;  // as the daemon runs them: vm.json records what the VMM maps (the GC below reads it)
  for (int i = 0; i < 4; ++i) {
    auto sb = (*m)->Create(o);
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    EXPECT_TRUE((*sb)->timings().from_snapshot);
    clones.push_back(*sb);
  }
  // Side by side, each holds less than the template's RAM alone, which a
  // clone restored from a stream holds privately (plus QEMU's own memory).
  uint64_t pss = 0, rss = 0;
  for (auto& sb : clones) {
    EXPECT_EQ(RunIn(*sb, "echo hi > /home/user/f && cat /home/user/f"), "hi\n");
    auto kb = SmapsRollup(sb->vmm_pid());
    ASSERT_GT(kb["Rss"], 0u) << "no smaps_rollup for pid " << sb->vmm_pid();
    std::printf("clone pid %d: Rss %lu Pss %lu Pss_Anon %lu Pss_Shmem %lu Shared_Clean %lu kB\n", sb->vmm_pid(),
                kb["Rss"], kb["Pss"], kb["Pss_Anon"], kb["Pss_Shmem"], kb["Shared_Clean"]);
    pss += kb["Pss"];
    rss += kb["Rss"];
    // Guest RAM the template wrote is mapped from the memfd, shared by all.
    EXPECT_GT(kb["Pss_Shmem"], 0u);
    EXPECT_GT(kb["Shared_Clean"], 4u * 1024) << "clone maps little shared memory";
  }
  // The same sandbox from the template of the stream layout (RAM loaded
  // into private memory), same command (opened now: the sweep at its open
  // keeps the "-shm" template, which the clones map).
  uint64_t stream_pss = 0;
  {
    auto sm = OpenShmManager(/*shared_memory=*/false);
    ASSERT_TRUE(sm.ok()) << sm.status().ToString();
    ASSERT_TRUE((*sm)->template_snapshots().Ensure("base", 1, 512).ok());
    auto sb = (*sm)->Create(CreateOptions{});
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    EXPECT_TRUE((*sb)->timings().from_snapshot);
    EXPECT_EQ(RunIn(**sb, "echo hi > /home/user/f && cat /home/user/f"), "hi\n");
    stream_pss = SmapsRollup((*sb)->vmm_pid())["Pss"];
    EXPECT_TRUE((*sm)->Destroy((*sb)->id()).ok());
  }
  std::printf(
      "4 clones: sum PSS %.1f MiB, sum RSS %.1f MiB; template RAM data %.1f MiB; one stream clone PSS %.1f MiB\n",
      pss / 1024.0, rss / 1024.0, man->ram_data_bytes / 1048576.0, stream_pss / 1024.0);
  EXPECT_LT(pss, 4 * stream_pss * 8 / 10) << "clones do not share the template's pages";
  EXPECT_LT(pss, rss * 9 / 10);
  // Then each dirties memory of its own (page cache, a process's heap):
  // copies of its own, never writes to the template.
  for (auto& sb : clones) {
    EXPECT_EQ(RunIn(*sb,
                    "dd if=/dev/urandom of=/home/user/blob bs=1M count=8 status=none && "
                    "python3 -c 'b=bytearray(8<<20)\nfor i in range(0,len(b),4096): b[i]=1\nprint(sum(b[::4096]))'"),
              "2048\n");
  }

  // The VMM's uid can neither write the file nor the memfd it maps (fd 3).
  const pid_t vmm = clones[0]->vmm_pid();
  const uid_t uid = UidOf(vmm);
  ASSERT_NE(uid, 0u) << "the VMM runs as root: the jail is off";
  WriteAttempt file = TryToWriteAs(uid, ram);
  EXPECT_EQ(file.open_errno, EACCES);
  const std::string fd3 = "/proc/" + std::to_string(vmm) + "/fd/3";
  char link[256] = {};
  ASSERT_GT(::readlink(fd3.c_str(), link, sizeof link - 1), 0);
  EXPECT_NE(std::string(link).find("memfd:airlock-template-ram"), std::string::npos) << link;
  WriteAttempt memfd = TryToWriteAs(uid, fd3);
  EXPECT_EQ(memfd.open_errno, 0) << "the VMM opens it O_RDWR (QEMU 7.2 needs that for a private mapping)";
  EXPECT_EQ(memfd.write_errno, EPERM);
  EXPECT_EQ(memfd.truncate_errno, EPERM);
  EXPECT_EQ(memfd.punch_errno, EPERM);

  for (auto& sb : clones) EXPECT_TRUE((*m)->Destroy(sb->id()).ok());
  auto after = image::Sha256File(ram);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*before, *after) << "the template's RAM file changed";
  UniqueFd fd(::open(ram.c_str(), O_RDONLY | O_CLOEXEC));
  auto crc = qemu::RamFileCrc32(fd.get(), man->ram_bytes, nullptr);
  ASSERT_TRUE(crc.ok());
  EXPECT_EQ(*crc, man->ram_crc32);
}

// A clone's RAM is a private mapping of the template: its pause writes only
// the pages that differ from the template's RAM file (a format 3 delta; the
// resume maps the template again and loads them), its fork writes its RAM
// into a file of the fork's own that the children map, and the children see
// its memory and files.
TEST(SharedRamTest, PauseResumeAndForkOfACloneKeepItsState) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenShmManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_FALSE(EnsureSharedTemplate(**m).empty());
  CreateOptions o;
  o.detach = true;  // as the daemon runs them (vm.json, parallel fork children)
  auto sb = (*m)->Create(o);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_TRUE((*sb)->timings().from_snapshot);
  const std::string id = (*sb)->id();
  // State: a file, and a process (memory only).
  RunIn(
      **sb,
      "echo in-ram-$RANDOM > /tmp/marker; (setsid sleep 100000 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleep.pid); "
      "echo on-disk > /home/user/f");
  const std::string marker = RunIn(**sb, "cat /tmp/marker");
  ASSERT_NE(marker.find("in-ram-"), std::string::npos);
  const std::string vmjson = StateDir() + "/run/" + id + "/vm/vm.json";
  std::ifstream vf(vmjson);
  auto vm = nlohmann::json::parse(vf, nullptr, false);
  EXPECT_EQ(vm.value("ram_kind", ""), "private-file");
  EXPECT_NE(vm.value("ram_source", "").find("/snapshots/templates/"), std::string::npos);

  // Fork of the clone: its RAM becomes the fork's `ram` file.
  auto kids = (*m)->Fork(id, 2);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  for (auto& k : *kids) {
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    std::ifstream kf(StateDir() + "/run/" + (*k)->id() + "/vm/vm.json");
    auto kvm = nlohmann::json::parse(kf, nullptr, false);
    EXPECT_EQ(kvm.value("ram_kind", ""), "private-file");
    const std::string kram = kvm.value("ram_source", "");
    EXPECT_NE(kram.find("/snapshots/forks/"), std::string::npos) << kram;
    auto fm = qemu::ReadSnapshot(fs::path(kram).parent_path().string());
    ASSERT_TRUE(fm.ok()) << fm.status().ToString();
    EXPECT_TRUE(fm->shared_ram());
    EXPECT_LT(fm->memory_bytes, 1ull << 20) << "a fork's stream holds device state only";
    EXPECT_GT(fm->ram_data_bytes, 16ull << 20) << "the fork's RAM file holds the parent's memory";
    EXPECT_EQ(RunIn(**k, "cat /tmp/marker"), marker);
    EXPECT_EQ(RunIn(**k, "cat /home/user/f"), "on-disk\n");
    RunIn(**k, "echo child > /tmp/marker");
    EXPECT_TRUE((*m)->Destroy((*k)->id()).ok());
  }
  EXPECT_EQ(RunIn(**sb, "cat /tmp/marker"), marker) << "a child's write reached the parent";
  for (int i = 0; i < 2; ++i) {
    auto p = (*m)->Pause(id);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto pm = qemu::ReadSnapshot((*m)->snapshot_dirs().paused() + "/" + id);
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    EXPECT_EQ(pm->ram_backend, "mem0");
    EXPECT_FALSE(pm->shared_ram());
    EXPECT_EQ(pm->format_version, qemu::kSnapshotFormatRamDelta);
    EXPECT_EQ(pm->ram_source, vm.value("ram_source", "")) << "a delta of the template's RAM";
    EXPECT_TRUE(pm->x_ignore_shared);
    EXPECT_GT(pm->ram_pages_in_stream, 0u);
    EXPECT_LT(pm->memory_bytes, 48ull << 20) << "a clone's pause writes what it changed, not its RAM";
    EXPECT_TRUE((*m)->snapshot_dirs().InUse(fs::path(pm->ram_source).parent_path().string()))
        << "a paused delta keeps its template";
    auto r = (*m)->Resume(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(RunIn(**sb, "cat /tmp/marker"), marker);
    EXPECT_EQ(RunIn(**sb, "kill -0 $(cat /tmp/sleep.pid) && echo alive"), "alive\n");
  }
  EXPECT_TRUE((*m)->Destroy(id).ok());
}

// Fork that shares memory (issue 14 item 3): the parent's RAM is saved once
// into the fork's `ram` file, and five children map it copy-on-write. Each
// sees the parent's memory; parent and children write privately; the pages
// none of them writes are one copy (PSS well below RSS in every child).
TEST(SharedRamTest, FiveForkChildrenShareTheParentsMemory) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenShmManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_FALSE(EnsureSharedTemplate(**m).empty());
  CreateOptions o;
  o.detach = true;
  auto sb = (*m)->Create(o);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string parent = (*sb)->id();
  // 32 MiB of the parent's memory (tmpfs pages) no template page equals.
  const std::string sum =
      RunIn(**sb, "head -c 32M /dev/urandom > /dev/shm/blob && echo parent > /tmp/who && sha256sum < /dev/shm/blob");
  ASSERT_EQ(sum.size(), 68u) << sum;
  auto kids = (*m)->Fork(parent, 5);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  std::vector<std::shared_ptr<Sandbox>> children;
  for (auto& k : *kids) {
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    children.push_back(*k);
  }
  uint64_t rss = 0, pss = 0;
  for (size_t i = 0; i < children.size(); ++i) {
    auto& k = children[i];
    EXPECT_EQ(RunIn(*k, "sha256sum < /dev/shm/blob"), sum) << "child " << i << " lost the parent's memory";
    EXPECT_EQ(RunIn(*k, "cat /tmp/who"), "parent\n");
    RunIn(*k, "echo child-" + std::to_string(i) + " > /tmp/who");
  }
  for (size_t i = 0; i < children.size(); ++i) {
    EXPECT_EQ(RunIn(*children[i], "cat /tmp/who"), "child-" + std::to_string(i) + "\n") << "a sibling's write leaked";
    auto kb = SmapsRollup(children[i]->vmm_pid());
    ASSERT_GT(kb["Rss"], 0u);
    std::printf("fork child %zu pid %d: Rss %lu Pss %lu Pss_Anon %lu Pss_Shmem %lu kB\n", i, children[i]->vmm_pid(),
                kb["Rss"], kb["Pss"], kb["Pss_Anon"], kb["Pss_Shmem"]);
    rss += kb["Rss"];
    pss += kb["Pss"];
    // The blob (read by every child) is in the fork's file: each child's
    // PSS counts a fifth of it.
    EXPECT_GT(kb["Rss"] - kb["Pss"], 16u * 1024) << "child " << i << " shares too little";
  }
  std::printf("5 fork children: sum RSS %.1f MiB, sum PSS %.1f MiB\n", rss / 1024.0, pss / 1024.0);
  EXPECT_LT(pss, rss * 6 / 10);
  EXPECT_EQ(RunIn(**sb, "cat /tmp/who"), "parent\n") << "a child's write reached the parent";
  RunIn(**sb, "echo parent-after > /tmp/who");
  for (auto& k : children) EXPECT_EQ(RunIn(*k, "sha256sum < /dev/shm/blob"), sum);
  EXPECT_EQ(RunIn(*children[0], "cat /tmp/who"), "child-0\n") << "the parent's write reached a child";
  for (auto& k : children) EXPECT_TRUE((*m)->Destroy(k->id()).ok());
  EXPECT_TRUE((*m)->Destroy(parent).ok());
}

// Pause writes what the sandbox changed (issue 14 item 4): 10 MiB dirtied
// after the restore is in the delta, the untouched template pages are not,
// and a resume (template mapped again, the delta loaded) has every byte.
// A pause of a resumed sandbox is again a delta of the template.
TEST(SharedRamTest, PauseOfACloneWritesWhatItDirtied) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenShmManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string tmpl = EnsureSharedTemplate(**m);
  ASSERT_FALSE(tmpl.empty());
  auto tm = qemu::ReadSnapshot(tmpl);
  ASSERT_TRUE(tm.ok());
  CreateOptions o;
  o.detach = true;
  auto sb = (*m)->Create(o);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  const std::string id = (*sb)->id();
  const std::string sum = RunIn(**sb, "head -c 10M /dev/urandom > /dev/shm/dirty && sha256sum < /dev/shm/dirty");
  for (int round = 0; round < 2; ++round) {
    auto p = (*m)->Pause(id);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto pm = qemu::ReadSnapshot((*m)->snapshot_dirs().paused() + "/" + id);
    ASSERT_TRUE(pm.ok()) << pm.status().ToString();
    EXPECT_EQ(pm->format_version, qemu::kSnapshotFormatRamDelta);
    EXPECT_EQ(pm->ram_source, tmpl + "/ram");
    std::printf("round %d: delta %.1f MiB (%lu pages) of a template with %.1f MiB of data\n", round,
                pm->memory_bytes / 1048576.0, static_cast<unsigned long>(pm->ram_pages_in_stream),
                tm->ram_data_bytes / 1048576.0);
    EXPECT_GE(pm->memory_bytes, 10ull << 20) << "the dirtied pages are missing from the delta";
    EXPECT_LT(pm->memory_bytes, tm->ram_data_bytes / 2) << "the delta holds the template's pages";
    auto r = (*m)->Resume(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::ifstream vf(StateDir() + "/run/" + id + "/vm/vm.json");
    auto vm = nlohmann::json::parse(vf, nullptr, false);
    EXPECT_EQ(vm.value("ram_kind", ""), "private-file") << "resume maps the template again";
    EXPECT_EQ(vm.value("ram_source", ""), tmpl + "/ram");
    EXPECT_EQ(RunIn(**sb, "sha256sum < /dev/shm/dirty"), sum);
  }
  EXPECT_TRUE((*m)->Destroy(id).ok());
}

// The snapshot GC: a template whose RAM file a running VMM maps (vm.json's
// ram_source) is in use, and a start that sweeps templates of another RAM
// layout keeps it while a sandbox maps it.
TEST(SharedRamTest, TemplateMappedByASandboxIsNotSwept) {
  AIRLOCK_REQUIRE_VM();
  auto m = OpenShmManager();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string dir = EnsureSharedTemplate(**m);
  ASSERT_FALSE(dir.empty());
  // The RAM mapping alone (a record naming only ram_source) keeps a dir.
  const std::string fake_tmpl = StateDir() + "/snapshots/templates/not-a-real-template-1c-512m-shm";
  const std::string fake_run = StateDir() + "/run/shmgc" + std::to_string(::getpid());
  fs::create_directories(fake_run + "/vm");
  {
    std::ofstream f(fake_run + "/vm/vm.json");
    f << nlohmann::json{{"ram_source", fake_tmpl + "/ram"}}.dump();
  }
  EXPECT_TRUE((*m)->snapshot_dirs().InUse(fake_tmpl));
  fs::remove_all(fake_run);
  EXPECT_FALSE((*m)->snapshot_dirs().InUse(fake_tmpl));

  CreateOptions o;
  o.detach = true;
  auto sb = (*m)->Create(o);
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  ASSERT_TRUE((*sb)->timings().from_snapshot);
  EXPECT_TRUE((*m)->snapshot_dirs().InUse(dir));
  // A manager of the stream layout sweeps what is of no current image and
  // unused, and keeps the current image's "-shm" template (a daemon of the
  // other layout restores from it), let alone one a sandbox maps.
  const std::string stale = StateDir() + "/snapshots/templates/0000000000000000dead-00000000-1c-512m-shm";
  fs::create_directories(stale);
  {
    auto other = OpenShmManager(/*shared_memory=*/false);
    ASSERT_TRUE(other.ok()) << other.status().ToString();
  }
  EXPECT_FALSE(fs::exists(stale)) << "a template snapshot of no current image was kept";
  EXPECT_TRUE(qemu::ReadSnapshot(dir).ok()) << "a template a sandbox maps was swept";
  EXPECT_EQ(RunIn(**sb, "echo ok"), "ok\n");
  EXPECT_TRUE((*m)->Destroy((*sb)->id()).ok());
}

// A daemon restart adopts a VMM whose RAM is a private mapping of the
// template (vm.json records it): the sandbox keeps running, and its pause
// and resume through the new daemon keep its files.
TEST(SharedRamTest, DaemonRestartAdoptsACloneThatStillPausesAndResumes) {
  AIRLOCK_REQUIRE_VM();
  {
    auto m = OpenShmManager();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_FALSE(EnsureSharedTemplate(**m).empty());
  }
  const std::string dir = MakeTempDir();
  const uint16_t port = FreeTcpPort();
  std::string id, token;
  const std::string data = "kept across a daemon restart " + std::to_string(::getpid());
  {
    TestDaemon d(dir, {}, /*kill_on_exit=*/false, port);
    auto r = d.Do("POST", "/v2/sandboxes", R"({"templateID":"base","timeout":600})");
    ASSERT_TRUE(r.ok() && r->status == 201) << (r.ok() ? r->body : r.status().ToString());
    auto j = nlohmann::json::parse(r->body);
    id = j["sandboxID"];
    token = j["envdAccessToken"];
    std::ifstream vf(StateDir() + "/run/" + id + "/vm/vm.json");
    auto vm = nlohmann::json::parse(vf, nullptr, false);
    ASSERT_EQ(vm.value("ram_kind", ""), "private-file") << "not created from the shared-RAM template";
    auto w = d.Data(id, token, "POST", "/files?path=/home/user/keep.txt&username=user", data);
    ASSERT_TRUE(w.ok() && w->status == 200) << (w.ok() ? w->body : w.status().ToString());
  }  // SIGTERM: the daemon stops, the VMM runs on
  TestDaemon d(dir, {}, /*kill_on_exit=*/true, port);
  auto read = [&]() {
    auto r = d.Data(id, token, "GET", "/files?path=/home/user/keep.txt&username=user");
    return r.ok() && r->status == 200 ? r->body : std::string("error");
  };
  EXPECT_EQ(read(), data) << "the adopted clone does not answer";
  auto p = d.Do("POST", "/sandboxes/" + id + "/pause", "{}");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->status, 204) << p->body;
  auto pm = qemu::ReadSnapshot(StateDir() + "/snapshots/paused/" + id);
  ASSERT_TRUE(pm.ok()) << pm.status().ToString();
  EXPECT_EQ(pm->ram_backend, "mem0") << "the adopted VMM's RAM backend was not read back from vm.json";
  auto c = d.Do("POST", "/v2/sandboxes/" + id + "/connect", "{}");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status, 201) << c->body;
  EXPECT_EQ(read(), data);
  auto k = d.Do("DELETE", "/sandboxes/" + id);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->status, 204);
  fs::remove_all(dir);
}

}  // namespace shared_ram_test
}  // namespace airlock::testing
