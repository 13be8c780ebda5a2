// Tests for QEMU snapshots (src/runtime/qemu/snapshot.*, docs/snapshots.md).
// Pure parts (manifest, shape checks, directory validation) run anywhere. The
// end-to-end test needs root, qemu, `ip netns` and the built `base` image
// under /var/lib/airlock (or AIRLOCK_STATE_DIR); it skips with a message
// otherwise. It boots the image, writes a file through the guest agent,
// snapshots, restores twice at once into two fresh netns, and checks that both
// copies see the file and not each other's writes; then feeds Restore broken
// snapshots. Timings and sizes go to stderr ("snapshot-metric ...").
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "image/image.h"
#include "net/address_pool.h"
#include "net/sandbox_network.h"
#include "runtime/qemu/qemu_vm.h"
#include "runtime/qemu/snapshot.h"
#include "tests/unit/agent_http.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::qemu {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using test_util::ScopedDir;
std::string TempDir() { return test_util::MakeTempDir("airlock-snap-test"); }

int64_t Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

uint64_t DiskUsage(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

void WriteText(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }
std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// ---- pure -----------------------------------------------------------------------

VmSpec FakeSpec(const std::string& dir) {
  VmSpec s;
  s.sandbox_id = "a";
  s.kernel = dir + "/vmlinux";
  s.initrd = dir + "/initrd";
  s.rootfs_template = dir + "/rootfs";
  s.run_dir = dir + "/run-a";
  s.memory_mib = 512;
  s.tap_name = "tap0";
  return s;
}

SnapshotManifest FakeManifest(const VmSpec& s) {
  SnapshotManifest m;
  m.image_id = "img1";
  m.kernel = s.kernel;
  m.initrd = s.initrd;
  m.rootfs = s.rootfs_template;
  m.vcpus = s.vcpus;
  m.memory_mib = s.memory_mib;
  m.accel = "tcg";
  m.network = true;
  m.machine_hash = MachineShapeHash(s, Accel::kTcg);
  m.qemu_version = "7.2.22";
  m.memory_bytes = 5;
  m.memory_crc32 = 0x12345678;
  m.disk_bytes = 3;
  m.disk_backing = s.rootfs_template;
  m.disk_backing_format = "raw";
  m.source_sandbox_id = "a";
  m.created_at = "2025-01-01T00:00:00Z";
  return m;
}

TEST(QemuSnapshotManifest, RoundTripAndRejects) {
  VmSpec s = FakeSpec("/x");
  SnapshotManifest m = FakeManifest(s);
  auto back = SnapshotManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToJson(), m.ToJson());
  auto j = m.ToJson();
  j["memory_file"] = "../../etc/shadow";
  EXPECT_EQ(SnapshotManifest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
  j = m.ToJson();
  j.erase("memory_bytes");
  auto missing = SnapshotManifest::FromJson(j);
  EXPECT_NE(missing.status().message().find("memory_bytes"), std::string::npos) << missing.status().ToString();
  EXPECT_FALSE(SnapshotManifest::FromJson(nlohmann::json::array()).ok());
}

// Format 2 (shared-RAM template): ram_* fields round-trip; version and
// ram_file go together; older manifests (no ram fields) still parse.
TEST(QemuSnapshotManifest, SharedRamFieldsAndVersions) {
  VmSpec s = FakeSpec("/x");
  SnapshotManifest m = FakeManifest(s);
  m.format_version = kSnapshotFormatSharedRam;
  m.ram_backend = "mem0";
  m.ram_file = "ram";
  m.ram_bytes = 512ull << 20;
  m.ram_crc32 = 0xabcdef01;
  m.ram_data_bytes = 70 << 20;
  m.migrate_ms = 9;
  auto back = SnapshotManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->shared_ram());
  EXPECT_EQ(back->ToJson(), m.ToJson());
  auto j = m.ToJson();
  j["format_version"] = 1;
  EXPECT_EQ(SnapshotManifest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
  j = m.ToJson();
  j["ram_file"] = "../ram";
  EXPECT_EQ(SnapshotManifest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
  j = m.ToJson();
  j["ram_backend"] = "hugepages";
  EXPECT_EQ(SnapshotManifest::FromJson(j).status().code(), StatusCode::kInvalidArgument);
  j = m.ToJson();
  j.erase("ram_file");
  EXPECT_EQ(SnapshotManifest::FromJson(j).status().code(), StatusCode::kInvalidArgument);  // format 2 needs it
  // A manifest written before these fields existed.
  j = FakeManifest(s).ToJson();
  for (const char* k : {"ram_backend", "ram_file", "ram_bytes", "ram_crc32", "ram_data_bytes", "migrate_ms"})
    j.erase(k);
  auto old = SnapshotManifest::FromJson(j);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_FALSE(old->shared_ram());
  EXPECT_EQ(old->ram_backend, "");
}

// The RAM file of a format-2 snapshot must be root's, read-only, and of the
// manifest's size; its CRC ignores holes and zero pages (layout-independent)
// and the sealed memfd built from it refuses writes, resizing, hole punching.
TEST(QemuSnapshotDir, SharedRamFileIsCheckedAndSealed) {
  ScopedDir d{TempDir()};
  VmSpec s = FakeSpec(d.path);
  s.memory_mib = 64;
  WriteText(s.rootfs_template, "raw");
  SnapshotManifest m = FakeManifest(s);
  m.memory_mib = 64;
  m.format_version = kSnapshotFormatSharedRam;
  m.ram_backend = "mem0";
  m.ram_file = "ram";
  m.ram_bytes = 64ull << 20;
  std::string snap = d.path + "/snap";
  fs::create_directories(snap);
  WriteText(snap + "/memory", "12345");
  WriteText(snap + "/disk.qcow2", "abc");
  const std::string ram = snap + "/ram";
  {
    UniqueFd fd(::open(ram.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(m.ram_bytes)), 0);
    ASSERT_EQ(::pwrite(fd.get(), "guest", 5, 8192), 5);
    ASSERT_EQ(::pwrite(fd.get(), "page", 4, 40 << 20), 4);
    std::string zeros(4096, '\0');
    ASSERT_EQ(::pwrite(fd.get(), zeros.data(), zeros.size(), 1 << 20), 4096);  // data, but zero: skipped
    uint64_t data = 0;
    auto crc = RamFileCrc32(fd.get(), m.ram_bytes, &data);
    ASSERT_TRUE(crc.ok()) << crc.status().ToString();
    EXPECT_EQ(data, 8192u);  // two non-zero pages
    m.ram_crc32 = *crc;
  }
  WriteText(snap + "/manifest.json", m.ToJson().dump());
  // Writable (0644): refused.
  EXPECT_EQ(ReadSnapshot(snap).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(::chmod(ram.c_str(), 0444), 0);
  if (::geteuid() != 0) GTEST_SKIP() << "the rest needs root (the RAM file must be root's)";
  auto ok = ReadSnapshot(snap);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto sealed = SealedTemplateRam(snap, *ok);
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  auto again = SealedTemplateRam(snap, *ok);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(sealed->get(), again->get()) << "one memfd per RAM file";
  const int mfd = (*sealed)->get();
  char buf[8] = {};
  EXPECT_EQ(::pread(mfd, buf, 5, 8192), 5);
  EXPECT_EQ(std::string(buf, 5), "guest");
  // Through a new open, as a VMM does it (/proc/self/fd/3): nothing changes it.
  UniqueFd w(::open(("/proc/self/fd/" + std::to_string(mfd)).c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(w);
  EXPECT_LT(::pwrite(w.get(), "x", 1, 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(w.get(), 0), 0);
  EXPECT_NE(::fallocate(w.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 4096), 0);
  EXPECT_EQ(errno, EPERM);
  // A private writable mapping is what QEMU makes: allowed, and private.
  void* p = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, w.get(), 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memcpy(static_cast<char*>(p) + 8192, "GUEST", 5);
  ::munmap(p, 1 << 20);
  EXPECT_EQ(::pread(mfd, buf, 5, 8192), 5);
  EXPECT_EQ(std::string(buf, 5), "guest");
  // Corrupt file (same size, other bytes): DataLoss, before any VMM maps it.
  ASSERT_TRUE(DeleteSnapshot(snap).ok());  // also forgets the memfd
  fs::create_directories(snap);
  WriteText(snap + "/memory", "12345");
  WriteText(snap + "/disk.qcow2", "abc");
  {
    UniqueFd fd(::open(ram.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0444));
    ASSERT_EQ(::ftruncate(fd.get(), static_cast<off_t>(m.ram_bytes)), 0);
    ASSERT_EQ(::pwrite(fd.get(), "GUEST", 5, 8192), 5);
  }
  WriteText(snap + "/manifest.json", m.ToJson().dump());
  auto bad = ReadSnapshot(snap);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(SealedTemplateRam(snap, *bad).status().code(), StatusCode::kDataLoss);
}

TEST(QemuSnapshotManifest, ShapeHashIgnoresPerSandboxFields) {
  VmSpec a = FakeSpec("/x");
  VmSpec b = a;
  b.sandbox_id = "other";
  b.run_dir = "/elsewhere/run";
  b.tap_name = "tapX";
  b.jail = {{1000, 1000}};
  b.extra_cmdline = "quiet";
  EXPECT_EQ(MachineShapeHash(a, Accel::kTcg), MachineShapeHash(b, Accel::kTcg));
  EXPECT_EQ(MachineShapeHash(a, Accel::kTcg).rfind("fnv1a64:", 0), 0u);
  VmSpec c = a;
  c.memory_mib = 1024;
  EXPECT_NE(MachineShapeHash(a, Accel::kTcg), MachineShapeHash(c, Accel::kTcg));
  EXPECT_NE(MachineShapeHash(a, Accel::kTcg), MachineShapeHash(a, Accel::kKvm));
  VmSpec d = a;
  d.tap_name.clear();
  EXPECT_NE(MachineShapeHash(a, Accel::kTcg), MachineShapeHash(d, Accel::kTcg));
}

TEST(QemuSnapshotManifest, FitsNamesEveryMismatch) {
  VmSpec s = FakeSpec("/x");
  SnapshotManifest m = FakeManifest(s);
  EXPECT_TRUE(CheckSnapshotFits(m, s, Accel::kTcg, "img1").ok());
  EXPECT_TRUE(CheckSnapshotFits(m, s, Accel::kTcg, "").ok());
  VmSpec t = s;
  t.memory_mib = 256;
  t.vcpus = 2;
  Status st = CheckSnapshotFits(m, t, Accel::kTcg, "img2");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  for (const char* w : {"memory_mib: snapshot 512, spec 256", "vcpus", "image_id"})
    EXPECT_NE(st.message().find(w), std::string::npos) << st.ToString();
  EXPECT_FALSE(CheckSnapshotFits(m, s, Accel::kKvm, "").ok());
  VmSpec u = s;
  u.kernel = "/y/vmlinux";
  EXPECT_NE(CheckSnapshotFits(m, u, Accel::kTcg, "").message().find("kernel"), std::string::npos);
}

TEST(QemuSnapshotDir, HalfWrittenOrTruncatedIsNotASnapshot) {
  ScopedDir d{TempDir()};
  VmSpec s = FakeSpec(d.path);
  WriteText(s.rootfs_template, "raw");
  SnapshotManifest m = FakeManifest(s);
  std::string snap = d.path + "/snap";
  fs::create_directories(snap);
  WriteText(snap + "/memory", "12345");
  WriteText(snap + "/disk.qcow2", "abc");
  // A save that never committed: files, no manifest.
  EXPECT_EQ(ReadSnapshot(snap).status().code(), StatusCode::kNotFound);
  WriteText(snap + "/manifest.json", m.ToJson().dump());
  auto ok = ReadSnapshot(snap);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  // Truncated memory file.
  WriteText(snap + "/memory", "123");
  auto t = ReadSnapshot(snap);
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(t.status().message().find("truncated"), std::string::npos) << t.status().ToString();
  WriteText(snap + "/memory", "12345");
  // Half-written manifest.
  WriteText(snap + "/manifest.json", m.ToJson().dump().substr(0, 40));
  EXPECT_EQ(ReadSnapshot(snap).status().code(), StatusCode::kInvalidArgument);
  // Unknown format version.
  auto j = m.ToJson();
  j["format_version"] = 99;
  WriteText(snap + "/manifest.json", j.dump());
  EXPECT_EQ(ReadSnapshot(snap).status().code(), StatusCode::kFailedPrecondition);
  // Backing file gone.
  WriteText(snap + "/manifest.json", m.ToJson().dump());
  fs::remove(s.rootfs_template);
  EXPECT_EQ(ReadSnapshot(snap).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(DeleteSnapshot(snap).ok());
  EXPECT_FALSE(fs::exists(snap));
}

// A 2 KiB file with an ext4 superblock's magic and UUID where the kernel
// reads them (byte 1024 + 0x38 and + 0x68).
void WriteExt4Like(const std::string& path, unsigned char uuid_byte) {
  std::string b(2048, '\0');
  b[1024 + 0x38] = '\x53';
  b[1024 + 0x39] = '\xEF';
  for (int i = 0; i < 16; ++i) b[1024 + 0x68 + i] = static_cast<char>(uuid_byte + i);
  WriteText(path, b);
}

TEST(QemuSnapshotDir, RebuiltRootfsIsRefusedByItsStamp) {
  ScopedDir d{TempDir()};
  VmSpec s = FakeSpec(d.path);
  WriteExt4Like(s.rootfs_template, 0x10);
  auto rs = FileStamp(s.rootfs_template);
  ASSERT_TRUE(rs.ok()) << rs.status().ToString();
  EXPECT_EQ(*rs, "ext4-uuid:101112131415161718191a1b1c1d1e1f");
  SnapshotManifest m = FakeManifest(s);
  m.rootfs_stamp = *rs;
  std::string snap = d.path + "/snap";
  fs::create_directories(snap);
  WriteText(snap + "/memory", "12345");
  WriteText(snap + "/disk.qcow2", "abc");
  WriteText(snap + "/manifest.json", m.ToJson().dump());
  auto back = ReadSnapshot(snap);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rootfs_stamp, *rs);

  // Copied without its times, or touched: the same build, still fine.
  const std::string copy = d.path + "/copy";
  fs::copy_file(s.rootfs_template, copy);
  fs::remove(s.rootfs_template);
  fs::rename(copy, s.rootfs_template);
  EXPECT_TRUE(ReadSnapshot(snap).ok());

  // Rebuilt at the same path: same size, another filesystem UUID.
  WriteExt4Like(s.rootfs_template, 0x20);
  auto stale = ReadSnapshot(snap);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("rootfs " + s.rootfs_template + " was rebuilt"), std::string::npos)
      << stale.status().ToString();

  // A manifest from before the stamp existed is read, and not checked.
  auto j = m.ToJson();
  j.erase("rootfs_stamp");
  WriteText(snap + "/manifest.json", j.dump());
  auto old = ReadSnapshot(snap);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->rootfs_stamp, "");

  // Not ext4: size and mtime.
  WriteText(d.path + "/plain", "twelve bytes");
  auto plain = FileStamp(d.path + "/plain");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->substr(0, plain->find(':')), "12");
  EXPECT_FALSE(FileStamp(d.path + "/nope").ok());
}

// ---- against the real image -----------------------------------------------------

using test_util::HttpReply;
StatusOr<HttpReply> Http(const std::string& ip, const std::string& method, const std::string& target,
                         const std::string& body = "", const std::string& token = "",
                         std::chrono::milliseconds timeout = 2s) {
  return test_util::AgentHttp(ip, method, target, body, token, timeout);
}

// Polls GET /health until 204; returns when it answered.
StatusOr<Clock::time_point> WaitHealthy(QemuVm& vm, const std::string& ip, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    RETURN_IF_ERROR(vm.CheckAlive());
    auto r = Http(ip, "GET", "/health", "", "", 1s);
    if (r.ok() && r->status == 204) return Clock::now();
    std::this_thread::sleep_for(20ms);
  }
  return DeadlineExceeded("agent at " + ip + " never answered /health; console: " + vm.console_tail());
}

bool QemuProcessLeft(const std::string& sandbox_id) {
  std::string needle = std::string("-name") + '\0' + "airlock-" + sandbox_id + '\0';
  std::error_code ec;
  for (auto& e : fs::directory_iterator("/proc", ec)) {
    std::string cmd = ReadText(e.path().string() + "/cmdline");
    if (cmd.find(needle) != std::string::npos) return true;
  }
  return false;
}

// A restored VM started (and kept) on its own thread: QEMU gets SIGKILL when
// the thread that spawned it exits (PR_SET_PDEATHSIG), so the thread lives
// until release() is called after the VM was destroyed.
struct RestoreThread {
  std::promise<StatusOr<std::unique_ptr<QemuVm>>> result;
  std::promise<void> release_promise;
  std::thread t;
  Clock::time_point started, restored;
  void Run(const VmSpec& spec, const std::string& snap, const RestoreOptions& o) {
    auto released = release_promise.get_future();
    t = std::thread([this, spec, snap, o, released = std::move(released)]() mutable {
      started = Clock::now();
      auto vm = QemuVm::Restore(spec, snap, o);
      restored = Clock::now();
      result.set_value(std::move(vm));
      released.wait();
    });
  }
  void Release() {
    release_promise.set_value();
    t.join();
  }
};

class QemuSnapshotE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (netns, tap, cgroups)";
    if (!FindExecutable("qemu-system-x86_64").ok()) GTEST_SKIP() << "qemu not installed";
    auto ipn = airlock::Run({"ip", "netns", "list"});
    if (!ipn.ok() || !ipn->status.success()) GTEST_SKIP() << "`ip netns` unavailable";
    const char* sd = std::getenv("AIRLOCK_STATE_DIR");
    auto img = image::FindImage(sd ? sd : image::kDefaultStateDir, "base");
    if (!img.ok()) GTEST_SKIP() << "no base image: " << img.status().ToString();
    image_ = *img;
    dir_.path = TempDir();
    // A range of our own: other tests' pools (in their own state dirs) start
    // at 198.18.0.0, and equal netns addresses in two netns make the host
    // route to whichever veth came last.
    const char* cidr = std::getenv("AIRLOCK_SNAPSHOT_TEST_CIDR");
    auto pool = net::AddressPool::Create(dir_.path, cidr ? cidr : "198.19.232.0/24");
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::make_unique<net::AddressPool>(std::move(*pool));
  }

  VmSpec Spec(const std::string& id, const net::SandboxNetwork& n) {
    VmSpec s;
    s.sandbox_id = id;
    s.kernel = image_.kernel;
    s.initrd = image_.initrd;
    s.rootfs_template = image_.rootfs;
    s.run_dir = dir_.path + "/run-" + id;
    s.memory_mib = 512;
    s.netns_fd = n.netns_fd();
    s.tap_name = n.tap_name();
    s.jail = {{100200, 100200}};
    return s;
  }

  image::GuestImage image_;
  ScopedDir dir_;
  std::unique_ptr<net::AddressPool> pool_;
};

TEST_F(QemuSnapshotE2E, SaveRestoreTwiceIsolatedAndBrokenSnapshotsFailCleanly) {
  const std::string tag = std::to_string(::getpid());
  const std::string snap = dir_.path + "/snap";

  // -- cold boot to agent ready
  auto n0 = net::SandboxNetwork::Create("sn0-" + tag, *pool_);
  ASSERT_TRUE(n0.ok()) << n0.status().ToString();
  VmSpec s0 = Spec("sn0-" + tag, **n0);
  auto t0 = Clock::now();
  auto vm0 = QemuVm::Start(s0);
  ASSERT_TRUE(vm0.ok()) << vm0.status().ToString();
  auto ready0 = WaitHealthy(**vm0, (*n0)->netns_ip(), 120s);
  ASSERT_TRUE(ready0.ok()) << ready0.status().ToString();
  const int64_t cold_ms = Ms(t0, *ready0);
  std::cerr << "snapshot-metric cold_boot_to_agent_health_ms=" << cold_ms << "\n";

  // An access token (agents with POST /init; older ones answer 404 and need none).
  std::string token;
  auto init = Http((*n0)->netns_ip(), "POST", "/init", R"({"accessToken":"tok-A"})");
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  if (init->status == 204)
    token = "tok-A";
  else
    std::cerr << "agent has no POST /init (" << init->status << "): no token\n";
  auto w = Http((*n0)->netns_ip(), "POST", "/files?path=/home/user/x", "hello-snapshot", token);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->status, 200) << w->body;

  // -- a full disk during the save: clear error, nothing left, sandbox keeps running
  {
    std::string small = dir_.path + "/small";
    fs::create_directories(small);
    if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=4m") == 0) {
      auto full = (*vm0)->SaveSnapshot(small + "/snap");
      EXPECT_FALSE(full.ok());
      EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status().ToString();
      std::cerr << "full disk: " << full.status().ToString() << "\n";
      EXPECT_FALSE(fs::exists(small + "/snap"));
      auto st = (*vm0)->qmp().Execute("query-status");
      ASSERT_TRUE(st.ok());
      EXPECT_EQ((*st)["status"], "running");
      auto h = Http((*n0)->netns_ip(), "GET", "/health");
      EXPECT_TRUE(h.ok() && h->status == 204);
      ::umount2(small.c_str(), MNT_DETACH);
    } else {
      std::cerr << "skipping full-disk check: mount tmpfs: " << std::strerror(errno) << "\n";
    }
  }

  // -- a checkpoint: save and keep running; the disk is writable again afterwards
  {
    auto tc = Clock::now();
    auto c = (*vm0)->SaveSnapshot(dir_.path + "/checkpoint");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::cerr << "snapshot-metric checkpoint_save_ms=" << Ms(tc, Clock::now()) << "\n";
    auto st = (*vm0)->qmp().Execute("query-status");
    ASSERT_TRUE(st.ok());
    EXPECT_EQ((*st)["status"], "running");
    auto wc = Http((*n0)->netns_ip(), "POST", "/files?path=/home/user/after-checkpoint", "still-writable", token);
    ASSERT_TRUE(wc.ok()) << wc.status().ToString();
    EXPECT_EQ(wc->status, 200) << wc->body;
    auto sync = Http((*n0)->netns_ip(), "GET", "/files?path=/home/user/after-checkpoint", "", token);
    ASSERT_TRUE(sync.ok());
    EXPECT_EQ(sync->body, "still-writable");
    ASSERT_TRUE(DeleteSnapshot(dir_.path + "/checkpoint").ok());
  }

  // -- save (pause semantics), then the source goes away
  SaveSnapshotOptions so;
  so.keep_running = false;
  so.image_id = image_.id;
  auto ts = Clock::now();
  auto m = (*vm0)->SaveSnapshot(snap, so);
  auto te = Clock::now();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto st0 = (*vm0)->qmp().Execute("query-status");
  ASSERT_TRUE(st0.ok());
  EXPECT_FALSE((*st0)["running"].get<bool>());
  const int64_t save_ms = Ms(ts, te);
  std::cerr << "snapshot-metric save_ms=" << save_ms << " guest_ram_mib=" << s0.memory_mib
            << " save_ms_per_gib=" << save_ms * 1024 / s0.memory_mib << " memory_file_bytes=" << m->memory_bytes
            << " memory_file_disk_bytes=" << DiskUsage(snap + "/memory") << " disk_file_bytes=" << m->disk_bytes
            << " disk_file_disk_bytes=" << DiskUsage(snap + "/disk.qcow2") << "\n";
  std::cerr << ReadText(snap + "/manifest.json");
  EXPECT_TRUE(ReadSnapshot(snap).ok());
  ASSERT_TRUE((*vm0)->Destroy().ok());
  ASSERT_TRUE((*n0)->Destroy().ok());

  // -- two restores at once, each in its own netns with the same tap name and guest address
  auto n1 = net::SandboxNetwork::Create("sn1-" + tag, *pool_);
  auto n2 = net::SandboxNetwork::Create("sn2-" + tag, *pool_);
  ASSERT_TRUE(n1.ok() && n2.ok());
  RestoreOptions ro;
  ro.image_id = image_.id;
  RestoreThread r1, r2;
  r1.Run(Spec("sn1-" + tag, **n1), snap, ro);
  r2.Run(Spec("sn2-" + tag, **n2), snap, ro);
  auto v1 = r1.result.get_future().get();
  auto v2 = r2.result.get_future().get();
  auto release = [&] {
    if (v1.ok()) (void)(*v1)->Destroy();
    if (v2.ok()) (void)(*v2)->Destroy();
    r1.Release();
    r2.Release();
  };
  if (!v1.ok() || !v2.ok()) {
    release();
    FAIL() << "restore: " << v1.status().ToString() << " / " << v2.status().ToString();
  }
  auto h1 = WaitHealthy(**v1, (*n1)->netns_ip(), 30s);
  auto h2 = WaitHealthy(**v2, (*n2)->netns_ip(), 30s);
  EXPECT_TRUE(h1.ok()) << h1.status().ToString();
  EXPECT_TRUE(h2.ok()) << h2.status().ToString();
  if (h1.ok() && h2.ok()) {
    std::cerr << "snapshot-metric restore_call_ms=" << Ms(r1.started, r1.restored) << "," << Ms(r2.started, r2.restored)
              << " restore_to_agent_health_ms=" << Ms(r1.started, *h1) << "," << Ms(r2.started, *h2)
              << " (two concurrent; cold boot " << cold_ms << ")\n";
  }
  for (auto* p : {&*n1, &*n2}) {
    auto g = Http((*p)->netns_ip(), "GET", "/files?path=/home/user/x", "", token);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->status, 200);
    EXPECT_EQ(g->body, "hello-snapshot");
  }
  auto wy = Http((*n1)->netns_ip(), "POST", "/files?path=/home/user/y", "only-in-1", token);
  ASSERT_TRUE(wy.ok() && wy->status == 200);
  auto g1 = Http((*n1)->netns_ip(), "GET", "/files?path=/home/user/y", "", token);
  auto g2 = Http((*n2)->netns_ip(), "GET", "/files?path=/home/user/y", "", token);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1->body, "only-in-1");
  EXPECT_EQ(g2->status, 404) << g2->body;
  if (!token.empty()) {
    // Both copies carry the snapshot's token; rotating it in one (what the
    // host must do after every restore, docs/snapshots.md) leaves the other alone.
    auto rot = Http((*n1)->netns_ip(), "POST", "/init", R"({"accessToken":"tok-B"})", token);
    ASSERT_TRUE(rot.ok());
    EXPECT_EQ(rot->status, 204) << rot->body;
    auto old1 = Http((*n1)->netns_ip(), "GET", "/files?path=/home/user/x", "", "tok-A");
    auto new1 = Http((*n1)->netns_ip(), "GET", "/files?path=/home/user/x", "", "tok-B");
    auto old2 = Http((*n2)->netns_ip(), "GET", "/files?path=/home/user/x", "", "tok-A");
    ASSERT_TRUE(old1.ok() && new1.ok() && old2.ok());
    EXPECT_EQ(old1->status, 401);
    EXPECT_EQ(new1->status, 200);
    EXPECT_EQ(old2->status, 200);
  }
  std::cerr << "snapshot-metric restored_overlay_disk_bytes=" << DiskUsage((*v1)->paths().overlay) << ","
            << DiskUsage((*v2)->paths().overlay) << "\n";
  EXPECT_EQ((*v1)->disk_backing(), fs::absolute(snap + "/disk.qcow2").string());
  release();
  EXPECT_FALSE(QemuProcessLeft("sn1-" + tag));
  EXPECT_FALSE(QemuProcessLeft("sn2-" + tag));

  // -- broken snapshots: clear errors, bounded time, nothing left running
  auto n3 = net::SandboxNetwork::Create("sn3-" + tag, *pool_);
  ASSERT_TRUE(n3.ok());
  auto broken = [&](const std::string& name, auto&& damage) -> Status {
    std::string b = dir_.path + "/" + name;
    fs::create_directories(b);
    for (const char* f : {"memory", "disk.qcow2", "manifest.json"}) fs::copy_file(snap + "/" + f, b + "/" + f);
    damage(b);
    VmSpec s3 = Spec("sn3-" + tag, **n3);
    auto t = Clock::now();
    auto v = QemuVm::Restore(s3, b, ro);
    std::cerr << name << " (" << Ms(t, Clock::now()) << " ms): " << v.status().ToString().substr(0, 600) << "\n";
    EXPECT_LT(Ms(t, Clock::now()), 30000);
    EXPECT_FALSE(fs::exists(s3.run_dir)) << name;
    EXPECT_FALSE(QemuProcessLeft(s3.sandbox_id)) << name;
    fs::remove_all(b);
    return v.ok() ? OkStatus() : v.status();
  };
  auto truncate = [](const std::string& b, uint64_t to) { ASSERT_EQ(::truncate((b + "/memory").c_str(), to), 0); };
  auto patch_manifest = [](const std::string& b, auto&& edit) {
    auto j = nlohmann::json::parse(ReadText(b + "/manifest.json"));
    edit(j);
    WriteText(b + "/manifest.json", j.dump());
  };
  const uint64_t half = m->memory_bytes / 2;
  Status e = broken("truncated", [&](const std::string& b) { truncate(b, half); });
  EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.ToString();
  e = broken("truncated-manifest-agrees", [&](const std::string& b) {
    truncate(b, half);
    patch_manifest(b, [&](nlohmann::json& j) { j["memory_bytes"] = half; });
  });
  EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.ToString();
  e = broken("flipped-bytes", [&](const std::string& b) {
    std::fstream f(b + "/memory", std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t off : {uint64_t(64), half, m->memory_bytes - 100}) {
      f.seekp(static_cast<std::streamoff>(off));
      f.write("\xde\xad\xbe\xef", 4);
    }
  });
  EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.ToString();
  e = broken("page-data-only", [&](const std::string& b) {
    // Bytes QEMU cannot check: only the CRC notices.
    std::fstream f(b + "/memory", std::ios::in | std::ios::out | std::ios::binary);
    std::string all = ReadText(b + "/memory");
    size_t at = all.find(std::string(64, '\0'), all.size() / 3);  // inside some page's data
    ASSERT_NE(at, std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 8));
    f.write("X", 1);
  });
  EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.ToString();
  e = broken("other-shape",
             [&](const std::string& b) { patch_manifest(b, [&](nlohmann::json& j) { j["memory_mib"] = 1024; }); });
  EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.ToString();
  e = broken("other-image", [&](const std::string& b) {
    patch_manifest(b, [&](nlohmann::json& j) { j["image_id"] = "not-this-image"; });
  });
  EXPECT_EQ(e.code(), StatusCode::kFailedPrecondition) << e.ToString();
  EXPECT_TRUE((*n3)->Destroy().ok());
  EXPECT_TRUE((*n1)->Destroy().ok());
  EXPECT_TRUE((*n2)->Destroy().ok());
}

}  // namespace
}  // namespace airlock::qemu
