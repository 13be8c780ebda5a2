// Tests for src/runtime/qemu. Pure parts run anywhere; the rest needs the
// qemu binary and, for booting, a guest image: AIRLOCK_TEST_KERNEL,
// AIRLOCK_TEST_INITRD, AIRLOCK_TEST_ROOTFS, or files under
// /var/lib/airlock/images/ (vmlinux*, initr*, *.ext4). Network tests need
// root and `ip netns`. Everything skips with a message when unavailable.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "common/subprocess.h"
#include "net/address_pool.h"
#include "net/names.h"
#include "net/sandbox_network.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/doctor.h"
#include "runtime/qemu/jail.h"
#include "runtime/qemu/output_tail.h"
#include "runtime/qemu/qemu_vm.h"
#include "runtime/qemu/qmp_client.h"
#include "runtime/qemu/uid_pool.h"
#include "tests/unit/scoped_dir.h"

namespace airlock::qemu {
namespace {

// Tests lease from their own corner of the benchmark range, away from where a
// real state dir's pool (default 198.18.0.0/15, lowest pairs first) allocates,
// so a test netns never shadows a live sandbox's address.
constexpr char kTestPoolCidr[] = "198.19.240.0/22";

namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test_util::ScopedDir;
std::string TempDir() { return test_util::MakeTempDir("airlock-qemu-test"); }

// ---- accel ------------------------------------------------------------------

AccelHost FakeHost(StatusOr<int> api, std::string cpuinfo, bool module) {
  AccelHost h;
  h.kvm_api_version = [api] { return api; };
  h.cpuinfo = [cpuinfo]() -> StatusOr<std::string> { return cpuinfo; };
  h.module_loaded = [module](const std::string&) { return module; };
  return h;
}

TEST(QemuAccel, Decisions) {
  auto no_dev = ProbeAccel(FakeHost(NotFound("open /dev/kvm: No such file"), "flags : vmx", true));
  EXPECT_EQ(no_dev.accel, Accel::kTcg);
  EXPECT_NE(no_dev.reason.find("/dev/kvm"), std::string::npos);
  auto pvm = ProbeAccel(FakeHost(12, "flags\t\t: fpu sse2 hypervisor\n", true));
  EXPECT_EQ(pvm.accel, Accel::kTcg);
  EXPECT_NE(pvm.reason.find("vmx"), std::string::npos);
  auto nomod = ProbeAccel(FakeHost(12, "flags : fpu svm\n", false));
  EXPECT_EQ(nomod.accel, Accel::kTcg);
  EXPECT_NE(nomod.reason.find("kvm_amd"), std::string::npos);
  auto kvm = ProbeAccel(FakeHost(12, "flags : fpu vmx sse\n", true));
  EXPECT_EQ(kvm.accel, Accel::kKvm);
  EXPECT_NE(kvm.reason.find("kvm_intel"), std::string::npos);
}

TEST(QemuAccel, RealHostAndCache) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  AccelDecision d = ProbeAccelCached(dir);
  std::cerr << "accel here: " << AccelName(d.accel) << " (" << d.reason << ")\n";
  EXPECT_FALSE(d.reason.empty());
  ASSERT_TRUE(fs::exists(dir + "/accel"));
  // The cache answers even when the host would now say otherwise.
  AccelDecision c = ProbeAccelCached(dir, FakeHost(12, "flags : vmx", d.accel == Accel::kTcg));
  EXPECT_EQ(c.accel, d.accel);
  EXPECT_EQ(c.reason, d.reason);
  fs::remove_all(dir);
}

// ---- command line -------------------------------------------------------------

TEST(QemuArgv, Shape) {
  VmSpec s;
  s.sandbox_id = "sb1";
  s.kernel = "/k";
  s.initrd = "/i";
  s.run_dir = "/run/x";
  s.tap_name = "tap0";
  auto a = BuildQemuArgv(s, Accel::kTcg, VmPaths::For(s.run_dir), true, 2100000);
  std::string all;
  for (auto& x : a) all += x + " ";
  EXPECT_NE(all.find("-M microvm,acpi=on"), std::string::npos) << all;
  EXPECT_NE(all.find("-accel tcg"), std::string::npos);
  EXPECT_NE(all.find("-cpu max"), std::string::npos);
  EXPECT_NE(all.find("-nodefaults -no-user-config -nographic -no-reboot"), std::string::npos);
  EXPECT_NE(all.find("airlock.hostname=sb1"), std::string::npos);
  EXPECT_NE(all.find("tsc_early_khz=2100000"), std::string::npos);
  EXPECT_NE(all.find("file=/run/x/vmm/overlay.qcow2,if=none,id=root,format=qcow2,discard=unmap"), std::string::npos);
  EXPECT_NE(all.find("tap,id=n0,ifname=tap0,script=no,downscript=no"), std::string::npos);
  EXPECT_NE(all.find("unix:/run/x/vmm/qmp.sock,server=on,wait=off"), std::string::npos);
  EXPECT_NE(all.find("elevateprivileges=deny,spawn=deny"), std::string::npos);
  auto k = BuildQemuArgv(s, Accel::kKvm, VmPaths::For(s.run_dir), false, 0);
  all.clear();
  for (auto& x : k) all += x + " ";
  EXPECT_NE(all.find("-accel kvm -cpu host"), std::string::npos);
  EXPECT_EQ(all.find("tsc_early_khz"), std::string::npos);
  EXPECT_EQ(all.find("-sandbox"), std::string::npos);
  // Jailed: the jail drops root before exec, so QEMU never changes credentials.
  s.jail = {{100000, 100000}};
  s.run_dir = "/run/a,b";
  auto r = BuildQemuArgv(s, Accel::kTcg, VmPaths::For(s.run_dir), true, 1);
  all.clear();
  for (auto& x : r) all += x + " ";
  EXPECT_EQ(all.find("-runas"), std::string::npos);
  EXPECT_NE(all.find("elevateprivileges=deny"), std::string::npos);
  EXPECT_NE(all.find("file=/run/a,,b/vmm/overlay.qcow2"), std::string::npos);
}

// Guest RAM backends (docs/snapshots.md "Shared-RAM templates"): none by
// default (the command line, and so MachineShapeHash, of every VM before);
// a file shared by a template builder, private for a clone, anonymous for a
// stream restore of a VM that had a backend; never prealloc, balloon,
// virtio-mem or free-page reporting.
TEST(QemuArgv, GuestRamBackends) {
  VmSpec s;
  s.sandbox_id = "sb1";
  s.kernel = "/k";
  s.initrd = "/i";
  s.run_dir = "/run/x";
  s.memory_mib = 512;
  auto join = [](const std::vector<std::string>& a) {
    std::string all;
    for (auto& x : a) all += x + " ";
    return all;
  };
  const VmPaths p = VmPaths::For(s.run_dir);
  EXPECT_EQ(p.ram, "/run/x/vmm/ram");
  std::string plain = join(BuildQemuArgv(s, Accel::kTcg, p, true, 1));
  EXPECT_EQ(plain, join(BuildQemuArgv(s, Accel::kTcg, p, true, 1, GuestRam{})));
  EXPECT_EQ(plain.find("memory-backend"), std::string::npos) << plain;
  std::string shared = join(BuildQemuArgv(s, Accel::kTcg, p, true, 1, {RamKind::kSharedFile, p.ram}));
  EXPECT_NE(shared.find("-M microvm,acpi=on,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem0 "),
            std::string::npos)
      << shared;
  EXPECT_NE(
      shared.find("-m 512 -object memory-backend-file,id=mem0,size=512M,mem-path=/run/x/vmm/ram,share=on,prealloc=off"),
      std::string::npos)
      << shared;
  std::string clone = join(BuildQemuArgv(s, Accel::kTcg, p, true, 1, {RamKind::kPrivateFile, "/proc/self/fd/3"}));
  EXPECT_NE(clone.find("memory-backend-file,id=mem0,size=512M,mem-path=/proc/self/fd/3,share=off,prealloc=off"),
            std::string::npos)
      << clone;
  std::string anon = join(BuildQemuArgv(s, Accel::kTcg, p, true, 1, {RamKind::kAnon, ""}));
  EXPECT_NE(anon.find("-object memory-backend-ram,id=mem0,size=512M"), std::string::npos) << anon;
  for (const std::string& a : {shared, clone, anon}) {
    for (const char* never : {"balloon", "virtio-mem", "free-page", "prealloc=on", "memfd", "postcopy"})
      EXPECT_EQ(a.find(never), std::string::npos) << never << " in " << a;
  }
  // A comma in the path is escaped as QEMU wants.
  std::string esc = join(BuildQemuArgv(s, Accel::kTcg, p, true, 1, {RamKind::kPrivateFile, "/t/a,b/ram"}));
  EXPECT_NE(esc.find("mem-path=/t/a,,b/ram,share=off"), std::string::npos) << esc;
  for (RamKind k : {RamKind::kMachine, RamKind::kAnon, RamKind::kSharedFile, RamKind::kPrivateFile}) {
    auto back = ParseRamKind(RamKindName(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  EXPECT_FALSE(ParseRamKind("hugepages").ok());
}

// ---- jail ------------------------------------------------------------------------

TEST(QemuJail, PlanHoldsExactlyWhatTheVmmNeeds) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  fs::create_directories(dir + "/run/vmm");
  fs::create_directories(dir + "/img");
  std::ofstream(dir + "/img/kernel") << "k";
  std::ofstream(dir + "/img/rootfs.ext4") << "r";
  JailSpec js;
  js.vmm_dir = dir + "/run/vmm";
  js.base_dir = dir + "/run";
  js.ro_files = {dir + "/img/kernel", dir + "/img/rootfs.ext4", dir + "/img/kernel"};
  EXPECT_EQ(PlanJail(js).status().code(), StatusCode::kInvalidArgument);  // uid 0
  js.uid = js.gid = 2100000123;
  auto plan = PlanJail(js);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int rw = 0;
  std::set<std::string> targets;
  for (const auto& b : plan->binds) {
    targets.insert(b.target);
    EXPECT_EQ(b.source.rfind("/.oldroot/", 0), 0u) << b.source;
    if (b.writable) {
      ++rw;
      EXPECT_EQ(b.target, dir + "/run/vmm");
      EXPECT_FALSE(b.exec);
    }
    if (b.exec) EXPECT_FALSE(b.writable) << b.target;
  }
  EXPECT_EQ(rw, 1);  // only its own dir is writable
  EXPECT_TRUE(targets.count("/usr"));
  EXPECT_TRUE(targets.count(dir + "/img/kernel"));
  EXPECT_TRUE(targets.count(dir + "/img/rootfs.ext4"));
  for (const auto& t : targets) {
    EXPECT_EQ(t.rfind("/proc", 0), std::string::npos) << t;
    EXPECT_EQ(t.rfind("/sys", 0), std::string::npos) << t;
  }
  EXPECT_EQ(plan->files.size(), 3u);  // ld.so.cache + 2 (the duplicate kernel once)
  // Parents are made before their children.
  for (size_t i = 0; i < plan->dirs.size(); ++i) {
    std::string parent = fs::path(plan->dirs[i]).parent_path().string();
    if (parent == "/") continue;
    auto it = std::find(plan->dirs.begin(), plan->dirs.end(), parent);
    ASSERT_NE(it, plan->dirs.end()) << plan->dirs[i];
    EXPECT_LT(it - plan->dirs.begin(), static_cast<long>(i));
  }
  bool kvm = false;
  for (const auto& n : plan->nodes) kvm = kvm || n.path == "/dev/kvm";
  EXPECT_FALSE(kvm);  // only for a KVM guest
  // No /proc unless asked for (a VMM handed its RAM as fd 3).
  EXPECT_FALSE(plan->proc);
  EXPECT_EQ(std::find(plan->dirs.begin(), plan->dirs.end(), "/proc"), plan->dirs.end());
  js.proc = true;
  auto with_proc = PlanJail(js);
  ASSERT_TRUE(with_proc.ok());
  EXPECT_TRUE(with_proc->proc);
  EXPECT_NE(std::find(with_proc->dirs.begin(), with_proc->dirs.end(), "/proc"), with_proc->dirs.end());
  js.proc = false;
  js.ro_files.push_back(dir + "/missing");
  EXPECT_FALSE(PlanJail(js).ok());
}

TEST(QemuJail, UidPoolLeasesEachUidOnceHostWide) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmmUidPool pool(dir, 2100000000, 3), other_daemon(dir, 2100000000, 3);
  auto a = pool.Acquire("sb-a");
  auto b = other_daemon.Acquire("sb-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->uid, 2100000000u);
  EXPECT_EQ(b->uid, 2100000001u);
  auto c = pool.Acquire("sb-c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool.Acquire("sb-d").status().code(), StatusCode::kResourceExhausted);
  // Owned by a VMM that is gone: free again.
  Child gone = std::move(Spawn({{"/bin/true"}}).value());
  (void)gone.Wait();
  ASSERT_TRUE(VmmUidPool::Adopt(*b, gone.pid()).ok());
  auto d = pool.Acquire("sb-d");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->uid, b->uid);
  // A late release of b's lease does not free d's.
  ASSERT_TRUE(VmmUidPool::Release(*b).ok());
  EXPECT_EQ(pool.Acquire("sb-e").status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(VmmUidPool::Release(*a).ok());
  auto e = pool.Acquire("sb-e");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->uid, a->uid);
}

TEST(QemuJail, JailedQemuRunsWithNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  if (!FindExecutable("qemu-system-x86_64").ok()) GTEST_SKIP() << "qemu not installed";
  ScopedDir scoped_dir{TempDir()};
  auto v = ProbeJail("qemu-system-x86_64", 2100000999, scoped_dir.path);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_NE(v->find("QEMU emulator version"), std::string::npos) << *v;
}

// ---- output tail --------------------------------------------------------------

TEST(QemuOutputTail, KeepsOnlyTheTail) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  OutputTail t(1000);
  ASSERT_TRUE(t.Start(UniqueFd(p[0])).ok());
  std::string chunk(997, 'x');
  for (int i = 0; i < 3000; ++i) {
    chunk.back() = static_cast<char>('a' + i % 26);
    ASSERT_EQ(::write(p[1], chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
  }
  ASSERT_EQ(::write(p[1], "END", 3), 3);
  ::close(p[1]);
  for (int i = 0; i < 200 && t.total_bytes() < 3000u * 997 + 3; ++i) std::this_thread::sleep_for(5ms);
  std::string tail = t.Tail();
  EXPECT_LE(tail.size(), 1000u);
  EXPECT_EQ(tail.substr(tail.size() - 3), "END");
  EXPECT_EQ(t.total_bytes(), 3000u * 997 + 3);
  t.Stop();
}

// ---- QMP against a fake server -----------------------------------------------

TEST(QemuQmp, HandshakeEventsErrorsTimeout) {
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  std::string path = dir + "/q.sock";
  UniqueFd l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  ASSERT_EQ(::bind(l.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(l.get(), 1), 0);
  std::thread server([&] {
    UniqueFd c(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
    auto send = [&](const std::string& s) { (void)!::write(c.get(), s.data(), s.size()); };
    auto read_line = [&] {
      std::string s;
      char ch;
      while (::read(c.get(), &ch, 1) == 1 && ch != '\n') s += ch;
      return nlohmann::json::parse(s);
    };
    send("{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n");
    auto m = read_line();
    send("{\"return\": {}, \"id\": " + m["id"].dump() + "}\r\n");
    m = read_line();  // query-status: an event first, then the reply
    send("{\"event\": \"RESUME\", \"timestamp\": {}}\r\n");
    send("{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": " + m["id"].dump() + "}\r\n");
    m = read_line();  // bogus
    send(
        "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command bogus has not been found\"}, "
        "\"id\": " +
        m["id"].dump() + "}\r\n");
    m = read_line();  // slow: never answered
    std::this_thread::sleep_for(300ms);
  });
  auto q = QmpClient::Connect(path, 2s);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto st = (*q)->Execute("query-status");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"], "running");
  ASSERT_EQ((*q)->events().size(), 1u);
  EXPECT_EQ((*q)->events()[0]["event"], "RESUME");
  auto bad = (*q)->Execute("bogus");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("has not been found"), std::string::npos);
  auto slow = (*q)->Execute("slow", nullptr, 100ms);
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  server.join();
  EXPECT_EQ(QmpClient::Connect(dir + "/none.sock", 100ms).status().code(), StatusCode::kUnavailable);
  fs::remove_all(dir);
}

// ---- real QEMU ------------------------------------------------------------------

struct Image {
  std::string kernel, initrd, rootfs;
  bool scratch = false;  // our test initramfs (prints AIRLOCK-TEST-* markers)
};

std::optional<Image> FindImage() {
  Image im;
  if (const char* k = std::getenv("AIRLOCK_TEST_KERNEL")) im.kernel = k;
  if (const char* i = std::getenv("AIRLOCK_TEST_INITRD")) im.initrd = i;
  if (const char* r = std::getenv("AIRLOCK_TEST_ROOTFS")) im.rootfs = r;
  im.scratch = std::getenv("AIRLOCK_TEST_SCRATCH") != nullptr;
  std::error_code ec;
  // Layout of src/image: images/boot/<hash>/{vmlinux,initrd.cpio.gz},
  // images/rootfs/<hash>/rootfs.ext4 (never descend into images/tmp).
  const std::string root = "/var/lib/airlock/images";
  if (im.kernel.empty()) {
    for (const char* sub : {"/boot", "/rootfs"}) {
      if (!fs::is_directory(root + sub, ec)) continue;
      for (auto it = fs::directory_iterator(root + sub, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        for (auto f = fs::directory_iterator(it->path(), ec); !ec && f != fs::directory_iterator(); f.increment(ec)) {
          std::string n = f->path().filename().string();
          if (im.kernel.empty() && n == "vmlinux") im.kernel = f->path();
          if (im.initrd.empty() && n.rfind("initr", 0) == 0) im.initrd = f->path();
          if (im.rootfs.empty() && n == "rootfs.ext4") im.rootfs = f->path();
        }
        ec.clear();
      }
    }
  }
  if (im.kernel.empty() || im.initrd.empty() || im.rootfs.empty()) return std::nullopt;
  return im;
}

#define REQUIRE_QEMU()                                                                    \
  do {                                                                                    \
    if (!FindExecutable("qemu-system-x86_64").ok()) GTEST_SKIP() << "qemu not installed"; \
  } while (0)
#define REQUIRE_IMAGE(im)                                                                 \
  REQUIRE_QEMU();                                                                         \
  auto im##_opt = FindImage();                                                            \
  if (!im##_opt)                                                                          \
    GTEST_SKIP() << "no guest image (set AIRLOCK_TEST_KERNEL/INITRD/ROOTFS or build one " \
                    "under /var/lib/airlock/images)";                                     \
  const Image& im = *im##_opt

VmSpec SpecFor(const Image& im, const std::string& run_dir, const std::string& id) {
  VmSpec s;
  s.sandbox_id = id;
  s.kernel = im.kernel;
  s.initrd = im.initrd;
  s.rootfs_template = im.rootfs;
  s.run_dir = run_dir;
  s.memory_mib = 256;
  return s;
}

bool PidAlive(pid_t p) { return ::kill(p, 0) == 0; }

TEST(QemuVmTest, MissingKernelIsAClearError) {
  REQUIRE_QEMU();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmSpec s;
  s.sandbox_id = "bad";
  s.kernel = dir + "/no-such-vmlinux";
  s.initrd = s.rootfs_template = "/etc/hostname";
  s.run_dir = dir + "/run";
  auto vm = QemuVm::Start(s);
  ASSERT_FALSE(vm.ok());
  EXPECT_EQ(vm.status().code(), StatusCode::kNotFound) << vm.status().ToString();
  EXPECT_NE(vm.status().message().find("no-such-vmlinux"), std::string::npos);
  EXPECT_FALSE(fs::exists(s.run_dir));
  fs::remove_all(dir);
}

TEST(QemuVmTest, GarbageKernelFailsWithQemuStderr) {
  REQUIRE_QEMU();
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  { std::ofstream(dir + "/vmlinux") << "this is not a kernel"; }
  { std::ofstream(dir + "/rootfs") << std::string(1 << 16, '\0'); }
  VmSpec s;
  s.sandbox_id = "garbage";
  s.kernel = dir + "/vmlinux";
  s.initrd = dir + "/vmlinux";
  s.rootfs_template = dir + "/rootfs";
  s.run_dir = dir + "/run";
  s.accel = Accel::kTcg;
  auto vm = QemuVm::Start(s);
  ASSERT_FALSE(vm.ok());
  EXPECT_NE(vm.status().message().find("qemu exited during start"), std::string::npos) << vm.status().ToString();
  EXPECT_NE(vm.status().message().find("qemu stderr"), std::string::npos) << vm.status().ToString();
  std::cerr << vm.status().ToString() << "\n";
  EXPECT_FALSE(fs::exists(s.run_dir));
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/memory/airlock/garbage"));
  fs::remove_all(dir);
}

TEST(QemuVmTest, RunDirNotEmptyIsRefusedAndKept) {
  REQUIRE_IMAGE(im);
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  { std::ofstream(dir + "/precious") << "x"; }
  auto vm = QemuVm::Start(SpecFor(im, dir, "keep"));
  ASSERT_FALSE(vm.ok());
  EXPECT_TRUE(fs::exists(dir + "/precious"));
  fs::remove_all(dir);
}

TEST(QemuVmTest, StartQmpDestroy) {
  REQUIRE_IMAGE(im);
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmSpec s = SpecFor(im, dir + "/run", "qmp" + std::to_string(::getpid()));
  s.state_dir = dir;
  auto t0 = std::chrono::steady_clock::now();
  auto vm = QemuVm::Start(s);
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  std::cerr << "start→QMP ready: " << std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()
            << " ms, accel " << AccelName((*vm)->accel()) << "\n";
  pid_t pid = (*vm)->pid();
  EXPECT_TRUE(PidAlive(pid));
  auto st = (*vm)->qmp().Execute("query-status");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)["status"], "running");
  EXPECT_TRUE(fs::exists((*vm)->paths().overlay));
  bool have_cg = fs::exists("/sys/fs/cgroup/memory/airlock/" + s.sandbox_id);
  if (::geteuid() == 0 && fs::exists("/sys/fs/cgroup/memory/tasks")) {
    EXPECT_TRUE(have_cg);
    std::ifstream procs("/sys/fs/cgroup/memory/airlock/" + s.sandbox_id + "/cgroup.procs");
    pid_t in = 0;
    procs >> in;
    EXPECT_EQ(in, pid);
    // The VMMs together weigh less than one host task (cgroup.h).
    if (fs::exists("/sys/fs/cgroup/cpu/airlock/" + s.sandbox_id)) {
      std::ifstream shares("/sys/fs/cgroup/cpu/airlock/cpu.shares");
      int v = 0;
      shares >> v;
      EXPECT_EQ(v, kGuestGroupCpuShares);
    }
  }
  if (im.scratch) {
    Status b = (*vm)->WaitForConsole("AIRLOCK-TEST-READY", 60s);
    auto t2 = std::chrono::steady_clock::now();
    EXPECT_TRUE(b.ok()) << b.ToString();
    std::cerr << "start→guest init ready (console): "
              << std::chrono::duration_cast<std::chrono::milliseconds>(t2 - t0).count() << " ms\n";
  }
  auto t3 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*vm)->Destroy().ok());
  auto t4 = std::chrono::steady_clock::now();
  std::cerr << "destroy: " << std::chrono::duration_cast<std::chrono::milliseconds>(t4 - t3).count() << " ms\n";
  ASSERT_TRUE((*vm)->Destroy().ok());
  EXPECT_FALSE(PidAlive(pid));
  EXPECT_FALSE(fs::exists(s.run_dir));
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/memory/airlock/" + s.sandbox_id));
  EXPECT_FALSE(fs::exists("/sys/fs/cgroup/pids/airlock/" + s.sandbox_id));
  // The template was never written.
  fs::remove_all(dir);
}

TEST(QemuVmTest, GuestDyingAtBootSurfacesConsole) {
  REQUIRE_IMAGE(im);
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmSpec s = SpecFor(im, dir + "/run", "die" + std::to_string(::getpid()));
  s.accel = Accel::kTcg;
  s.extra_cmdline = "rdinit=/airlock-no-such-init init=/airlock-no-such-init";
  s.extra_cmdline += " loglevel=4";
  auto vm = QemuVm::Start(s);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  Status st = (*vm)->WaitForConsole("this marker never appears", 90s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("qemu exited"), std::string::npos);
  EXPECT_NE(st.message().find("Kernel panic"), std::string::npos) << st.ToString();
  std::cerr << st.ToString().substr(0, 300) << "...\n";
  fs::remove_all(dir);
}

TEST(QemuVmTest, ConsoleFloodStaysBounded) {
  REQUIRE_IMAGE(im);
  if (!im.scratch) GTEST_SKIP() << "needs the scratch initramfs (AIRLOCK_TEST_SCRATCH=1)";
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmSpec s = SpecFor(im, dir + "/run", "spam" + std::to_string(::getpid()));
  s.extra_cmdline = "airlock.test=spam";
  auto vm = QemuVm::Start(s);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  ASSERT_TRUE((*vm)->WaitForConsole("spamspam", 60s).ok());
  std::this_thread::sleep_for(5s);
  EXPECT_LE((*vm)->console_tail().size(), kConsoleTailBytes);
  uintmax_t disk = 0;
  for (auto& e : fs::recursive_directory_iterator(s.run_dir)) {
    if (e.is_regular_file() && e.path().filename() != "overlay.qcow2") disk += e.file_size();
  }
  EXPECT_EQ(disk, 0u);
  ASSERT_TRUE((*vm)->Destroy().ok());
  fs::remove_all(dir);
}

TEST(QemuVmTest, JailDropsRoot) {
  REQUIRE_IMAGE(im);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  VmSpec s = SpecFor(im, dir + "/run", "runas" + std::to_string(::getpid()));
  s.jail = {{100123, 100123}};
  auto vm = QemuVm::Start(s);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  std::ifstream f("/proc/" + std::to_string((*vm)->pid()) + "/status");
  std::string line, uid;
  while (std::getline(f, line)) {
    if (line.rfind("Uid:", 0) == 0) uid = line;
  }
  EXPECT_NE(uid.find("100123"), std::string::npos) << uid;
  EXPECT_EQ(uid.find("\t0"), std::string::npos) << uid;
  EXPECT_TRUE((*vm)->qmp().Execute("query-status").ok());
  ASSERT_TRUE((*vm)->Destroy().ok());
  fs::remove_all(dir);
}

// Host → guest agent port through the per-sandbox network, with a real VM.
TEST(QemuVmTest, HostReachesGuestThroughSandboxNetwork) {
  REQUIRE_IMAGE(im);
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  auto ipn = airlock::Run({"ip", "netns", "list"});
  if (!ipn.ok() || !ipn->status.success()) GTEST_SKIP() << "`ip netns` unavailable";
  ScopedDir scoped_dir{TempDir()};
  const std::string& dir = scoped_dir.path;
  auto pool = net::AddressPool::Create(dir, kTestPoolCidr);
  ASSERT_TRUE(pool.ok());
  std::string id = "vmnet" + std::to_string(::getpid());
  auto t0 = std::chrono::steady_clock::now();
  auto n = net::SandboxNetwork::Create(id, *pool);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  VmSpec s = SpecFor(im, dir + "/run", id);
  s.netns_fd = (*n)->netns_fd();
  s.tap_name = (*n)->tap_name();
  s.jail = {{100124, 100124}};
  auto vm = QemuVm::Start(s);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  // Poll the agent endpoint until something accepts.
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(49983);
  ::inet_pton(AF_INET, (*n)->netns_ip().c_str(), &a.sin_addr);
  bool connected = false;
  std::string reply;
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!connected && std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE((*vm)->CheckAlive().ok()) << (*vm)->CheckAlive().ToString();
    UniqueFd c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    timeval tv{1, 0};
    ::setsockopt(c.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ::setsockopt(c.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      connected = true;
      std::string req = "GET / HTTP/1.0\r\n\r\n";
      (void)!::write(c.get(), req.data(), req.size());
      char buf[4096];
      ssize_t got;
      while ((got = ::read(c.get(), buf, sizeof(buf))) > 0) reply.append(buf, got);
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_TRUE(connected) << "agent port never answered; console: " << (*vm)->console_tail();
  std::cerr << "network+VM create → guest port 49983 accepts: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count() << " ms\n";
  if (im.scratch) {
    EXPECT_NE(reply.find("hello from guest"), std::string::npos) << reply;
  }
  ASSERT_TRUE((*vm)->Destroy().ok());
  ASSERT_TRUE((*n)->Destroy().ok());
  EXPECT_FALSE(net::NetnsExists("al-" + id));
  fs::remove_all(dir);
}

TEST(QemuDoctor, Checks) {
  auto checks = QemuDoctorChecks();
  ASSERT_FALSE(checks.empty());
  for (const auto& c : checks) std::cerr << (c.ok ? "[ok]   " : "[FAIL] ") << c.name << ": " << c.detail << "\n";
}

}  // namespace
}  // namespace airlock::qemu
