// QemuVm: one `qemu-system-x86_64 -M microvm` per sandbox, controlled over
// QMP (docs/runtime-qemu.md).
//
// Start() is a checklist: validate → accel → run dir (root's: vm.json) and
// its vmm/ dir (the VMM's uid's) → qcow2 overlay on the (never written) raw
// template → cgroup (memory, pids, cpu; best effort) → spawn QEMU inside the
// sandbox netns, jailed (jail.h: its own uid, no capabilities, a mount
// namespace holding only what it needs; joining the cgroup before exec) →
// QMP handshake → console.
// Any failure undoes what was done and, when QEMU died, the error carries the
// tail of its stderr and of the guest console.
//
// The guest console is a unix socket drained into a 256 KiB in-memory tail;
// nothing the guest prints reaches the disk. Destroy() (also in the
// destructor; idempotent) asks QEMU to quit over QMP, waits ≤ 2 s, SIGKILLs,
// then removes the cgroup, overlay, sockets and run dir.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"
#include "runtime/qemu/accel_probe.h"
#include "runtime/qemu/cgroup.h"
#include "runtime/qemu/output_tail.h"
#include "runtime/qemu/qmp_client.h"
#include "runtime/qemu/snapshot.h"
#include "runtime/qemu/uid_pool.h"

namespace airlock::qemu {

// Guest RAM (docs/snapshots.md "Shared-RAM templates"). kMachine: microvm's
// own anonymous RAM block ("microvm.ram"), what every VM had before. The
// others are a memory backend object named kRamBackendId (the RAM block's
// name in a migration stream): kAnon anonymous (a stream restore of a VM that
// had a backend), kSharedFile a file mapped MAP_SHARED (a template builder:
// its RAM becomes the template's file), kPrivateFile a file mapped
// MAP_PRIVATE (a clone of a shared-RAM template: pages copied on write).
enum class RamKind { kMachine, kAnon, kSharedFile, kPrivateFile };
inline constexpr char kRamBackendId[] = "mem0";
struct GuestRam {
  RamKind kind = RamKind::kMachine;
  std::string mem_path;  // kSharedFile / kPrivateFile: the path QEMU opens (as QEMU sees it)
};
std::string_view RamKindName(RamKind k);
StatusOr<RamKind> ParseRamKind(std::string_view name);

struct VmSpec {
  std::string sandbox_id;  // [A-Za-z0-9_-], becomes airlock.hostname
  std::string kernel;      // uncompressed ELF vmlinux
  std::string initrd;
  std::string rootfs_template;  // raw ext4, opened read-only as the overlay's backing file
  std::string run_dir;          // absolute; must not exist or be empty; removed by Destroy()
  int vcpus = 1;
  int memory_mib = 512;
  std::string extra_cmdline;
  // Borrowed netns fd (e.g. SandboxNetwork::netns_fd()); -1 = stay in ours.
  // Must stay open until Start() returns.
  int netns_fd = -1;
  std::string tap_name;  // empty = no network device
  // nullopt: ProbeAccelCached(state_dir) (or ProbeAccel() when state_dir is empty).
  std::optional<Accel> accel;
  std::string state_dir;
  // true: QEMU survives this process (a daemon re-adopts it); false: it gets
  // SIGKILL when the thread that started it exits (PR_SET_PDEATHSIG).
  bool detach = false;
  // The VMM's jail (jail.h): QEMU is exec'd as this uid:gid, with no
  // capabilities, in a mount namespace holding only its vmm dir, kernel,
  // initrd and disk chain (plus /usr and a few device nodes); the vmm dir and
  // overlay are chowned to it. nullopt: QEMU runs as root, unjailed (only
  // when the jail is switched off, for debugging).
  std::optional<std::pair<uid_t, gid_t>> jail;
  // The lease on jail's uid (uid_pool.h; empty path: none), released by Destroy().
  UidLease uid_lease;
  bool cgroup = true;  // best effort
  std::string qemu_binary = "qemu-system-x86_64";
  std::string qemu_img = "qemu-img";
  std::chrono::milliseconds start_timeout{15000};
  // Start() only: the guest's RAM is a file, <run_dir>/vmm/ram, mapped
  // share=on, so that SaveSnapshot writes a shared-RAM snapshot (device state
  // in the stream, RAM as a read-only file every restore maps copy-on-write).
  // Such a VM ends with its save.
  bool shared_ram_file = false;
};

inline constexpr size_t kConsoleTailBytes = 256 * 1024;
inline constexpr size_t kStderrTailBytes = 16 * 1024;

// Paths inside the run dir. <run_dir> itself is root's (vm.json); what
// QEMU opens, creates or connects to is in <run_dir>/vmm, the only writable
// directory in its jail (owned by the jail uid).
struct VmPaths {
  std::string vmm_dir, overlay, qmp_socket, console_socket, migrate_out_socket, migrate_in_socket, ram;
  static VmPaths For(const std::string& run_dir);
  // Before the vmm/ dir existed (a VMM started by an older daemon, adopted).
  static VmPaths Legacy(const std::string& run_dir);
};

// The QEMU command line (pure; unit-tested). `sandbox_supported`: whether
// this QEMU has -sandbox (seccomp). `tsc_khz`: TSC frequency given to a TCG
// guest (microvm has no PIT/HPET/PM timer to calibrate against; without it
// the guest hangs at boot).
// `ram`: the guest RAM's backing (kMachine: none, the command line of
// every VM before shared-RAM templates, so MachineShapeHash is unchanged).
std::vector<std::string> BuildQemuArgv(const VmSpec& spec, Accel accel, const VmPaths& paths, bool sandbox_supported,
                                       uint64_t tsc_khz, const GuestRam& ram = {});
std::string BuildKernelCmdline(const VmSpec& spec, Accel accel, uint64_t tsc_khz);

class QemuVm {
 public:
  static StatusOr<std::unique_ptr<QemuVm>> Start(const VmSpec& spec);
  ~QemuVm();
  QemuVm(const QemuVm&) = delete;
  QemuVm& operator=(const QemuVm&) = delete;

  pid_t pid() const { return adopted_pid_ > 0 ? adopted_pid_ : child_.pid(); }
  Accel accel() const { return accel_; }
  QmpClient& qmp() { return *qmp_; }
  std::string console_tail() const { return console_.Tail(); }
  bool ConsoleContains(const std::string& text) const { return console_.Contains(text); }
  // Writes to the guest's serial console input (OutputTail::Write).
  Status WriteConsole(std::string_view bytes) { return console_.Write(bytes); }
  std::string stderr_tail() const { return stderr_.Tail(); }
  const VmSpec& spec() const { return spec_; }
  const VmPaths& paths() const { return paths_; }

  // OK while QEMU runs; otherwise FailedPrecondition with how it ended and
  // the console tail.
  Status CheckAlive();
  // Waits until the console has printed `marker`; fails early (with the
  // console tail) if QEMU exits, DeadlineExceeded after `timeout`.
  Status WaitForConsole(const std::string& marker, std::chrono::milliseconds timeout);
  // Waits for QEMU to exit on its own.
  StatusOr<ExitStatus> WaitForExit(std::chrono::milliseconds timeout);
  // quit over QMP, ≤ 2 s grace, SIGKILL; then cgroup, overlay, sockets, run dir.
  Status Destroy();
  // Forget the process (it keeps running; requires spec.detach).
  pid_t Release();

  // ---- snapshots (snapshot.cc, docs/snapshots.md) ----
  // Writes a snapshot of this VM into `dir` (absolute; must not exist or be
  // empty): `stop`, device + memory state through QMP `migrate` (streamed by
  // us into <dir>/memory), a copy of the disk overlay as <dir>/disk.qcow2 and,
  // last, <dir>/manifest.json (the commit point; temp + rename). A failure
  // removes what was written and, if the guest was running, resumes it.
  // With keep_running = false the VM is left stopped ("postmigrate").
  // A VM started with spec.shared_ram_file writes a shared-RAM template
  // instead (format 2): x-ignore-shared keeps RAM out of the stream, and its
  // RAM file becomes <dir>/ram, root's and 0444, after the VMM is ended (so
  // the save ends the VM; keep_running must be false). Restores map it
  // copy-on-write. A VM restored from such a template (RAM a private
  // mapping) saves all of its RAM into the stream, as any other VM.
  StatusOr<SnapshotManifest> SaveSnapshot(const std::string& dir, const SaveSnapshotOptions& options = {});
  // Starts a new QEMU from a snapshot: same machine shape as `spec` (checked
  // against the manifest; FailedPrecondition when it differs), a fresh
  // overlay in spec.run_dir backed by <dir>/disk.qcow2, `-S -incoming defer`,
  // `migrate-incoming`, the memory file streamed in (CRC-checked; DataLoss on
  // mismatch), then `cont`. Any failure leaves nothing running.
  static StatusOr<std::unique_ptr<QemuVm>> Restore(const VmSpec& spec, const std::string& dir,
                                                   const RestoreOptions& options = {});
  // Takes over a QEMU started (detached) by a previous process in `run_dir`
  // (reattach.cc): the spec is read back from <run_dir>/vm.json (written by
  // every launch), QMP is reconnected. The process is not our child: liveness
  // is "pid runs and its command line names run_dir". No console tail; its
  // cgroup (VmCgroup::Existing) is removed by Destroy. NotFound without vm.json; FailedPrecondition when the pid
  // is not that QEMU.
  static StatusOr<std::unique_ptr<QemuVm>> Reattach(const std::string& run_dir, pid_t pid);
  // `stop` / `cont` over QMP (a VM left stopped by SaveSnapshot resumes with Resume()).
  Status Pause();
  Status Resume();
  // The overlay's backing file and its format ("raw" template, or "qcow2":
  // the disk of the snapshot this VM was restored from).
  const std::string& disk_backing() const { return disk_backing_; }
  const std::string& disk_backing_format() const { return disk_backing_format_; }
  // FileStamp() of the rootfs template, taken at launch.
  const std::string& rootfs_stamp() const { return rootfs_stamp_; }
  // How the guest RAM is backed, and for a clone of a shared-RAM template
  // (kPrivateFile) the template's RAM file it maps (absolute; what the
  // snapshot GC must keep while this VM runs). Recorded in vm.json.
  const GuestRam& ram() const { return ram_; }
  const std::string& ram_source() const { return ram_source_; }

 private:
  // How Launch() differs between a cold boot and a restore.
  struct LaunchPlan {
    std::string backing;  // empty: spec.rootfs_template
    std::string backing_format = "raw";
    bool incoming = false;  // add -S -incoming defer
    // Non-empty: the overlay is a copy of this qcow2 (whose backing file is
    // `backing`) instead of a new empty one.
    std::string copy_overlay_from;
    GuestRam ram;            // kMachine: none
    std::string ram_source;  // kPrivateFile: the template RAM file (absolute)
    int ram_fd = -1;         // >= 0: passed to the jailed VMM as fd 3 (borrowed)
  };
  static StatusOr<std::unique_ptr<QemuVm>> Launch(const VmSpec& spec, const LaunchPlan& plan);
  // Shared-RAM save: moves <vmm>/ram into `dir`, ends the VMM, makes the file
  // root's and 0444, fsyncs and CRCs it into `m` (snapshot.cc).
  Status FreezeRamFile(const std::string& dir, SnapshotManifest& m);

  QemuVm() : console_(kConsoleTailBytes), stderr_(kStderrTailBytes) {}
  std::string DeathReport(const ExitStatus& es) const;

  VmSpec spec_;
  VmPaths paths_;
  Accel accel_ = Accel::kTcg;
  Child child_;
  std::unique_ptr<QmpClient> qmp_;
  OutputTail console_;
  OutputTail stderr_;
  VmCgroup cgroup_;
  bool destroyed_ = false;
  bool released_ = false;
  std::string disk_backing_, disk_backing_format_;
  // FileStamp() of the rootfs template at launch (what SaveSnapshot
  // records; vm.json keeps it for Reattach).
  std::string rootfs_stamp_;
  GuestRam ram_;
  std::string ram_source_;
  pid_t adopted_pid_ = -1;  // Reattach(): not our child
  bool AdoptedAlive() const;
};

// <run_dir>/vm.json: what Reattach needs (reattach.cc).
Status WriteVmRecord(const QemuVm& vm);

// Does this QEMU binary accept -sandbox (built with seccomp)? Cached.
bool QemuSupportsSandbox(const std::string& qemu_binary);
// Host TSC frequency in kHz: measured against CLOCK_MONOTONIC once (60 ms),
// else /proc/cpuinfo "cpu MHz", else 2'000'000.
uint64_t HostTscKhz();

}  // namespace airlock::qemu
