#include "runtime/gvisor/gvisor_runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
#include "runtime/guest_cpu.h"
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
  std::string sandbox_id, container, guest_netns, netns_ip, guest_cidr, guest_gateway, rootfs, tree, sandbox_netns;
  int vcpus = 1, memory_mib = 512;
  pid_t sandbox_pid = -1, gofer_pid = -1;
  unsigned long long sandbox_ticks = 0, gofer_ticks = 0;

  nlohmann::json ToJson() const {
    return {{"sandbox_id", sandbox_id},       {"container", container},     {"guest_netns", guest_netns},
            {"netns_ip", netns_ip},           {"guest_cidr", guest_cidr},   {"guest_gateway", guest_gateway},
            {"rootfs", rootfs},               {"tree", tree},               {"vcpus", vcpus},
            {"memory_mib", memory_mib}, {"sandbox_pid", sandbox_pid}, {"gofer_pid", gofer_pid},
            {"sandbox_ticks", sandbox_ticks}, {"gofer_ticks", gofer_ticks}};
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
    s.netns_ip = j.value("netns_ip", "");
    s.guest_cidr = j.value("guest_cidr", "");
    s.guest_gateway = j.value("guest_gateway", "");
    s.rootfs = j.value("rootfs", "");
    s.tree = j.value("tree", "");
    s.sandbox_netns = j.value("sandbox_netns", "");
    s.vcpus = j.value("vcpus", 1);
    s.memory_mib = j.value("memory_mib", 512);
    s.sandbox_pid = j.value("sandbox_pid", -1);
    s.gofer_pid = j.value("gofer_pid", -1);
    s.sandbox_ticks = j.value("sandbox_ticks", 0ull);
    s.gofer_ticks = j.value("gofer_ticks", 0ull);
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

uint64_t MsSince(Clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

// The last line of runsc's stderr that says why (its errors end with the
// cause; a Go panic's reason is the line naming it), at most 1 KiB.
std::string RunscReason(const std::string& err) {
  std::string said = err;
  for (const char* why : {"save rejected", "checkpoint failed", "restore failed", "panic:"}) {
    if (size_t at = said.find(why); at != std::string::npos) {
      said = said.substr(at, said.find('\n', at) - at);
      break;
    }
  }
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (size_t nl = said.rfind('\n'); nl != std::string::npos) said = said.substr(nl + 1);
  if (said.size() > 1024) said = said.substr(0, 1024) + "...";
  return said;
}

// runsc's refusal to save a connected TCP endpoint (gVisor's
// tcp.(*Endpoint).beforeSave): "endpoint cannot be saved in connected state".
constexpr char kConnectedRefusal[] = "cannot be saved in connected state";

// Resets every TCP connection between this host and the guest behind
// `netns_ip`: SOCK_DESTROY (ss -K) of each host socket whose remote address
// it is; the kernel sends the guest a RST for each, and its netstack moves
// the endpoint to an error state it can save. The host's side sees
// ECONNABORTED.
// The same inside the sandbox's netns (`sandbox_netns`, a path; "": a
// sandbox started before it was recorded): connections to the guest's
// address from the gateway side, the data plane's.
Status ResetGuestConnections(const std::string& netns_ip, const std::string& sandbox_netns,
                             const std::string& guest_cidr) {
  if (!netns_ip.empty()) {  // else a sandbox started before netns_ip was recorded
    ASSIGN_OR_RETURN(RunResult r, Run({"ss", "-K", "-t", "-n", "dst", netns_ip}, -1, 1 << 16));
    if (!r.status.success()) return Internal("ss -K dst " + netns_ip + ": " + r.err.substr(0, 300));
    // ss lists what it destroyed, one socket a line after its header.
    const size_t lines = static_cast<size_t>(std::count(r.out.begin(), r.out.end(), '\n'));
    LOG_DEBUG("reset {} TCP connection(s) to the guest behind {}", lines > 0 ? lines - 1 : 0, netns_ip);
  }
  const std::string guest = guest_cidr.substr(0, guest_cidr.find('/'));
  if (sandbox_netns.empty() || guest.empty()) return OkStatus();
  UniqueFd ns(::open(sandbox_netns.c_str(), O_RDONLY | O_CLOEXEC));
  if (!ns) return OkStatus();  // its network is gone: nothing connects from there
  ASSIGN_OR_RETURN(RunResult r, Run({"ss", "-K", "-t", "-n", "dst", guest}, ns.get(), 1 << 16));
  if (!r.status.success()) return Internal("ss -K dst " + guest + " in " + sandbox_netns + ": " + r.err.substr(0, 300));
  return OkStatus();
}

std::string NewContainerId(const std::string& sandbox_id) {
  unsigned char b[4];
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) std::fill(std::begin(b), std::end(b), 0);
  return "al-" + sandbox_id + "-" + HexEncode(b, sizeof b);
}

class GvisorRuntime;

class GvisorInstance final : public VmInstance {
 public:
  GvisorInstance(const GvisorRuntime* rt, std::string run_dir, InstanceState state)
      : rt_(rt), run_dir_(std::move(run_dir)), s_(std::move(state)) {}
  ~GvisorInstance() override { (void)Destroy(); }

  pid_t pid() const override { return s_.sandbox_pid; }
  bool alive() override { return !destroyed_ && ProcessAlive(s_.sandbox_pid, s_.sandbox_ticks); }
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
  // SnapshotMemory::kNone: `dir` holds the guest's export; the guest is
  // stopped (runsc pause) unless keep_running, and the record committed.
  StatusOr<VmSnapshotInfo> SaveDiskOnly(const std::string& dir, bool keep_running);
  // The record of what is in `dir`, for this sandbox's shape and template.
  StatusOr<SnapshotRecord> Commit(const std::string& dir, bool memory, uint64_t save_ms) const;

  std::string console() const { return run_dir_ + "/" + kConsoleFile; }
  Status RecordPids();

 private:
  const GvisorRuntime* rt_;
  std::string run_dir_;
  InstanceState s_;
  bool destroyed_ = false;
  bool released_ = false;
  bool paused_ = false;  // by SaveSnapshot(keep_running=false): runsc pause, until ContinueGuest
};

class GvisorRuntime final : public Runtime {
 public:
  GvisorRuntime(RuntimeOptions options, RunscConfig runsc, PlatformDecision platform)
      : options_(std::move(options)), runsc_(std::move(runsc)), platform_(std::move(platform)) {}

  std::string_view name() const override { return kRuntimeName; }
  std::string accelerator() const override { return "runsc " + platform_.platform + " (" + platform_.reason + ")"; }
  GuestLink guest_link() const override { return GuestLink::kVethNetns; }
  bool plain_template_restores_sooner() const override { return false; }
  bool guest_files_in_memory() const override { return true; }
  const SnapshotStore& snapshots() const override { return store_; }

  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& r) override { return Launch(r, r.rootfs, ""); }

  StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& r, const std::string& dir, SnapshotDisk disk,
                                                bool memory) override;
  Status ContinueIfStopped(const std::string& run_dir) override;

  StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) override {
    ASSIGN_OR_RETURN(InstanceState s, InstanceState::Read(run_dir));
    if (s.sandbox_pid != pid) return FailedPrecondition(run_dir + " records sandbox pid " + std::to_string(s.sandbox_pid) +
                                                        ", not " + std::to_string(pid));
    if (!ProcessAlive(s.sandbox_pid, s.sandbox_ticks)) return Unavailable("gvisor sandbox " + s.container + " is gone");
    return std::unique_ptr<VmInstance>(new GvisorInstance(this, run_dir, s));
  }

  // Starts a container on `rootfs`: a fresh one, or restored from the
  // checkpoint in `checkpoint` when not empty.
  StatusOr<std::unique_ptr<VmInstance>> Launch(const VmStartRequest& r, const std::string& rootfs,
                                               const std::string& checkpoint) const;
  // runsc run (or restore of `checkpoint`) of an instance's container in its
  // run_dir (bundle written).
  Status RunContainer(const std::string& run_dir, const InstanceState& s, const std::string& checkpoint,
                      const std::vector<HostMount>& mounts) const;
  // runsc pause/resume/state of a container.
  Status Pause(const InstanceState& s) const;
  Status Resume(const InstanceState& s) const;
  StatusOr<std::string> ContainerStatus(const InstanceState& s) const;
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
                                   const std::string& checkpoint, const std::vector<HostMount>& mounts) const {
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
  call.mount_upper = run_dir + "/mountpoints";
  fs::create_directories(call.mount_upper, ec);
  call.mount_points.push_back(kTemplateTreeMount);
  for (const auto& m : mounts) call.mount_points.push_back(m.destination);
  call.output_fd = console.get();
  call.eth0_address = s.guest_cidr;
  call.eth0_gateway = s.guest_gateway;
  const std::string bundle = run_dir + "/bundle";
  SetGuestGroupCpuWeight("airlock-gvisor");  // runsc makes each sandbox's group under it
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
  s.netns_ip = r.netns_ip;
  s.sandbox_netns = r.sandbox_netns;
  s.guest_cidr = r.guest_cidr;
  s.guest_gateway = r.guest_gateway;
  s.rootfs = rootfs;
  s.tree = tree;
  s.vcpus = r.vcpus;
  s.memory_mib = r.memory_mib;
  BundleSpec b;
  b.sandbox_id = r.sandbox_id;
  b.rootfs = r.run_dir + "/rootfs";
  b.guest_netns = r.guest_netns;
  b.cgroup = "/airlock-gvisor/" + s.container;
  b.vcpus = r.vcpus;
  b.memory_mib = r.memory_mib;
  for (const auto& m : r.host_mounts) b.binds.emplace_back(m.source, m.destination);
  b.template_tree = tree;
  auto fail = [&](Status st) -> Status {
    std::string tail = ReadTail(r.run_dir + "/" + kConsoleFile, 4096);
    Teardown(s);
    fs::remove_all(r.run_dir, ec);
    return Status(st.code(), st.message() + (tail.empty() ? "" : "; runsc and guest said:\n" + tail));
  };
  if (Status st = WriteBundle(r.run_dir + "/bundle", b); !st.ok()) return fail(st);
  if (Status st = RunContainer(r.run_dir, s, checkpoint, r.host_mounts); !st.ok()) return fail(st);
  auto inst = std::make_unique<GvisorInstance>(this, r.run_dir, s);
  if (Status st = inst->RecordPids(); !st.ok()) {
    inst->Release();
    return fail(st);
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

Status GvisorInstance::Destroy() {
  if (released_ || destroyed_) return OkStatus();
  rt_->Teardown(s_);
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
  destroyed_ = true;
  if (ec) return Internal("remove " + run_dir_ + ": " + ec.message());
  return OkStatus();
}

Status GvisorRuntime::Pause(const InstanceState& s) const {
  ASSIGN_OR_RETURN(RunResult r, RunscCall(runsc_, {"pause", s.container}, s.guest_netns, 30s));
  if (!r.status.success()) return Internal("runsc pause " + s.container + ": " + RunscReason(r.err));
  return OkStatus();
}

Status GvisorRuntime::Resume(const InstanceState& s) const {
  ASSIGN_OR_RETURN(RunResult r, RunscCall(runsc_, {"resume", s.container}, s.guest_netns, 30s));
  if (!r.status.success()) return Internal("runsc resume " + s.container + ": " + RunscReason(r.err));
  return OkStatus();
}

StatusOr<std::string> GvisorRuntime::ContainerStatus(const InstanceState& s) const {
  ASSIGN_OR_RETURN(RunResult r, RunscCall(runsc_, {"state", s.container}, s.guest_netns, 10s));
  if (!r.status.success()) return Unavailable("runsc state " + s.container + ": " + RunscReason(r.err));
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("status") || !j["status"].is_string())
    return Internal("runsc state " + s.container + ": unreadable answer");
  return j["status"].get<std::string>();
}

// A snapshot is a checkpoint of a paused sandbox: runsc pause stops every
// guest task (the Sentry's own kernel.Pause), runsc checkpoint
// --leave-running writes the Sentry's state and leaves it as it was, paused,
// under the same pid; then either runsc resume (keep_running) or the guest
// stays stopped with its Sentry alive, as a stopped QEMU does, until
// ContinueGuest or Destroy. (Without --leave-running, runsc ends the
// sandbox, and a daemon killed then would find no process to adopt.)
StatusOr<VmSnapshotInfo> GvisorInstance::SaveSnapshot(const std::string& dir, bool keep_running,
                                                      SnapshotMemory memory) {
  if (released_ || destroyed_) return FailedPrecondition("gvisor sandbox " + s_.container + " is not held");
  if (dir.empty() || dir[0] != '/') return InvalidArgument("snapshot dir must be absolute: '" + dir + "'");
  // Otherwise every restore reads the checkpoint into memory of its own.
  if (memory == SnapshotMemory::kNone) return SaveDiskOnly(dir, keep_running);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) return InvalidArgument("snapshot dir " + dir + " is not empty");
  fs::create_directories(dir, ec);
  if (ec) {
    if (ec == std::errc::no_space_on_device) return ResourceExhausted("create " + dir + ": disk full");
    return Internal("create " + dir + ": " + ec.message());
  }
  if (::chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir);  // it will hold the guest's memory
  const bool was_paused = paused_;
  // On failure: nothing in `dir`, and a guest that ran runs again.
  auto undo = [&](Status st) -> Status {
    fs::remove_all(dir, ec);
    if (!was_paused && paused_) {
      if (Status r = rt_->Resume(s_); r.ok())
        paused_ = false;
      else
        LOG_WARN("gvisor sandbox {}: resume after a failed save: {}", s_.container, r.message());
    }
    return st;
  };
  // netstack saves listening and loopback TCP endpoints but refuses
  // connected ones (and runsc --net-disconnect-ok, which cuts them inside
  // the save, left restored copies whose epoll sets kept reporting the cut
  // sockets after they were closed, or never woke again: tested with
  // 0.0~20240729). So the connections are reset from the host while the
  // guest runs (a paused sandbox's netstack handles no packets, the RSTs
  // included), then it is paused and saved; a connection made in between
  // is refused by the save, and the guest runs again for the next try. A
  // guest already stopped by an earlier save had its connections reset then.
  // Under load the guest's netstack can take a while to handle the RSTs,
  // so refused tries back off (2 ms, then 25·(n-1)² ms, at most 800 ms;
  // about 3 s over all 8 tries).
  constexpr int kTries = 8;
  auto t0 = Clock::now();  // when the guest stopped
  for (int attempt = 1;; ++attempt) {
    if (!paused_) {
      if (Status cut = ResetGuestConnections(s_.netns_ip, s_.sandbox_netns, s_.guest_cidr); !cut.ok()) return undo(cut);
      // The RSTs cross the veth to the netstack's dispatcher: a moment, more
      // for each retry.
      std::this_thread::sleep_for(std::chrono::milliseconds(attempt == 1 ? 2 : std::min(800, 25 * (attempt - 1) * (attempt - 1))));
      t0 = Clock::now();
      if (Status p = rt_->Pause(s_); !p.ok()) return undo(p);
      paused_ = true;
    }
    std::error_code rm;
    for (const auto& e : fs::directory_iterator(dir, rm)) fs::remove_all(e.path(), rm);  // a refused try's leftovers
    auto r = RunscCall(rt_->runsc(), {"checkpoint", "--leave-running", "--image-path", dir, s_.container},
                       s_.guest_netns, 120s);
    if (!r.ok()) return undo(r.status().WithContext("runsc checkpoint"));
    if (r->status.success()) break;
    std::string said = RunscReason(r->err);
    if (r->err.find(kConnectedRefusal) != std::string::npos && attempt < kTries && !was_paused) {
      if (Status res = rt_->Resume(s_); !res.ok()) return undo(res);
      paused_ = false;
      continue;
    }
    UniqueFd out(::open(console().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (out) (void)!::write(out.get(), r->err.data(), std::min<size_t>(r->err.size(), 64 << 10));
    if (r->err.find("no space left") != std::string::npos)
      return undo(ResourceExhausted("checkpoint into " + dir + ": disk full"));
    if (r->err.find(kConnectedRefusal) != std::string::npos) {
      // Not through this host's sockets (a bypass-proxy destination): only
      // the guest can close it.
      size_t at = said.find("local ");
      return undo(FailedPrecondition(
          "the sandbox holds a TCP connection gVisor cannot save and airlock cannot reset (" +
          (at == std::string::npos ? said : said.substr(at)) + "): close it and retry"));
    }
    return undo(Internal("runsc checkpoint of " + s_.container + " failed (" + r->status.ToString() + "): " + said));
  }
  // The guest was stopped from the pause to here.
  const uint64_t stopped_ms = MsSince(t0);
  if (keep_running) {
    if (Status c = ContinueGuest(); !c.ok()) {
      fs::remove_all(dir, ec);
      return c.WithContext("gvisor: run the guest again after its checkpoint");
    }
  }
  auto committed = Commit(dir, /*memory=*/true, stopped_ms);
  if (!committed.ok()) return undo(committed.status());
  VmSnapshotInfo info;
  info.memory_bytes = committed->bytes();
  info.disk_bytes = 0;  // the guest's files are in the memory image
  info.save_ms = committed->save_ms;
  return info;
}

StatusOr<SnapshotRecord> GvisorInstance::Commit(const std::string& dir, bool memory, uint64_t save_ms) const {
  SnapshotRecord rec;
  rec.vcpus = s_.vcpus;
  rec.memory_mib = s_.memory_mib;
  rec.rootfs = s_.rootfs;
  rec.memory = memory;
  rec.save_ms = save_ms;
  auto stamp = ImageFileStamp(s_.rootfs);
  if (!stamp.ok()) return stamp.status().WithContext("stamp of " + s_.rootfs);
  rec.rootfs_stamp = *stamp;
  return CommitSnapshot(dir, rec);
}

StatusOr<VmSnapshotInfo> GvisorInstance::SaveDiskOnly(const std::string& dir, bool keep_running) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  if (ec) return Internal("list " + dir + ": " + ec.message());
  if (names != std::vector<std::string>{kGuestRootChanges})
    return InvalidArgument("a disk-only snapshot dir holds the guest's " + std::string(kGuestRootChanges) + " only: " + dir);
  auto t0 = Clock::now();
  const bool was_paused = paused_;
  if (!keep_running && !paused_) {
    RETURN_IF_ERROR(rt_->Pause(s_));
    paused_ = true;
  }
  auto undo = [&](Status st) -> Status {
    if (!was_paused && paused_) {
      if (Status r = rt_->Resume(s_); r.ok()) paused_ = false;
    }
    return st;
  };
  auto committed = Commit(dir, /*memory=*/false, MsSince(t0));
  if (!committed.ok()) return undo(committed.status());
  VmSnapshotInfo info;
  info.disk_bytes = committed->bytes();
  info.save_ms = committed->save_ms;
  return info;
}

Status GvisorInstance::ContinueGuest() {
  if (!paused_) return OkStatus();  // never stopped
  RETURN_IF_ERROR(rt_->Resume(s_).WithContext("continue gvisor sandbox " + s_.container));
  paused_ = false;
  return OkStatus();
}

StatusOr<std::unique_ptr<VmInstance>> GvisorRuntime::Restore(const VmStartRequest& r, const std::string& dir,
                                                              SnapshotDisk disk, bool memory) {
  // The files are in the checkpoint: every restore reads its own copy into
  // its own memory, and the snapshot may go once runsc restore returns.
  (void)disk;
  ASSIGN_OR_RETURN(SnapshotRecord rec, ReadSnapshotRecord(dir));
  if (memory && !rec.memory) return FailedPrecondition("snapshot " + dir + " has no memory: restore it without");
  if (!memory) {
    // A fresh guest on the template; the caller hands it the export.
    if (rec.memory) return FailedPrecondition("snapshot " + dir + " is a checkpoint: it has no disk to boot on");
    if (!r.rootfs.empty() && r.rootfs != rec.rootfs)
      return FailedPrecondition("snapshot " + dir + " is of template image " + rec.rootfs + ", not " + r.rootfs);
    RETURN_IF_ERROR(VerifySnapshotFiles(dir, rec));
    return Launch(r, rec.rootfs, "");
  }
  if (r.vcpus != rec.vcpus || r.memory_mib != rec.memory_mib) {
    return FailedPrecondition("snapshot " + dir + " is of a " + std::to_string(rec.vcpus) + " vCPU, " +
                              std::to_string(rec.memory_mib) + " MiB sandbox; asked for " + std::to_string(r.vcpus) +
                              " vCPU, " + std::to_string(r.memory_mib) + " MiB");
  }
  if (!r.rootfs.empty() && r.rootfs != rec.rootfs)
    return FailedPrecondition("snapshot " + dir + " is of template image " + rec.rootfs + ", not " + r.rootfs);
  RETURN_IF_ERROR(VerifySnapshotFiles(dir, rec));
  auto v = Launch(r, rec.rootfs, dir);
  if (!v.ok()) {
    // The CRC matched, so a decode error means runsc cannot read what it
    // wrote (another runsc build, say): the snapshot is lost to this host.
    const std::string& m = v.status().message();
    for (const char* sign : {"decod", "unexpected EOF", "checksum", "corrupt", "invalid header"}) {
      if (m.find(sign) != std::string::npos) return Status(StatusCode::kDataLoss, "restore of " + dir + ": " + m);
    }
  }
  return v;
}

Status GvisorRuntime::ContinueIfStopped(const std::string& run_dir) {
  auto s = InstanceState::Read(run_dir);
  if (!s.ok() || !ProcessAlive(s->sandbox_pid, s->sandbox_ticks)) return OkStatus();  // nothing answers there
  std::error_code ec;
  if (!fs::exists(s->guest_netns, ec)) return OkStatus();
  ASSIGN_OR_RETURN(std::string status, ContainerStatus(*s));
  if (status != "paused") return OkStatus();
  LOG_INFO("gvisor sandbox {} was left paused by a save (its daemon died mid-pause): resuming it", s->container);
  return Resume(*s);
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
  // runsc's own state (its --root), beside run/ and not in it: every
  // directory in run/ is a sandbox's, and a starting daemon cleans up those
  // it does not know (manager.cc), which would take runsc's state with them.
  c.root = options.state_dir + "/runsc";
  std::error_code ec;
  fs::create_directories(c.root, ec);
  if (ec) return Internal("create " + c.root + ": " + ec.message());
  PlatformDecision p = ProbePlatformCached(c.binary, options.state_dir);
  c.platform = p.platform;
  return std::unique_ptr<Runtime>(new GvisorRuntime(options, c, p));
}

}  // namespace airlock::gvisor
