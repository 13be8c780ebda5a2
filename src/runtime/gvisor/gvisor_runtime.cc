#include "runtime/gvisor/gvisor_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/fd.h"
#include "common/file_util.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/subprocess.h"
#include "runtime/gvisor/bundle.h"
#include "runtime/gvisor/platform_probe.h"
#include "runtime/gvisor/rootfs_tree.h"
#include "runtime/gvisor/runsc.h"
#include "runtime/gvisor/snapshot.h"

namespace airlock::gvisor {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kStateFile[] = "runsc.json";  // in run_dir: what Adopt needs
constexpr char kConsoleFile[] = "console.log";
constexpr size_t kConsoleSearched = 256 * 1024;

// What one sandbox's run_dir records (kStateFile).
struct InstanceState {
  std::string sandbox_id, container, guest_netns, rootfs, tree;
  std::string eth0_address, eth0_gateway;  // as the guest netns had them before runsc took them
  int vcpus = 1, memory_mib = 512;
  pid_t sandbox_pid = -1, gofer_pid = -1;
  unsigned long long sandbox_ticks = 0, gofer_ticks = 0;

  nlohmann::json ToJson() const {
    return {{"sandbox_id", sandbox_id}, {"container", container},     {"guest_netns", guest_netns},
            {"rootfs", rootfs},         {"tree", tree},               {"vcpus", vcpus},
            {"memory_mib", memory_mib}, {"sandbox_pid", sandbox_pid}, {"gofer_pid", gofer_pid},
            {"sandbox_ticks", sandbox_ticks}, {"gofer_ticks", gofer_ticks}, {"eth0_address", eth0_address},
            {"eth0_gateway", eth0_gateway}};
  }
  static StatusOr<InstanceState> Read(const std::string& run_dir) {
    std::ifstream f(run_dir + "/" + kStateFile);
    if (!f) return NotFound("no gvisor sandbox in " + run_dir);
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument(run_dir + "/" + kStateFile + ": unreadable");
    InstanceState s;
    s.sandbox_id = j.value("sandbox_id", "");
    s.container = j.value("container", "");
    s.guest_netns = j.value("guest_netns", "");
    s.rootfs = j.value("rootfs", "");
    s.tree = j.value("tree", "");
    s.vcpus = j.value("vcpus", 1);
    s.memory_mib = j.value("memory_mib", 512);
    s.sandbox_pid = j.value("sandbox_pid", -1);
    s.gofer_pid = j.value("gofer_pid", -1);
    s.sandbox_ticks = j.value("sandbox_ticks", 0ull);
    s.gofer_ticks = j.value("gofer_ticks", 0ull);
    s.eth0_address = j.value("eth0_address", "");
    s.eth0_gateway = j.value("eth0_gateway", "");
    if (s.container.empty() || s.sandbox_pid <= 0) return InvalidArgument(run_dir + "/" + kStateFile + ": incomplete");
    return s;
  }
};

// Alive, not a zombie, and still the process we recorded (not a recycled pid).
bool ProcessAlive(pid_t pid, unsigned long long ticks) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  size_t rp = stat.rfind(')');
  if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z') return false;
  return ticks == 0 || ProcessStartTicks(pid) == ticks;
}

std::string ReadTail(const std::string& path, size_t max) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  off_t size = ::lseek(fd.get(), 0, SEEK_END);
  if (size <= 0) return "";
  off_t from = static_cast<uint64_t>(size) > max ? size - static_cast<off_t>(max) : 0;
  std::string out(static_cast<size_t>(size - from), '\0');
  ssize_t n = ::pread(fd.get(), out.data(), out.size(), from);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return out;
}

off_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// Waits (≤ timeout) for the console to show one of `lines` after byte `from`;
// the index of the one seen, or -1.
int WaitConsole(const std::string& console, off_t from, const std::vector<std::string>& lines,
                std::chrono::milliseconds timeout, std::string* seen_line = nullptr) {
  for (auto end = Clock::now() + timeout;; std::this_thread::sleep_for(5ms)) {
    off_t size = FileSize(console);
    if (size > from) {
      std::string text = ReadTail(console, static_cast<uint64_t>(size - from));
      for (size_t i = 0; i < lines.size(); ++i) {
        if (size_t at = text.find(lines[i]); at != std::string::npos) {
          if (seen_line) *seen_line = text.substr(at, text.find('\n', at) - at);
          return static_cast<int>(i);
        }
      }
    }
    if (Clock::now() >= end) return -1;
  }
}

// eth0's IPv4 address (with prefix) and default gateway in `netns`, before
// runsc copies and removes them ("" when absent).
void ReadEth0(const std::string& netns, std::string* address, std::string* gateway) {
  UniqueFd fd(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return;
  if (auto r = Run({"ip", "-o", "-4", "addr", "show", "dev", "eth0"}, fd.get()); r.ok() && r->status.success()) {
    std::istringstream in(r->out);  // "3: eth0    inet 169.254.0.21/30 scope global eth0 ..."
    std::string w;
    while (in >> w)
      if (w == "inet" && in >> w) *address = w;
  }
  if (auto r = Run({"ip", "-4", "route", "show", "default"}, fd.get()); r.ok() && r->status.success()) {
    std::istringstream in(r->out);  // "default via 169.254.0.22 dev eth0"
    std::string w;
    while (in >> w)
      if (w == "via" && in >> w) *gateway = w;
  }
}

// The agent's checkpoint handshake (agent/agent.h Agent::Quiesce).
constexpr char kQuiesced[] = "airlock-agent: quiesced";
constexpr char kQuiesceRefused[] = "airlock-agent: quiesce refused";
constexpr char kListening[] = "airlock-agent: listening";

std::string NewContainerId(const std::string& sandbox_id) {
  unsigned char b[4];
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) std::fill(std::begin(b), std::end(b), 0);
  return "al-" + sandbox_id + "-" + HexEncode(b, sizeof b);
}

uint64_t MsSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

class GvisorRuntime;

class GvisorInstance final : public VmInstance {
 public:
  GvisorInstance(const GvisorRuntime* rt, std::string run_dir, InstanceState state)
      : rt_(rt), run_dir_(std::move(run_dir)), s_(std::move(state)) {}
  ~GvisorInstance() override { (void)Destroy(); }

  pid_t pid() const override { return s_.sandbox_pid; }
  // A guest left stopped by SaveSnapshot(keep_running=false) counts as alive:
  // its checkpoint is its state and ContinueGuest() runs it again.
  bool alive() override {
    return !destroyed_ && (!stopped_at_.empty() || ProcessAlive(s_.sandbox_pid, s_.sandbox_ticks));
  }
  std::string ConsoleTail() override { return ReadTail(console(), 4096); }
  bool ConsoleContains(const std::string& text) override {
    return !released_ && ReadTail(console(), kConsoleSearched).find(text) != std::string::npos;
  }
  Status Destroy() override;
  pid_t Release() override {
    released_ = true;
    return s_.sandbox_pid;
  }
  StatusOr<VmSnapshotInfo> SaveSnapshot(const std::string& dir, bool keep_running, SnapshotMemory memory) override;
  Status ContinueGuest() override;

  std::string console() const { return run_dir_ + "/" + kConsoleFile; }
  Status RecordPids();
  // SIGUSR1 (quiesce) / SIGUSR2 (listen again) to the agent, the container's init.
  Status SignalAgent(const char* sig);
  // After a restore: the agent listens again (it was quiesced when saved).
  Status Unquiesce();

 private:
  const GvisorRuntime* rt_;
  std::string run_dir_;
  InstanceState s_;
  bool destroyed_ = false;
  bool released_ = false;
  std::string stopped_at_;  // the snapshot a keep_running=false save left the guest in
};

class GvisorRuntime final : public Runtime {
 public:
  GvisorRuntime(RuntimeOptions options, RunscConfig runsc, PlatformDecision platform)
      : options_(std::move(options)), runsc_(std::move(runsc)), platform_(std::move(platform)) {}

  std::string_view name() const override { return kRuntimeName; }
  std::string accelerator() const override { return "runsc " + platform_.platform + " (" + platform_.reason + ")"; }
  GuestLink guest_link() const override { return GuestLink::kVethNetns; }
  const SnapshotStore& snapshots() const override { return store_; }

  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& r) override {
    return Launch(r, r.rootfs, "");
  }

  StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) override {
    ASSIGN_OR_RETURN(InstanceState s, InstanceState::Read(run_dir));
    if (s.sandbox_pid != pid) return FailedPrecondition(run_dir + " records sandbox pid " + std::to_string(s.sandbox_pid) +
                                                        ", not " + std::to_string(pid));
    if (!ProcessAlive(s.sandbox_pid, s.sandbox_ticks)) return Unavailable("gvisor sandbox " + s.container + " is gone");
    return std::unique_ptr<VmInstance>(new GvisorInstance(this, run_dir, s));
  }

  StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& r, const std::string& dir, SnapshotDisk disk,
                                                bool memory) override {
    (void)disk;  // the files are in the checkpoint: every restore has its own copy
    ASSIGN_OR_RETURN(SnapshotRecord rec, ReadSnapshotRecord(dir));
    if (!memory) {
      return Unimplemented(
          "the gvisor runtime cannot boot a snapshot without its memory: a sandbox's files live in it "
          "(runsc --overlay2=root:memory)");
    }
    if (r.vcpus != rec.vcpus || r.memory_mib != rec.memory_mib) {
      return FailedPrecondition("snapshot " + dir + " is of a " + std::to_string(rec.vcpus) + " vCPU, " +
                                std::to_string(rec.memory_mib) + " MiB sandbox; asked for " + std::to_string(r.vcpus) +
                                " vCPU, " + std::to_string(r.memory_mib) + " MiB");
    }
    if (!r.rootfs.empty() && r.rootfs != rec.rootfs) {
      return FailedPrecondition("snapshot " + dir + " is of template image " + rec.rootfs + ", not " + r.rootfs);
    }
    return Launch(r, rec.rootfs, dir);
  }

  // Starts a container on `rootfs` (restoring `checkpoint` when not empty).
  StatusOr<std::unique_ptr<VmInstance>> Launch(const VmStartRequest& r, const std::string& rootfs,
                                               const std::string& checkpoint) const;
  // runsc run/restore of an instance's container in its run_dir (bundle written).
  Status RunContainer(const std::string& run_dir, const InstanceState& s, const std::string& checkpoint) const;
  // Force-deletes the container and kills what is left of its processes.
  void Teardown(const InstanceState& s) const;

  const RunscConfig& runsc() const { return runsc_; }

 private:
  RuntimeOptions options_;
  RunscConfig runsc_;
  PlatformDecision platform_;
  GvisorSnapshotStore store_;
};

Status GvisorRuntime::RunContainer(const std::string& run_dir, const InstanceState& s,
                                   const std::string& checkpoint) const {
  std::error_code ec;
  fs::create_directories(run_dir + "/rootfs", ec);
  fs::create_directories(run_dir + "/procsys", ec);
  UniqueFd console(::open((run_dir + "/" + kConsoleFile).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!console) return ErrnoError("open " + run_dir + "/" + kConsoleFile);
  RunscStart call;
  call.guest_netns = s.guest_netns;
  call.tree = s.tree;
  call.rootfs_mount = run_dir + "/rootfs";
  call.scratch = run_dir + "/procsys";
  call.output_fd = console.get();
  call.eth0_address = s.eth0_address;
  call.eth0_gateway = s.eth0_gateway;
  const std::string bundle = run_dir + "/bundle";
  if (checkpoint.empty())
    call.args = {"run", "--bundle", bundle, "--detach", s.container};
  else
    call.args = {"restore", "--image-path", checkpoint, "--bundle", bundle, "--detach", s.container};
  return RunscStartCall(runsc_, call);
}

void GvisorRuntime::Teardown(const InstanceState& s) const {
  auto r = RunscCall(runsc_, {"delete", "--force", s.container}, fs::exists(s.guest_netns) ? s.guest_netns : "", 15s);
  if (!r.ok() || !r->status.success())
    LOG_DEBUG("runsc delete {}: {}", s.container, r.ok() ? r->err : r.status().message());
  // Whatever runsc could not reach (its netns gone, its socket dead) by pid.
  for (auto [pid, ticks] : {std::pair{s.sandbox_pid, s.sandbox_ticks}, std::pair{s.gofer_pid, s.gofer_ticks}}) {
    if (ProcessAlive(pid, ticks)) ::kill(pid, SIGKILL);
  }
  for (auto end = Clock::now() + 5s; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
    if (!ProcessAlive(s.sandbox_pid, s.sandbox_ticks) && !ProcessAlive(s.gofer_pid, s.gofer_ticks)) break;
  }
  // runsc's own files for the container and its cgroups, when delete could not.
  std::error_code ec;
  fs::remove(runsc_.root + "/" + s.container + "_sandbox:" + s.container + ".state", ec);
  fs::remove(runsc_.root + "/" + s.container + "_sandbox:" + s.container + ".lock", ec);
  for (const char* ctl : {"memory", "cpu", "cpuacct", "pids", "cpuset", "blkio", "devices", "freezer", "systemd",
                          "net_cls", "net_prio", "hugetlb", "perf_event", "rdma", "misc"}) {
    fs::remove(std::string("/sys/fs/cgroup/") + ctl + "/airlock-gvisor/" + s.container, ec);
  }
}

StatusOr<std::unique_ptr<VmInstance>> GvisorRuntime::Launch(const VmStartRequest& r, const std::string& rootfs,
                                                             const std::string& checkpoint) const {
  if (r.guest_netns.empty()) {
    return FailedPrecondition("the gvisor runtime needs a guest netns (GuestLink::kVethNetns); the request has none");
  }
  if (r.run_dir.empty() || r.run_dir[0] != '/') return InvalidArgument("run_dir must be absolute: '" + r.run_dir + "'");
  ASSIGN_OR_RETURN(std::string tree, EnsureRootTree(rootfs));
  std::error_code ec;
  if (fs::exists(r.run_dir, ec) && !fs::is_empty(r.run_dir, ec))
    return FailedPrecondition("run_dir " + r.run_dir + " is not empty");
  fs::create_directories(r.run_dir, ec);
  if (ec) return Internal("create " + r.run_dir + ": " + ec.message());
  InstanceState s;
  s.sandbox_id = r.sandbox_id;
  s.container = NewContainerId(r.sandbox_id);
  s.guest_netns = r.guest_netns;
  s.rootfs = rootfs;
  s.tree = tree;
  s.vcpus = r.vcpus;
  s.memory_mib = r.memory_mib;
  ReadEth0(r.guest_netns, &s.eth0_address, &s.eth0_gateway);
  BundleSpec b;
  b.sandbox_id = r.sandbox_id;
  b.rootfs = r.run_dir + "/rootfs";
  b.guest_netns = r.guest_netns;
  b.cgroup = "/airlock-gvisor/" + s.container;
  b.vcpus = r.vcpus;
  b.memory_mib = r.memory_mib;
  auto fail = [&](Status st) -> Status {
    std::string tail = ReadTail(r.run_dir + "/" + kConsoleFile, 4096);
    Teardown(s);
    fs::remove_all(r.run_dir, ec);
    return Status(st.code(), st.message() + (tail.empty() ? "" : "; runsc and guest said:\n" + tail));
  };
  if (Status st = WriteBundle(r.run_dir + "/bundle", b); !st.ok()) return fail(st);
  if (Status st = RunContainer(r.run_dir, s, checkpoint); !st.ok()) {
    std::string tail = ReadTail(r.run_dir + "/" + kConsoleFile, 4096);
    if (!checkpoint.empty() && (tail.find("decod") != std::string::npos || tail.find("EOF") != std::string::npos ||
                                tail.find("checksum") != std::string::npos || tail.find("corrupt") != std::string::npos))
      return fail(Status(StatusCode::kDataLoss, "restore of " + checkpoint + ": " + st.message()));
    return fail(st);
  }
  auto inst = std::make_unique<GvisorInstance>(this, r.run_dir, s);
  if (Status st = inst->RecordPids(); !st.ok()) {
    inst->Release();
    return fail(st);
  }
  if (!checkpoint.empty()) {
    if (Status st = inst->Unquiesce(); !st.ok()) {
      inst->Release();
      return fail(st);
    }
  }
  return std::unique_ptr<VmInstance>(std::move(inst));
}

Status GvisorInstance::RecordPids() {
  ASSIGN_OR_RETURN(RunscPids p, ReadRunscPids(rt_->runsc(), s_.container));
  s_.sandbox_pid = p.sandbox;
  s_.gofer_pid = p.gofer;
  s_.sandbox_ticks = ProcessStartTicks(p.sandbox);
  s_.gofer_ticks = p.gofer > 0 ? ProcessStartTicks(p.gofer) : 0;
  return WriteFileAtomic(run_dir_ + "/" + kStateFile, s_.ToJson().dump(1) + "\n", 0600);
}

Status GvisorInstance::SignalAgent(const char* sig) {
  ASSIGN_OR_RETURN(RunResult r, RunscCall(rt_->runsc(), {"kill", s_.container, sig}, s_.guest_netns, 10s));
  if (!r.status.success()) return Internal("runsc kill " + std::string(sig) + ": " + r.err.substr(0, 300));
  return OkStatus();
}

Status GvisorInstance::Unquiesce() {
  off_t from = FileSize(console());
  RETURN_IF_ERROR(SignalAgent("USR2"));
  if (WaitConsole(console(), from, {kListening}, 10s) < 0)
    return DeadlineExceeded("the agent of gvisor sandbox " + s_.container + " did not listen again within 10 s");
  return OkStatus();
}

Status GvisorInstance::Destroy() {
  if (released_ || destroyed_) return OkStatus();
  rt_->Teardown(s_);
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  destroyed_ = true;
  if (ec) return Internal("remove " + run_dir_ + ": " + ec.message());
  return OkStatus();
}

StatusOr<VmSnapshotInfo> GvisorInstance::SaveSnapshot(const std::string& dir, bool keep_running,
                                                      SnapshotMemory memory) {
  (void)memory;  // every restore reads the checkpoint into memory of its own
  if (released_ || destroyed_) return FailedPrecondition("gvisor sandbox " + s_.container + " is not held");
  if (dir.empty() || dir[0] != '/') return InvalidArgument("snapshot dir must be absolute: '" + dir + "'");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) return InvalidArgument("snapshot dir " + dir + " is not empty");
  fs::create_directories(dir, ec);
  if (ec) return ErrnoError("create " + dir);
  auto t0 = Clock::now();
  {
    off_t from = FileSize(console());
    RETURN_IF_ERROR(SignalAgent("USR1"));
    std::string line;
    int seen = WaitConsole(console(), from, {kQuiesced, kQuiesceRefused}, 10s, &line);
    if (seen != 0) {
      fs::remove_all(dir, ec);
      if (seen < 0) return DeadlineExceeded("the agent of gvisor sandbox " + s_.container + " did not quiesce in 10 s");
      return FailedPrecondition(
          "gvisor (runsc 20221219) cannot checkpoint a sandbox with open TCP sockets; close them and retry (" + line +
          ")");
    }
  }
  // Not --leave-running: runsc 20221219 then waits for the restored
  // container to exit. A plain checkpoint ends the container; a guest that
  // keeps running is restored from it here (ContinueGuest).
  struct stat cst {};
  const off_t console_before = ::stat(console().c_str(), &cst) == 0 ? cst.st_size : 0;
  Status st = OkStatus();
  {
    auto r = RunscCall(rt_->runsc(), {"checkpoint", "--image-path", dir, s_.container}, s_.guest_netns, 120s);
    if (!r.ok()) st = r.status();
    else if (!r->status.success()) {
      st = Internal("runsc checkpoint: " + r->status.ToString());
      UniqueFd out(::open(console().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
      if (out) (void)!::write(out.get(), r->err.data(), r->err.size());
    }
  }
  if (!st.ok()) {
    std::string said;
    if (::stat(console().c_str(), &cst) == 0 && cst.st_size > console_before)
      said = ReadTail(console(), std::min<uint64_t>(static_cast<uint64_t>(cst.st_size - console_before), 4 << 20));
    // runsc's reason is one line buried in a Go panic: quote that line.
    for (const char* why : {"save rejected", "checkpoint failed"}) {
      if (size_t at = said.find(why); at != std::string::npos) {
        said = said.substr(at, said.find('\n', at) - at);
        break;
      }
    }
    // "encoding error at object tcp.endpoint{<a struct dump>}: <reason>"
    if (size_t dump = said.find("encoding error at object"); dump != std::string::npos) {
      if (size_t end = said.rfind("}: "); end != std::string::npos && end > dump)
        said = said.substr(0, said.find('{', dump)) + ": " + said.substr(end + 3);
    }
    if (said.size() > 1024) said = said.substr(0, 1024) + "...";
    fs::remove_all(dir, ec);
    if (said.find("no space left") != std::string::npos) return ResourceExhausted("checkpoint into " + dir + ": disk full");
    // runsc 20221219 ends a sandbox whose save fails (e.g. a TCP connection
    // that is not closed or listening: it cannot save those).
    std::string fate = alive() ? "" : " (runsc ended the sandbox)";
    return FailedPrecondition("gvisor checkpoint failed" + fate + ": " + said);
  }
  stopped_at_ = dir;
  SnapshotRecord rec;
  rec.vcpus = s_.vcpus;
  rec.memory_mib = s_.memory_mib;
  rec.rootfs = s_.rootfs;
  rec.save_ms = MsSince(t0);
  auto stamp = ImageFileStamp(s_.rootfs);
  auto committed = stamp.ok() ? CommitSnapshot(dir, (rec.rootfs_stamp = *stamp, rec)) : StatusOr<SnapshotRecord>(stamp.status());
  if (!committed.ok()) {
    fs::remove_all(dir, ec);
    (void)ContinueGuest();  // a failed save leaves a running guest running
    return committed.status();
  }
  if (keep_running) {
    if (Status c = ContinueGuest(); !c.ok()) return c.WithContext("gvisor: run the guest again after its checkpoint");
  }
  VmSnapshotInfo info;
  info.memory_bytes = committed->bytes();
  info.save_ms = committed->save_ms;
  return info;
}

Status GvisorInstance::ContinueGuest() {
  if (stopped_at_.empty()) return OkStatus();  // never stopped
  // The container ended with its checkpoint: it runs again from it.
  (void)RunscCall(rt_->runsc(), {"delete", "--force", s_.container}, s_.guest_netns, 15s);
  RETURN_IF_ERROR(rt_->RunContainer(run_dir_, s_, stopped_at_).WithContext("continue gvisor sandbox " + s_.container));
  stopped_at_.clear();
  RETURN_IF_ERROR(RecordPids());
  return Unquiesce();
}

}  // namespace

StatusOr<std::unique_ptr<Runtime>> NewGvisorRuntime(const RuntimeOptions& options) {
  auto runsc = FindExecutable("runsc");
  if (!runsc.ok()) return FailedPrecondition("runsc is not installed (fix: apt-get install runsc, or run scripts/setup)");
  if (!FindExecutable("fuse2fs").ok())
    return FailedPrecondition("fuse2fs is not installed (fix: apt-get install fuse2fs, or run scripts/setup)");
  if (::geteuid() != 0) return FailedPrecondition("the gvisor runtime needs root (runsc creates namespaces and cgroups)");
  RunscConfig c;
  c.binary = *runsc;
  c.root = options.state_dir + "/run/runsc";
  std::error_code ec;
  fs::create_directories(c.root, ec);
  if (ec) return Internal("create " + c.root + ": " + ec.message());
  PlatformDecision p = ProbePlatformCached(c.binary, options.state_dir);
  c.platform = p.platform;
  return std::unique_ptr<Runtime>(new GvisorRuntime(options, c, p));
}

}  // namespace airlock::gvisor
