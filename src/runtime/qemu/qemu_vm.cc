#include "runtime/qemu/qemu_vm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "runtime/qemu/jail.h"

namespace airlock::qemu {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kOverheadBytes = 256ull << 20;  // QEMU itself
constexpr int kTcgTbMib = 128;                     // TCG translation cache
constexpr int kPidsMax = 256;

Status ValidateSpec(const VmSpec& s) {
  if (s.sandbox_id.empty() || s.sandbox_id.size() > 63) return InvalidArgument("sandbox id must be 1..63 chars");
  for (char c : s.sandbox_id) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'))
      return InvalidArgument("sandbox id '" + s.sandbox_id + "' has characters outside [A-Za-z0-9_-]");
  }
  for (const auto& [what, path] : std::vector<std::pair<std::string, std::string>>{
           {"kernel", s.kernel}, {"initrd", s.initrd}, {"rootfs template", s.rootfs_template}}) {
    struct stat st;
    if (path.empty()) return InvalidArgument(what + " path is empty");
    if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat " + what + " " + path);
    if (!S_ISREG(st.st_mode)) return InvalidArgument(what + " " + path + " is not a regular file");
  }
  if (s.run_dir.empty() || s.run_dir[0] != '/') return InvalidArgument("run dir must be an absolute path");
  if (s.run_dir.size() + 24 >= sizeof(sockaddr_un{}.sun_path))
    return InvalidArgument("run dir too long for unix sockets: " + s.run_dir);
  if (s.vcpus < 1 || s.vcpus > 64) return InvalidArgument("vcpus must be 1..64");
  if (s.memory_mib < 64 || s.memory_mib > 1 << 20) return InvalidArgument("memory must be 64 MiB..1 TiB");
  for (char c : s.extra_cmdline) {
    if (c == '\n' || c == '\0') return InvalidArgument("kernel cmdline has a newline or NUL");
  }
  if (!s.tap_name.empty() && s.tap_name.find_first_of(",= ") != std::string::npos)
    return InvalidArgument("bad tap name");
  return OkStatus();
}

// QEMU option values escape ',' by doubling it.
std::string QemuEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    o += c;
    if (c == ',') o += ',';
  }
  return o;
}

// Guest-visible size of a disk file: a raw file's length, or the virtual
// size (big-endian u64 at offset 24) in a qcow2 header. Read with
// O_NOFOLLOW, as bytes: nothing else of the header is interpreted.
StatusOr<uint64_t> DiskVirtualSize(const std::string& path, const std::string& format) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd) return ErrnoError("open " + path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(path + " is not a regular file");
  if (format == "raw") return static_cast<uint64_t>(st.st_size);
  unsigned char h[32];
  if (::pread(fd.get(), h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return ErrnoError("read " + path);
  if (!(h[0] == 'Q' && h[1] == 'F' && h[2] == 'I' && h[3] == 0xfb)) return FailedPrecondition(path + " is not qcow2");
  uint64_t size = 0;
  for (int i = 24; i < 32; ++i) size = (size << 8) | h[i];
  if (size == 0 || size > (16ull << 40)) return FailedPrecondition(path + ": implausible virtual size");
  return size;
}

StatusOr<std::string> CanonicalExecutable(const std::string& exe) {
  char buf[PATH_MAX];
  if (!::realpath(exe.c_str(), buf)) return ErrnoError("realpath " + exe);
  return std::string(buf);
}

}  // namespace

VmPaths VmPaths::For(const std::string& run_dir) {
  const std::string d = run_dir + "/vmm";
  return {
      d,         d + "/overlay.qcow2", d + "/qmp.sock", d + "/console.sock", d + "/mig-out.sock", d + "/mig-in.sock",
      d + "/ram"};
}

VmPaths VmPaths::Legacy(const std::string& d) {
  return {
      d,         d + "/overlay.qcow2", d + "/qmp.sock", d + "/console.sock", d + "/mig-out.sock", d + "/mig-in.sock",
      d + "/ram"};
}

std::string_view RamKindName(RamKind k) {
  switch (k) {
    case RamKind::kMachine:
      return "machine";
    case RamKind::kAnon:
      return "anon";
    case RamKind::kSharedFile:
      return "shared-file";
    case RamKind::kPrivateFile:
      return "private-file";
  }
  return "machine";
}

StatusOr<RamKind> ParseRamKind(std::string_view name) {
  for (RamKind k : {RamKind::kMachine, RamKind::kAnon, RamKind::kSharedFile, RamKind::kPrivateFile}) {
    if (RamKindName(k) == name) return k;
  }
  return InvalidArgument("unknown guest RAM kind '" + std::string(name) + "'");
}

namespace {
// TSC ticks per ms over a short sleep (median of three); 0 if implausible.
uint64_t MeasureTscKhz() {
#if defined(__x86_64__)
  uint64_t s[3];
  for (auto& khz : s) {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t c0 = __builtin_ia32_rdtsc();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    uint64_t c1 = __builtin_ia32_rdtsc();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    khz = ns > 0 ? (c1 - c0) * 1000000ull / static_cast<uint64_t>(ns) : 0;
  }
  std::sort(s, s + 3);
  if (s[1] < 100000 || s[1] > 20000000) return 0;
  return (s[1] + 500) / 1000 * 1000;
#else
  return 0;
#endif
}
}  // namespace

uint64_t HostTscKhz() {
  static const uint64_t measured = MeasureTscKhz();
  if (measured) return measured;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    try {
      double mhz = std::stod(line.substr(line.find(':') + 1));
      if (mhz > 100) return static_cast<uint64_t>(mhz * 1000);
    } catch (...) {
    }
  }
  return 2000000;
}

bool QemuSupportsSandbox(const std::string& bin) {
  static std::mutex mu;
  static std::map<std::string, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(bin);
  if (it != cache.end()) return it->second;
  auto r = Run({bin, "-help"});
  bool ok = r.ok() && r->out.find("-sandbox") != std::string::npos;
  cache[bin] = ok;
  return ok;
}

std::string BuildKernelCmdline(const VmSpec& spec, Accel accel, uint64_t tsc_khz) {
  std::string c =
      "console=ttyS0 quiet panic=-1 pci=off airlock.ip=169.254.0.21/30 airlock.gw=169.254.0.22 airlock.route=default "
      "airlock.dns=169.254.0.22 airlock.hostname=" +
      spec.sandbox_id;
  if (accel == Accel::kTcg) c += " tsc_early_khz=" + std::to_string(tsc_khz);
  if (!spec.extra_cmdline.empty()) c += " " + spec.extra_cmdline;
  return c;
}

std::vector<std::string> BuildQemuArgv(const VmSpec& spec, Accel accel, const VmPaths& p, bool sandbox_supported,
                                       uint64_t tsc_khz, const GuestRam& ram) {
  std::vector<std::string> a = {spec.qemu_binary, "-name", "airlock-" + spec.sandbox_id};
  std::string machine = "microvm,acpi=on,x-option-roms=off,isa-serial=on,rtc=on";
  // microvm has no NUMA: the machine's memory-backend= is how its RAM gets a
  // backend. Never prealloc (a clone would copy every page), never a
  // balloon, virtio-mem or free-page reporting (they discard guest RAM,
  // which on a private file mapping punches holes in the shared file).
  if (ram.kind != RamKind::kMachine) machine += std::string(",memory-backend=") + kRamBackendId;
  a.insert(a.end(), {"-M", machine});
  if (accel == Accel::kKvm) {
    a.insert(a.end(), {"-accel", "kvm", "-cpu", "host"});
  } else {
    a.insert(a.end(), {"-accel", "tcg,tb-size=" + std::to_string(kTcgTbMib), "-cpu", "max"});
  }
  a.insert(a.end(), {"-smp", std::to_string(spec.vcpus), "-m", std::to_string(spec.memory_mib)});
  const std::string size = "size=" + std::to_string(spec.memory_mib) + "M";
  switch (ram.kind) {
    case RamKind::kMachine:
      break;
    case RamKind::kAnon:
      a.insert(a.end(), {"-object", std::string("memory-backend-ram,id=") + kRamBackendId + "," + size});
      break;
    case RamKind::kSharedFile:
    case RamKind::kPrivateFile:
      a.insert(a.end(),
               {"-object", std::string("memory-backend-file,id=") + kRamBackendId + "," + size +
                               ",mem-path=" + QemuEscape(ram.mem_path) +
                               (ram.kind == RamKind::kSharedFile ? ",share=on" : ",share=off") + ",prealloc=off"});
      break;
  }
  a.insert(a.end(), {"-nodefaults", "-no-user-config", "-nographic", "-no-reboot"});
  a.insert(a.end(),
           {"-kernel", spec.kernel, "-initrd", spec.initrd, "-append", BuildKernelCmdline(spec, accel, tsc_khz)});
  a.insert(a.end(), {"-drive", "file=" + QemuEscape(p.overlay) + ",if=none,id=root,format=qcow2,discard=unmap",
                     "-device", "virtio-blk-device,drive=root"});
  if (!spec.tap_name.empty()) {
    a.insert(a.end(), {"-netdev", "tap,id=n0,ifname=" + spec.tap_name + ",script=no,downscript=no", "-device",
                       "virtio-net-device,netdev=n0"});
  }
  a.insert(a.end(), {"-qmp", "unix:" + QemuEscape(p.qmp_socket) + ",server=on,wait=off"});
  a.insert(a.end(), {"-chardev", "socket,id=con0,path=" + QemuEscape(p.console_socket) + ",server=on,wait=off",
                     "-serial", "chardev:con0"});
  if (sandbox_supported) {
    // The jail drops root before exec (jail.h), so QEMU never changes its
    // own credentials.
    a.insert(a.end(), {"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"});
  }
  return a;
}

StatusOr<std::unique_ptr<QemuVm>> QemuVm::Start(const VmSpec& spec) { return Launch(spec, LaunchPlan{}); }

StatusOr<std::unique_ptr<QemuVm>> QemuVm::Launch(const VmSpec& spec, const LaunchPlan& plan) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  std::unique_ptr<QemuVm> vm(new QemuVm());
  vm->spec_ = spec;
  vm->paths_ = VmPaths::For(spec.run_dir);
  const VmPaths& p = vm->paths_;
  auto t0 = std::chrono::steady_clock::now();

  // accel
  if (spec.accel)
    vm->accel_ = *spec.accel;
  else
    vm->accel_ = (spec.state_dir.empty() ? ProbeAccel() : ProbeAccelCached(spec.state_dir)).accel;

  // run dir: ours alone, so Destroy() may remove it whole.
  vm->spec_.run_dir.clear();  // not ours (yet): Destroy() must not remove it
  std::error_code ec;
  if (fs::exists(spec.run_dir, ec) && !fs::is_empty(spec.run_dir, ec))
    return FailedPrecondition("run dir " + spec.run_dir + " exists and is not empty");
  fs::create_directories(spec.run_dir, ec);
  if (ec) return Internal("mkdir " + spec.run_dir + ": " + ec.message());
  vm->spec_.run_dir = spec.run_dir;
  ::chmod(spec.run_dir.c_str(), 0700);
  // From here on, failures are undone by the destructor (Destroy()).
  if (::mkdir(p.vmm_dir.c_str(), 0700) != 0) return ErrnoError("mkdir " + p.vmm_dir);

  // overlay (qemu-img writes only the new file; the template, or a snapshot's
  // frozen disk, is the backing file)
  vm->disk_backing_ = fs::absolute(plan.backing.empty() ? spec.rootfs_template : plan.backing).string();
  vm->disk_backing_format_ = plan.backing_format;
  ASSIGN_OR_RETURN(vm->rootfs_stamp_, FileStamp(spec.rootfs_template));
  vm->ram_ = plan.ram;
  vm->ram_source_ = plan.ram_source;
  if (spec.shared_ram_file) {
    if (plan.ram.kind != RamKind::kMachine) return InvalidArgument("shared_ram_file is for Start() only");
    // Created by us, sized, owned by the VMM (it maps it MAP_SHARED and the
    // guest writes its RAM through it); SaveSnapshot makes it root's and
    // read-only once the VMM is gone.
    UniqueFd rf(::open(p.ram.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!rf) return ErrnoError("create " + p.ram);
    if (::ftruncate(rf.get(), static_cast<off_t>(uint64_t(spec.memory_mib) << 20)) != 0)
      return ErrnoError("truncate " + p.ram);
    if (spec.jail && ::fchown(rf.get(), spec.jail->first, spec.jail->second) != 0) return ErrnoError("chown " + p.ram);
    vm->ram_ = {RamKind::kSharedFile, p.ram};
  }
  if (!plan.copy_overlay_from.empty()) {
    RETURN_IF_ERROR(CopyFileSynced(plan.copy_overlay_from, p.overlay, 0600).WithContext("overlay"));
  } else {
    // -u + an explicit size: qemu-img (root, unjailed) never opens the
    // backing file, whose qcow2 header (and so its own backing chain) a VMM
    // may have written.
    ASSIGN_OR_RETURN(uint64_t size, DiskVirtualSize(vm->disk_backing_, plan.backing_format));
    auto img = RunChecked({spec.qemu_img, "create", "-q", "-u", "-f", "qcow2", "-F", plan.backing_format, "-b",
                           vm->disk_backing_, p.overlay, std::to_string(size)});
    if (!img.ok()) return img.status().WithContext("overlay");
  }

  if (spec.jail) {
    // The VMM's own files; nothing else of the state dir is its.
    for (const auto& path : {p.overlay, p.vmm_dir}) {
      if (::lchown(path.c_str(), spec.jail->first, spec.jail->second) != 0) return ErrnoError("chown " + path);
    }
  }

  // cgroup (best effort)
  if (spec.cgroup) {
    CgroupLimits limits;
    limits.memory_bytes = (uint64_t(spec.memory_mib) << 20) + kOverheadBytes +
                          (vm->accel_ == Accel::kTcg ? uint64_t(kTcgTbMib) << 20 : 0);
    // A clone of a shared-RAM template: the first write (or read) of a page
    // the template's memfd holds as a hole allocates that page in the memfd
    // (tmpfs allocates on fault) and charges it to the faulting VMM, beside
    // its private copy. Those memfd pages are shared by every clone and
    // bounded by the guest's RAM; without room for them a guest that
    // touches all its memory is OOM-killed at about half of it.
    if (!plan.ram_source.empty()) limits.memory_bytes += uint64_t(spec.memory_mib) << 20;
    limits.pids_max = kPidsMax;
    limits.cpus = spec.vcpus;
    auto cg = VmCgroup::Create(spec.sandbox_id, limits);
    if (cg.ok())
      vm->cgroup_ = std::move(*cg);
    else
      LOG_WARN("no cgroup for VMM, running unconfined by cgroup sandbox={} error={}", spec.sandbox_id,
               cg.status().ToString());
  }

  // spawn
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) return ErrnoError("pipe2");
  UniqueFd err_r(ep[0]), err_w(ep[1]);
  std::vector<std::string> qemu_argv =
      BuildQemuArgv(spec, vm->accel_, p, QemuSupportsSandbox(spec.qemu_binary), HostTscKhz(), vm->ram_);
  // Restore: wait for migrate-incoming, and stay stopped after it until `cont`.
  if (plan.incoming) qemu_argv.insert(qemu_argv.end(), {"-S", "-incoming", "defer"});
  ASSIGN_OR_RETURN(std::string exe, FindExecutable(spec.qemu_binary));
  if (!spec.jail && plan.ram_fd >= 0) return InvalidArgument("a RAM fd is passed only to a jailed VMM");
  if (!spec.jail) {
    SpawnOptions so;
    if (!vm->cgroup_.procs_files().empty()) {
      // Join the cgroup before exec, so no QEMU allocation escapes the limit.
      so.argv = {"/bin/sh", "-c",
                 "while [ \"$1\" != -- ]; do echo $$ > \"$1\" || exit 125; shift; done; shift; exec \"$@\"",
                 "airlock-vmm"};
      for (const auto& f : vm->cgroup_.procs_files()) so.argv.push_back(f);
      so.argv.push_back("--");
    }
    so.argv.insert(so.argv.end(), qemu_argv.begin(), qemu_argv.end());
    so.stdout_fd = err_w.get();
    so.stderr_fd = err_w.get();
    so.netns_fd = spec.netns_fd;
    so.die_with_parent = !spec.detach;
    so.new_session = true;
    auto child = Spawn(so);
    if (!child.ok()) return child.status().WithContext("spawn qemu");
    vm->child_ = std::move(*child);
  } else {
    // The jail sees the kernel, initrd and every disk of the overlay's
    // backing chain, as recorded by us (never as named by a qcow2 header,
    // which a VMM writes).
    ASSIGN_OR_RETURN(std::vector<std::string> chain, DiskChain(vm->disk_backing_, vm->disk_backing_format_));
    JailSpec js;
    js.uid = spec.jail->first;
    js.gid = spec.jail->second;
    js.vmm_dir = p.vmm_dir;
    js.base_dir = spec.run_dir;
    js.kvm = vm->accel_ == Accel::kKvm;
    js.proc = plan.ram_fd >= 0;  // /proc/self/fd/3
    js.ro_files = {spec.kernel, spec.initrd};
    js.ro_files.insert(js.ro_files.end(), chain.begin(), chain.end());
    for (auto& f : js.ro_files) f = fs::absolute(f).string();
    const int ram_fd = plan.ram_fd;
    ASSIGN_OR_RETURN(JailPlan jail_plan, PlanJail(js));
    JailProcess jp;
    jp.argv = qemu_argv;
    ASSIGN_OR_RETURN(jp.argv[0], CanonicalExecutable(exe));
    jp.env = {"PATH=/usr/bin:/bin"};
    jp.cgroup_procs = vm->cgroup_.procs_files();
    jp.netns_fd = spec.netns_fd;
    jp.tap = spec.tap_name;
    jp.stdout_fd = err_w.get();
    jp.stderr_fd = err_w.get();
    jp.die_with_parent = !spec.detach;
    jp.pass_fd = ram_fd;
    auto child = SpawnJailed(jail_plan, jp);
    if (!child.ok()) return child.status().WithContext("spawn qemu");
    vm->child_ = std::move(*child);
    if (Status st = VmmUidPool::Adopt(spec.uid_lease, vm->child_.pid()); !st.ok()) return st.WithContext("uid lease");
  }
  err_w.Reset();
  RETURN_IF_ERROR(vm->stderr_.Start(std::move(err_r)));

  // QMP: retry until QEMU listens, it dies, or the deadline passes.
  auto deadline = std::chrono::steady_clock::now() + spec.start_timeout;
  while (true) {
    if (auto es = vm->child_.Poll()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the stderr drain catch up
      return FailedPrecondition("qemu exited during start: " + vm->DeathReport(*es));
    }
    // Once it listens, its greeting and capabilities answer may take the
    // rest of the start's time: a QEMU starting on a busy host (two test
    // suites on 2 cores under TCG) was seen to take more than 2 s.
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto q = QmpClient::Connect(p.qmp_socket, std::max<std::chrono::milliseconds>(std::chrono::seconds(2), left));
    if (q.ok()) {
      vm->qmp_ = std::move(*q);
      break;
    }
    if (q.status().code() != StatusCode::kUnavailable) return q.status().WithContext("qmp connect");
    if (std::chrono::steady_clock::now() > deadline)
      return DeadlineExceeded("qemu did not open its QMP socket within " + std::to_string(spec.start_timeout.count()) +
                              " ms; stderr: " + vm->stderr_.Tail());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  // console
  {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, p.console_socket.c_str(), p.console_socket.size() + 1);
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!c) return ErrnoError("socket");
    if (::connect(c.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      return ErrnoError("connect " + p.console_socket);
    RETURN_IF_ERROR(vm->console_.Start(std::move(c)));
  }

  auto st = vm->qmp_->Execute("query-status");
  if (!st.ok()) return st.status();
  if (spec.detach) RETURN_IF_ERROR(WriteVmRecord(*vm));
  auto t1 = std::chrono::steady_clock::now();
  LOG_INFO("vmm started sandbox={} pid={} accel={} status={} ms={}", spec.sandbox_id, vm->pid(), AccelName(vm->accel_),
           st->value("status", "?"), std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count());
  return vm;
}

QemuVm::~QemuVm() {
  if (released_) return;
  Status st = Destroy();
  if (!st.ok()) LOG_WARN("vmm destroy failed sandbox={} error={}", spec_.sandbox_id, st.ToString());
}

std::string QemuVm::DeathReport(const ExitStatus& es) const {
  std::string r = es.ToString();
  std::string err = stderr_.Tail();
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (!err.empty()) r += "; qemu stderr: " + err;
  std::string con = console_.Tail();
  if (con.size() > 4096) con = "..." + con.substr(con.size() - 4096);
  if (!con.empty()) r += "; console tail: " + con;
  return r;
}

Status QemuVm::CheckAlive() {
  if (destroyed_) return FailedPrecondition("vmm destroyed");
  if (adopted_pid_ > 0) {
    return AdoptedAlive() ? OkStatus() : FailedPrecondition("qemu (pid " + std::to_string(adopted_pid_) + ") exited");
  }
  if (auto es = child_.Poll()) return FailedPrecondition("qemu exited: " + DeathReport(*es));
  return OkStatus();
}

Status QemuVm::WaitForConsole(const std::string& marker, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!console_.Contains(marker)) {
    if (auto es = child_.Poll()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (console_.Contains(marker)) return OkStatus();
      return FailedPrecondition("qemu exited before the guest printed '" + marker + "': " + DeathReport(*es));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string con = console_.Tail();
      if (con.size() > 2048) con = "..." + con.substr(con.size() - 2048);
      return DeadlineExceeded("guest did not print '" + marker + "' within " + std::to_string(timeout.count()) +
                              " ms; console tail: " + con);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return OkStatus();
}

StatusOr<ExitStatus> QemuVm::WaitForExit(std::chrono::milliseconds timeout) {
  if (adopted_pid_ > 0) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (AdoptedAlive()) {
      if (std::chrono::steady_clock::now() >= deadline) return DeadlineExceeded("qemu still running");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ExitStatus{};  // not our child: its status went to init
  }
  return child_.WaitFor(timeout);
}

pid_t QemuVm::Release() {
  released_ = true;
  console_.Stop();
  stderr_.Stop();
  if (adopted_pid_ > 0) return adopted_pid_;
  return child_.Release();
}

Status QemuVm::Destroy() {
  if (destroyed_) return OkStatus();
  Status first;
  if (adopted_pid_ > 0 && AdoptedAlive()) {
    if (qmp_) (void)qmp_->Execute("quit", nullptr, std::chrono::milliseconds(500));
    if (!WaitForExit(std::chrono::seconds(2)).ok()) {
      ::kill(adopted_pid_, SIGKILL);
      (void)WaitForExit(std::chrono::seconds(3));
    }
  }
  if (child_.running()) {
    if (qmp_) {
      auto q = qmp_->Execute("quit", nullptr, std::chrono::milliseconds(500));
      if (!q.ok()) LOG_DEBUG("qmp quit failed sandbox={} error={}", spec_.sandbox_id, q.status().ToString());
    }
    auto w = child_.WaitFor(std::chrono::seconds(2));
    if (!w.ok()) {
      LOG_WARN("vmm did not quit in 2 s, killing sandbox={} pid={}", spec_.sandbox_id, child_.pid());
      child_.Kill();
    }
  }
  qmp_.reset();
  console_.Stop();
  stderr_.Stop();
  Status cg = cgroup_.Remove();
  if (!cg.ok()) first = cg;
  if (!spec_.run_dir.empty()) {
    std::error_code ec;
    fs::remove_all(spec_.run_dir, ec);
    if (ec && first.ok()) first = Internal("remove " + spec_.run_dir + ": " + ec.message());
  }
  // Last: the uid is free only once nothing of it is left.
  if (first.ok()) {
    if (Status st = VmmUidPool::Release(spec_.uid_lease); !st.ok()) first = st;
  }
  if (first.ok()) destroyed_ = true;
  return first;
}

}  // namespace airlock::qemu
