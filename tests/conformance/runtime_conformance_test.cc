// The runtime conformance suite: one case per promise of runtime/runtime.h,
// run for every runtime of runtime/registry.h AvailableRuntimes() (the
// gVisor pattern: one suite, every platform). A new runtime passes this
// before the core uses it.
//
// It boots real VMs from the built `base` image (AIRLOCK_STATE_DIR, default
// /var/lib/airlock) and talks to their agents through airlock_net networks
// (addresses from AIRLOCK_CONFORMANCE_TEST_CIDR, default 198.19.233.0/24,
// leases in a temp dir); it needs root and skips with the reason otherwise.
// The runtime itself gets a temp state dir. One VM per runtime (and the
// checkpoint taken of it) is shared by the cases that leave it running;
// cases that end a VM boot their own.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/agent_port.h"
#include "common/subprocess.h"
#include "image/image.h"
#include "net/address_pool.h"
#include "net/sandbox_network.h"
#include "runtime/registry.h"
#include "runtime/runtime.h"
#include "tests/unit/agent_http.h"
#include "tests/unit/scoped_dir.h"

namespace airlock {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test_util::AgentHttp;

constexpr int kMemoryMib = 256;  // small: saves and restores are quicker
constexpr char kToken[] = "conformance-token";

bool ProcessGone(pid_t pid) { return pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH); }

// Waits (≤ 5 s) for `pid` to be gone: a destroyed VMM is reaped, an exited
// one may take a moment to disappear. `reap`: the VMM was started by this
// process and Release()d, so nobody else waits for it (a daemon's adopted
// VMM is its init's child): reap it here, or it stays a zombie.
bool WaitGone(pid_t pid, bool reap = false) {
  for (auto end = Clock::now() + 5s; Clock::now() < end; std::this_thread::sleep_for(20ms)) {
    if (reap && ::waitpid(pid, nullptr, WNOHANG) == pid) return true;
    if (ProcessGone(pid)) return true;
  }
  return ProcessGone(pid);
}

// A booted VM with its own network, destroyed (VM first) at scope exit.
struct TestVm {
  std::unique_ptr<net::SandboxNetwork> network;
  std::unique_ptr<VmInstance> vm;
  std::string run_dir;
  ~TestVm() {
    if (vm) (void)vm->Destroy();
    vm.reset();
    if (network) (void)network->Destroy();
  }
  std::string ip() const { return network->netns_ip(); }
};

// Per runtime: the runtime, its state dir, and the VM + checkpoint shared by
// the cases that keep them intact. Torn down after the suite.
struct Shared {
  test_util::ScopedDir dir;
  std::unique_ptr<Runtime> runtime;
  std::string open_error;  // non-empty: every case skips with it
  std::unique_ptr<TestVm> vm;
  std::string checkpoint;  // a keep_running snapshot of vm (file x written before it)
  VmSnapshotInfo checkpoint_info;
};

// One address pool and one id sequence for every runtime: the runtimes' VMs
// live side by side (each keeps its shared VM up for the whole suite), so
// their sandbox ids (netns names) and addresses must never meet.
struct Networks {
  test_util::ScopedDir dir{test_util::MakeTempDir("airlock-conformance-net")};
  StatusOr<net::AddressPool> pool = net::AddressPool::Create(dir.path + "/leases", [] {
    const char* cidr = std::getenv("AIRLOCK_CONFORMANCE_TEST_CIDR");
    return std::string(cidr ? cidr : "198.19.233.0/24");
  }());
  int next_id = 0;
};
Networks& TheNetworks() {
  static Networks n;  // its temp dir goes at exit
  return n;
}

std::map<std::string, std::unique_ptr<Shared>>& AllShared() {
  static auto* all = new std::map<std::string, std::unique_ptr<Shared>>();
  return *all;
}

std::string StateDir() {
  const char* sd = std::getenv("AIRLOCK_STATE_DIR");
  return sd && *sd ? sd : image::kDefaultStateDir;
}

// Empty when VMs can boot here; else why not.
std::string HostSkipReason(image::GuestImage* img) {
  if (::geteuid() != 0) return "needs root (netns, tap, VMM jail)";
  auto ipn = airlock::Run({"ip", "netns", "list"});
  if (!ipn.ok() || !ipn->status.success()) return "`ip netns` unavailable";
  auto found = image::FindImage(StateDir(), "base");
  if (!found.ok()) return "no base image in " + StateDir() + ": " + found.status().ToString();
  *img = *found;
  return "";
}

class RuntimeConformance : public ::testing::TestWithParam<std::string> {
 protected:
  static void TearDownTestSuite() { AllShared().clear(); }

  void SetUp() override {
    std::string why = HostSkipReason(&image_);
    if (!why.empty()) GTEST_SKIP() << why;
    auto& slot = AllShared()[GetParam()];
    if (!slot) {
      slot = std::make_unique<Shared>();
      slot->dir.path = test_util::MakeTempDir("airlock-conformance");
      const auto& pool = TheNetworks().pool;
      RuntimeOptions o;
      o.state_dir = slot->dir.path + "/state";
      fs::create_directories(o.state_dir + "/run");
      auto rt = OpenRuntime(GetParam(), o);
      if (!pool.ok())
        slot->open_error = "address pool: " + pool.status().ToString();
      else if (!rt.ok())
        slot->open_error = "runtime " + GetParam() + " cannot open here: " + rt.status().ToString();
      else
        slot->runtime = std::move(rt).value();
    }
    shared_ = slot.get();
    if (!shared_->open_error.empty()) GTEST_SKIP() << shared_->open_error;
  }

  Runtime& runtime() { return *shared_->runtime; }
  // "" when the runtime snapshots; else why not (its store says, e.g.
  // gVisor's): the snapshot cases skip with it, printed, rather than fail.
  std::string NoSnapshotsReason() {
    auto r = store().Read(shared_->dir.path + "/no-such-snapshot");
    return r.status().code() == StatusCode::kUnimplemented ? r.status().message() : "";
  }
  const SnapshotStore& store() { return shared_->runtime->snapshots(); }
  // "" when the runtime's snapshots keep a disk apart from the memory (pause
  // without memory, a cold boot from a snapshot's disk); else why not (gVisor
  // keeps a sandbox's files in its memory): those cases skip with it.
  std::string NoDiskOnlyReason() {
    Status st = store().DropMemory(shared_->dir.path + "/no-such-snapshot");
    return st.code() == StatusCode::kUnimplemented ? st.message() : "";
  }

  // A fresh sandbox id ("cf<n>-<pid>"), its network, and a request for it.
  StatusOr<std::unique_ptr<TestVm>> NewSlot(VmStartRequest* req) {
    const std::string id = "cf" + std::to_string(TheNetworks().next_id++) + "-" + std::to_string(::getpid());
    auto t = std::make_unique<TestVm>();
    net::NetworkOptions no;
    no.guest_link = runtime().guest_link();
    ASSIGN_OR_RETURN(t->network, net::SandboxNetwork::Create(id, *TheNetworks().pool, no));
    std::error_code ec;
    fs::create_directories(shared_->dir.path + "/state/run/" + id, ec);
    t->run_dir = shared_->dir.path + "/state/run/" + id + "/vm";
    req->sandbox_id = id;
    req->kernel = image_.kernel;
    req->initrd = image_.initrd;
    req->rootfs = image_.rootfs;
    req->run_dir = t->run_dir;
    req->vcpus = 1;
    req->memory_mib = kMemoryMib;
    req->netns_fd = t->network->netns_fd();
    req->tap = t->network->tap_name();
    req->guest_netns = t->network->guest_netns_path();
    req->netns_ip = t->network->netns_ip();
    req->guest_cidr = net::SandboxNetwork::guest_cidr();
    req->guest_gateway = net::SandboxNetwork::gateway_ip();
    return t;
  }

  // Polls the agent's /health until 204 (fails early if the VM dies).
  static Status WaitHealthy(TestVm& t, std::chrono::milliseconds timeout = 120s) {
    for (auto end = Clock::now() + timeout; Clock::now() < end; std::this_thread::sleep_for(20ms)) {
      if (!t.vm->alive()) return FailedPrecondition("VM died; console: " + t.vm->ConsoleTail());
      auto r = AgentHttp(t.ip(), "GET", "/health", "", "", 1s);
      if (r.ok() && r->status == 204) return OkStatus();
    }
    return DeadlineExceeded("agent at " + t.ip() + " never answered /health; console: " + t.vm->ConsoleTail());
  }

  // Cold boots a VM to agent-ready; `init`: gives the agent kToken.
  StatusOr<std::unique_ptr<TestVm>> Boot(bool detach = false, bool init = true) {
    VmStartRequest req;
    ASSIGN_OR_RETURN(auto t, NewSlot(&req));
    req.detach = detach;
    ASSIGN_OR_RETURN(t->vm, runtime().Start(req));
    RETURN_IF_ERROR(WaitHealthy(*t));
    if (init) {
      ASSIGN_OR_RETURN(auto r,
                       AgentHttp(t->ip(), "POST", "/init", std::string(R"({"accessToken":")") + kToken + "\"}"));
      if (r.status != 204) return Internal("POST /init: " + std::to_string(r.status) + " " + r.body);
    }
    return t;
  }

  // Restores `dir` into a fresh network; the VM is agent-ready on return.
  StatusOr<std::unique_ptr<TestVm>> RestoreInto(const std::string& dir, SnapshotDisk disk, bool memory = true) {
    VmStartRequest req;
    ASSIGN_OR_RETURN(auto t, NewSlot(&req));
    ASSIGN_OR_RETURN(t->vm, runtime().Restore(req, dir, disk, memory));
    RETURN_IF_ERROR(WaitHealthy(*t, memory ? 30s : 120s));
    return t;
  }

  static Status WriteGuestFile(TestVm& t, const std::string& path, const std::string& content) {
    ASSIGN_OR_RETURN(auto r, AgentHttp(t.ip(), "POST", "/files?path=" + path, content, kToken));
    if (r.status != 200) return Internal("write " + path + ": " + std::to_string(r.status) + " " + r.body);
    return OkStatus();
  }
  // The file's content, or "<status>" when the agent answers otherwise.
  static std::string ReadGuestFile(TestVm& t, const std::string& path) {
    auto r = AgentHttp(t.ip(), "GET", "/files?path=" + path, "", kToken);
    if (!r.ok()) return "<" + r.status().ToString() + ">";
    return r->status == 200 ? r->body : "<" + std::to_string(r->status) + ">";
  }

  // The shared VM: booted once per runtime, /home/user/x written.
  TestVm* SharedVm() {
    if (!shared_->vm) {
      auto t = Boot();
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      if (!t.ok()) return nullptr;
      Status w = WriteGuestFile(**t, "/home/user/x", "before-checkpoint");
      EXPECT_TRUE(w.ok()) << w.ToString();
      if (!w.ok()) return nullptr;
      shared_->vm = std::move(t).value();
    }
    return shared_->vm.get();
  }

  // A checkpoint (keep_running=true) of the shared VM, taken once.
  std::string Checkpoint() {
    if (shared_->checkpoint.empty()) {
      TestVm* vm = SharedVm();
      if (!vm) return "";
      const std::string dir = shared_->dir.path + "/checkpoint";
      auto info = vm->vm->SaveSnapshot(dir, /*keep_running=*/true);
      EXPECT_TRUE(info.ok()) << info.status().ToString();
      if (!info.ok()) return "";
      shared_->checkpoint = dir;
      shared_->checkpoint_info = *info;
    }
    return shared_->checkpoint;
  }

  // A copy of the checkpoint's files in a new directory (a snapshot stays
  // valid when copied: its disk's backing file is recorded by absolute path).
  std::string CopyOfCheckpoint(const std::string& name) {
    const std::string from = Checkpoint();
    if (from.empty()) return "";
    const std::string to = shared_->dir.path + "/" + name;
    fs::copy(from, to, fs::copy_options::recursive);
    return to;
  }

  // The memory image of a snapshot: named by the runtime's format where known,
  // else the largest file (guest RAM dwarfs the rest).
  std::string MemoryFileOf(const std::string& dir) {
    if (GetParam() == "qemu") return dir + "/memory";
    std::string best;
    uintmax_t size = 0;
    for (auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.file_size() > size) size = e.file_size(), best = e.path().string();
    }
    return best;
  }

  image::GuestImage image_;
  Shared* shared_ = nullptr;
};

// ---- VmInstance --------------------------------------------------------------------

TEST_P(RuntimeConformance, StartedVmIsAliveWithAPidAndAnAgent) {
  TestVm* t = SharedVm();
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->vm->alive());
  EXPECT_GT(t->vm->pid(), 0);
  EXPECT_FALSE(ProcessGone(t->vm->pid()));
  EXPECT_EQ(ReadGuestFile(*t, "/home/user/x"), "before-checkpoint");
  EXPECT_FALSE(runtime().name().empty());
  EXPECT_FALSE(runtime().accelerator().empty());
}

TEST_P(RuntimeConformance, ConsoleTailHoldsTheGuestsLastOutputBounded) {
  TestVm* t = SharedVm();
  ASSERT_NE(t, nullptr);
  const std::string tail = t->vm->ConsoleTail();
  EXPECT_FALSE(tail.empty()) << "a booted guest printed nothing on its console";
  EXPECT_LE(tail.size(), 64u * 1024) << "ConsoleTail is for error messages: a few KiB";
}

TEST_P(RuntimeConformance, DestroyIsIdempotentAndLeavesNothingRunning) {
  auto t = Boot(/*detach=*/false, /*init=*/false);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const pid_t pid = (*t)->vm->pid();
  EXPECT_TRUE((*t)->vm->Destroy().ok());
  EXPECT_TRUE(WaitGone(pid)) << "VMM pid " << pid << " still runs after Destroy";
  EXPECT_FALSE((*t)->vm->alive());
  EXPECT_TRUE((*t)->vm->Destroy().ok()) << "a second Destroy must be a no-op";
  EXPECT_FALSE(fs::exists((*t)->run_dir)) << "Destroy leaves the run dir behind";
}

TEST_P(RuntimeConformance, DestructorDestroys) {
  auto t = Boot(/*detach=*/false, /*init=*/false);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const pid_t pid = (*t)->vm->pid();
  (*t)->vm.reset();
  EXPECT_TRUE(WaitGone(pid)) << "VMM pid " << pid << " still runs after its VmInstance was destroyed";
  EXPECT_FALSE(fs::exists((*t)->run_dir));
}

TEST_P(RuntimeConformance, ReleaseLeavesTheVmmRunningAndAdoptTakesItBack) {
  auto t = Boot(/*detach=*/true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  TestVm& vm = **t;
  const pid_t pid = vm.vm->Release();
  EXPECT_GT(pid, 0);
  EXPECT_TRUE(vm.vm->Destroy().ok());
  vm.vm.reset();  // neither Destroy nor the destructor touch a released VMM
  EXPECT_FALSE(ProcessGone(pid)) << "Release must leave the VMM running";
  auto h = AgentHttp(vm.ip(), "GET", "/health");
  EXPECT_TRUE(h.ok() && h->status == 204) << "the released guest must keep answering";
  auto adopted = runtime().Adopt(vm.run_dir, pid);
  if (!adopted.ok()) {
    ::kill(pid, SIGKILL);
    FAIL() << "Adopt: " << adopted.status().ToString();
  }
  vm.vm = std::move(adopted).value();
  EXPECT_EQ(vm.vm->pid(), pid);
  EXPECT_TRUE(vm.vm->alive());
  EXPECT_TRUE(WaitHealthy(vm, 10s).ok());
  // Full control: an adopted VM snapshots too (where the runtime snapshots).
  if (NoSnapshotsReason().empty()) {
    auto info = vm.vm->SaveSnapshot(shared_->dir.path + "/adopted-snap", /*keep_running=*/true);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_TRUE(store().Delete(shared_->dir.path + "/adopted-snap").ok());
  }
  EXPECT_TRUE(vm.vm->Destroy().ok());
  EXPECT_TRUE(WaitGone(pid, /*reap=*/true));
}

TEST_P(RuntimeConformance, SaveSnapshotKeepRunningLeavesTheGuestRunning) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  TestVm* t = SharedVm();
  const VmSnapshotInfo& info = shared_->checkpoint_info;
  EXPECT_GT(info.memory_bytes, 0u);
  if (NoDiskOnlyReason().empty()) EXPECT_GT(info.disk_bytes, 0u);  // else the files are in the memory
  EXPECT_TRUE(t->vm->alive());
  // Running and writable again right away.
  ASSERT_TRUE(WriteGuestFile(*t, "/home/user/after-checkpoint", "still-writable").ok());
  EXPECT_EQ(ReadGuestFile(*t, "/home/user/after-checkpoint"), "still-writable");
}

TEST_P(RuntimeConformance, SaveSnapshotStoppedThenContinueGuestRunsAgain) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  TestVm* t = SharedVm();
  ASSERT_NE(t, nullptr);
  const std::string dir = shared_->dir.path + "/stopped";
  auto info = t->vm->SaveSnapshot(dir, /*keep_running=*/false);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(t->vm->alive()) << "a stopped guest's VMM still runs";
  auto h = AgentHttp(t->ip(), "GET", "/health", "", "", 1s);
  EXPECT_FALSE(h.ok() && h->status == 204) << "the guest answers although SaveSnapshot(keep_running=false) stopped it";
  ASSERT_TRUE(t->vm->ContinueGuest().ok());
  EXPECT_TRUE(WaitHealthy(*t, 10s).ok());
  EXPECT_EQ(ReadGuestFile(*t, "/home/user/x"), "before-checkpoint");
  EXPECT_TRUE(store().Delete(dir).ok());
}

TEST_P(RuntimeConformance, SaveSnapshotIntoAnUnusableDirFailsAndTheGuestRunsOn) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  TestVm* t = SharedVm();
  ASSERT_NE(t, nullptr);
  const std::string file = shared_->dir.path + "/a-file";
  std::ofstream(file) << "not a directory";
  auto info = t->vm->SaveSnapshot(file + "/snap", /*keep_running=*/false);
  EXPECT_FALSE(info.ok());
  EXPECT_TRUE(WaitHealthy(*t, 10s).ok()) << "a failed save must leave a running guest running";
}

// ---- Runtime ---------------------------------------------------------------------

TEST_P(RuntimeConformance, ContinueIfStoppedRunsAGuestADeadProcessLeftStopped) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  // Nothing there: nothing to do.
  EXPECT_TRUE(runtime().ContinueIfStopped(shared_->dir.path + "/no-such-run-dir").ok());
  // A daemon paused a detached VM (SaveSnapshot keep_running=false) and died
  // before Destroy or ContinueGuest: the VMM runs on, its guest stopped.
  auto t = Boot(/*detach=*/true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  TestVm& vm = **t;
  const std::string dir = shared_->dir.path + "/left-stopped";
  auto info = vm.vm->SaveSnapshot(dir, /*keep_running=*/false);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const pid_t pid = vm.vm->Release();
  vm.vm.reset();  // the "dead daemon" lets go of the VMM
  auto stopped = AgentHttp(vm.ip(), "GET", "/health", "", "", 1s);
  EXPECT_FALSE(stopped.ok() && stopped->status == 204) << "the guest runs although the save stopped it";
  Status st = runtime().ContinueIfStopped(vm.run_dir);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto h = AgentHttp(vm.ip(), "GET", "/health", "", "", 10s);
  for (auto end = Clock::now() + 10s; !(h.ok() && h->status == 204) && Clock::now() < end;) {
    std::this_thread::sleep_for(50ms);
    h = AgentHttp(vm.ip(), "GET", "/health", "", "", 1s);
  }
  EXPECT_TRUE(h.ok() && h->status == 204) << "ContinueIfStopped left the guest stopped";
  // Running: left alone.
  EXPECT_TRUE(runtime().ContinueIfStopped(vm.run_dir).ok());
  auto adopted = runtime().Adopt(vm.run_dir, pid);
  if (!adopted.ok()) {
    ::kill(pid, SIGKILL);
    FAIL() << "Adopt: " << adopted.status().ToString();
  }
  vm.vm = std::move(adopted).value();
  EXPECT_TRUE(WaitHealthy(vm, 10s).ok());
  EXPECT_TRUE(store().Delete(dir).ok());
  EXPECT_TRUE(vm.vm->Destroy().ok());
  EXPECT_TRUE(WaitGone(pid, /*reap=*/true));
}

TEST_P(RuntimeConformance, RestoreRunsTheGuestWithItsMemory) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  auto r = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE((*r)->vm->alive());
  // Memory came back: the token given before the checkpoint is still required.
  auto no_token = AgentHttp((*r)->ip(), "GET", "/files?path=/home/user/x");
  ASSERT_TRUE(no_token.ok()) << no_token.status().ToString();
  EXPECT_EQ(no_token->status, 401);
  EXPECT_EQ(ReadGuestFile(**r, "/home/user/x"), "before-checkpoint");
}

// A template builder (shared_memory_template): its save (keep_running =
// false) ends it; where the runtime keeps the RAM apart (shared_memory_bytes
// > 0) the saved stream is small. Two restores run with the template's
// memory and disk, and what one writes the other does not see.
TEST_P(RuntimeConformance, SharedMemoryTemplateRestoresRunWithItsMemoryAndStayPrivate) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  VmStartRequest req;
  auto t = NewSlot(&req);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  req.shared_memory_template = true;
  auto vm = runtime().Start(req);
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  (*t)->vm = std::move(*vm);
  ASSERT_TRUE(WaitHealthy(**t).ok());
  auto init = AgentHttp((*t)->ip(), "POST", "/init", std::string(R"({"accessToken":")") + kToken + "\"}");
  ASSERT_TRUE(init.ok() && init->status == 204);
  ASSERT_TRUE(WriteGuestFile(**t, "/home/user/t", "template").ok());
  const std::string dir = shared_->dir.path + "/shared-memory-template";
  auto info = (*t)->vm->SaveSnapshot(dir, /*keep_running=*/false);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  if (info->shared_memory_bytes > 0) {
    EXPECT_EQ(info->shared_memory_bytes, uint64_t(kMemoryMib) << 20);
    EXPECT_LT(info->memory_bytes, 4u << 20) << "RAM kept apart, yet the stream is large";
  }
  EXPECT_TRUE((*t)->vm->Destroy().ok());
  EXPECT_TRUE(store().Read(dir).ok());
  auto a = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  // Memory came back: the token given before the save is still required.
  auto no_token = AgentHttp((*a)->ip(), "GET", "/files?path=/home/user/t");
  ASSERT_TRUE(no_token.ok());
  EXPECT_EQ(no_token->status, 401);
  EXPECT_EQ(ReadGuestFile(**a, "/home/user/t"), "template");
  ASSERT_TRUE(WriteGuestFile(**a, "/home/user/t", "a's").ok());
  EXPECT_EQ(ReadGuestFile(**b, "/home/user/t"), "template");
  EXPECT_EQ(ReadGuestFile(**a, "/home/user/t"), "a's");
}

TEST_P(RuntimeConformance, RestoreWithAnotherShapeIsFailedPrecondition) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  VmStartRequest req;
  auto t = NewSlot(&req);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  req.memory_mib = kMemoryMib * 2;
  auto vm = runtime().Restore(req, dir, SnapshotDisk::kShared);
  EXPECT_EQ(vm.status().code(), StatusCode::kFailedPrecondition) << vm.status().ToString();
  EXPECT_FALSE(fs::exists((*t)->run_dir)) << "a failed Restore leaves its run dir behind";
  req.memory_mib = kMemoryMib;
  req.vcpus = 2;
  vm = runtime().Restore(req, dir, SnapshotDisk::kShared);
  EXPECT_EQ(vm.status().code(), StatusCode::kFailedPrecondition) << vm.status().ToString();
}

TEST_P(RuntimeConformance, RestoreOfACorruptMemoryFileIsDataLoss) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = CopyOfCheckpoint("corrupt");
  ASSERT_FALSE(dir.empty());
  const std::string mem = MemoryFileOf(dir);
  ASSERT_FALSE(mem.empty());
  {
    // Same size (the store's size checks pass): only the content is wrong.
    std::fstream f(mem, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(mem);
    for (uintmax_t off : {uintmax_t(64), size / 3, size / 2, size - 100}) {
      f.seekp(static_cast<std::streamoff>(off));
      f.write("\xde\xad\xbe\xef", 4);
    }
  }
  VmStartRequest req;
  auto t = NewSlot(&req);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto start = Clock::now();
  auto vm = runtime().Restore(req, dir, SnapshotDisk::kShared);
  EXPECT_EQ(vm.status().code(), StatusCode::kDataLoss) << vm.status().ToString();
  EXPECT_LT(Clock::now() - start, 60s);
  EXPECT_FALSE(fs::exists((*t)->run_dir));
  EXPECT_TRUE(store().Delete(dir).ok());
}

TEST_P(RuntimeConformance, RestoreWithoutMemoryColdBoots) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  if (std::string why = NoDiskOnlyReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  auto r = RestoreInto(dir, SnapshotDisk::kPrivateCopy, /*memory=*/false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // A fresh kernel and agent: no token yet (the checkpoint's memory had one).
  auto init = AgentHttp((*r)->ip(), "POST", "/init", R"({"accessToken":"cold"})");
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  EXPECT_EQ(init->status, 204) << "the agent kept the snapshot's token: its memory was restored";
  EXPECT_TRUE(store().Read(dir).ok()) << "a cold boot must not consume the snapshot";
}

TEST_P(RuntimeConformance, SharedDiskRestoresAreIsolatedAndNeedTheSnapshot) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  auto a = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(WriteGuestFile(**a, "/home/user/only-a", "a").ok());
  EXPECT_EQ(ReadGuestFile(**a, "/home/user/only-a"), "a");
  EXPECT_EQ(ReadGuestFile(**b, "/home/user/only-a"), "<404>") << "two restores of one snapshot share writes";
  EXPECT_EQ(ReadGuestFile(**b, "/home/user/x"), "before-checkpoint");
  // The snapshot is still intact under both.
  auto shape = store().Read(dir);
  EXPECT_TRUE(shape.ok()) << shape.status().ToString();
}

TEST_P(RuntimeConformance, PrivateCopyRestoreOutlivesItsSnapshot) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = CopyOfCheckpoint("private");
  ASSERT_FALSE(dir.empty());
  auto r = RestoreInto(dir, SnapshotDisk::kPrivateCopy);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(store().Delete(dir).ok());
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_TRUE((*r)->vm->alive());
  EXPECT_EQ(ReadGuestFile(**r, "/home/user/x"), "before-checkpoint");
  ASSERT_TRUE(WriteGuestFile(**r, "/home/user/after-delete", "fine").ok());
  EXPECT_EQ(ReadGuestFile(**r, "/home/user/after-delete"), "fine");
  // And it snapshots again (pause/resume cycles of a private copy).
  auto again = (*r)->vm->SaveSnapshot(shared_->dir.path + "/private-again", /*keep_running=*/true);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(store().Read(shared_->dir.path + "/private-again").ok());
  EXPECT_TRUE(store().Delete(shared_->dir.path + "/private-again").ok());
}

// Pause/resume cycles and forks of forks: a snapshot of a restored guest
// restores too, with what each generation wrote.
TEST_P(RuntimeConformance, RestoreOfARestoredGuestsSnapshotRuns) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  std::string from = dir;
  for (int gen = 1; gen <= 3; ++gen) {
    auto r = RestoreInto(from, SnapshotDisk::kPrivateCopy);
    ASSERT_TRUE(r.ok()) << "generation " << gen << ": " << r.status().ToString();
    EXPECT_EQ(ReadGuestFile(**r, "/home/user/x"), "before-checkpoint") << "generation " << gen;
    if (gen > 1) EXPECT_EQ(ReadGuestFile(**r, "/home/user/gen"), std::to_string(gen - 1)) << "generation " << gen;
    ASSERT_TRUE(WriteGuestFile(**r, "/home/user/gen", std::to_string(gen)).ok());
    const std::string next = shared_->dir.path + "/generation-" + std::to_string(gen);
    auto saved = (*r)->vm->SaveSnapshot(next, /*keep_running=*/gen % 2 == 0);
    ASSERT_TRUE(saved.ok()) << "generation " << gen << ": " << saved.status().ToString();
    if (from != dir) EXPECT_TRUE(store().Delete(from).ok());
    from = next;
  }
  EXPECT_TRUE(store().Delete(from).ok());
}

// A guest saved while a client held connections to its agent (an idle
// keep-alive one and one mid-request) runs on, and so do its restores: the
// connections may be cut (gVisor resets them at a save), the agent may not.
TEST_P(RuntimeConformance, SaveWithOpenAgentConnectionsLeavesEveryCopyAnswering) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  auto t = Boot();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto open_to_agent = [&](const std::string& send) -> int {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(kAgentPort);
    ::inet_pton(AF_INET, (*t)->ip().c_str(), &sa.sin_addr);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(fd);
      return -1;
    }
    if (!send.empty()) (void)!::write(fd, send.data(), send.size());
    return fd;
  };
  int idle = open_to_agent("GET /health HTTP/1.1\r\nHost: a\r\n\r\n");  // answered, then kept alive
  int half = open_to_agent("GET /health HTTP/1.1\r\nHost: a\r\n");     // headers not finished
  ASSERT_GE(idle, 0);
  ASSERT_GE(half, 0);
  std::this_thread::sleep_for(200ms);  // let the agent answer the first and read the second
  const std::string dir = shared_->dir.path + "/with-connections";
  auto info = (*t)->vm->SaveSnapshot(dir, /*keep_running=*/true);
  ::close(idle);
  ::close(half);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_TRUE(WaitHealthy(**t, 10s).ok()) << "the saved guest stopped answering";
  auto a = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RestoreInto(dir, SnapshotDisk::kShared);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(ReadGuestFile(**b, "/home/user/x"), "<404>");
  EXPECT_TRUE(store().Delete(dir).ok());
}

// ---- SnapshotStore ---------------------------------------------------------------

TEST_P(RuntimeConformance, StoreReadGivesTheShapeAndBacking) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = Checkpoint();
  ASSERT_FALSE(dir.empty());
  auto s = store().Read(dir);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->vcpus, 1);
  EXPECT_EQ(s->memory_mib, kMemoryMib);
  EXPECT_EQ(s->memory_bytes, shared_->checkpoint_info.memory_bytes);
  EXPECT_EQ(s->disk_bytes, shared_->checkpoint_info.disk_bytes);
  ASSERT_FALSE(s->disk_backing.empty());
  EXPECT_EQ(s->disk_backing[0], '/') << s->disk_backing;
  EXPECT_TRUE(fs::exists(s->disk_backing)) << s->disk_backing;
  // Not a snapshot: NotFound.
  fs::create_directories(shared_->dir.path + "/empty");
  EXPECT_EQ(store().Read(shared_->dir.path + "/empty").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store().Read(shared_->dir.path + "/absent").status().code(), StatusCode::kNotFound);
}

TEST_P(RuntimeConformance, StoreReadOfATruncatedSnapshotIsDataLoss) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = CopyOfCheckpoint("truncated");
  ASSERT_FALSE(dir.empty());
  const std::string mem = MemoryFileOf(dir);
  ASSERT_EQ(::truncate(mem.c_str(), static_cast<off_t>(fs::file_size(mem) / 2)), 0);
  EXPECT_EQ(store().Read(dir).status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(store().Delete(dir).ok());
}

TEST_P(RuntimeConformance, StoreDropMemoryKeepsTheDiskAndBootsOnly) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  if (std::string why = NoDiskOnlyReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = CopyOfCheckpoint("disk-only");
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(store().DropMemory(dir).ok());
  auto s = store().Read(dir);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->memory_bytes, 0u);
  EXPECT_EQ(s->disk_bytes, shared_->checkpoint_info.disk_bytes);
  auto r = RestoreInto(dir, SnapshotDisk::kPrivateCopy, /*memory=*/false);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(store().DropMemory(shared_->dir.path + "/absent").code(), StatusCode::kNotFound);
  EXPECT_TRUE(store().Delete(dir).ok());
}

TEST_P(RuntimeConformance, StoreDeleteRemovesAndIsIdempotent) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = CopyOfCheckpoint("deleted");
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(store().Delete(dir).ok());
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(store().Read(dir).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store().Delete(dir).ok()) << "deleting an absent snapshot is OK";
}

TEST_P(RuntimeConformance, StoreImageStampNamesTheBuildOfAFile) {
  if (std::string why = NoSnapshotsReason(); !why.empty()) GTEST_SKIP() << why;
  auto a = store().ImageStamp(image_.rootfs);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_FALSE(a->empty());
  auto again = store().ImageStamp(image_.rootfs);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*a, *again);
  const std::string other = shared_->dir.path + "/other-file";
  std::ofstream(other) << "another build";
  auto b = store().ImageStamp(other);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(store().ImageStamp(shared_->dir.path + "/absent").ok());
}

INSTANTIATE_TEST_SUITE_P(AllRuntimes, RuntimeConformance, ::testing::ValuesIn(AvailableRuntimes()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace airlock
