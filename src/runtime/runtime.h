// The Runtime interface: what a VMM backend does when the Sandbox state
// machine (core/manager.h) asks for a transition. One folder per backend
// under src/runtime/ implements it (qemu/ today; firecracker/, gvisor/ later);
// runtime/registry.h opens one by name, so nothing above this layer names a
// backend. tests/conformance/ checks every promise below on every runtime.
//
// A runtime never decides anything about a sandbox's life; it only starts and
// stops machines. Errors are Status values naming the failing step.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace airlock {

// What a runtime plugs its guest into (net/sandbox_network.h NetworkOptions):
// both give the guest 169.254.0.21/30 behind the gateway 169.254.0.22 on
// tap0 in the sandbox's netns, so everything above the runtime is the same.
enum class GuestLink {
  kTap,        // tap0 itself, opened by the VMM as the guest's NIC (qemu)
  kVethNetns,  // a netns holding only eth0 (the guest address), the other
               // end of a veth named tap0: for a user-space network stack
               // that takes over a host interface (gVisor's netstack)
};

// A host directory bind-mounted read-write into the guest (a volume on a
// runtime that shares host directories itself, gVisor; docs/volumes.md).
struct HostMount {
  std::string source;       // host directory
  std::string destination;  // absolute guest path
};

// Everything a runtime needs to start one microVM.
struct VmStartRequest {
  std::string sandbox_id;
  std::string kernel;   // uncompressed ELF vmlinux
  std::string initrd;   // initramfs (newc cpio)
  std::string rootfs;   // template ext4 image; never written (an overlay is)
  std::string run_dir;  // per-sandbox directory owned by the runtime
  int vcpus = 1;
  int memory_mib = 512;
  int netns_fd = -1;  // the sandbox's network namespace (not owned)
  std::string tap;    // tap device inside that netns (GuestLink::kTap)
  // GuestLink::kVethNetns: the path of the guest's own netns
  // ("/run/netns/alg-<id>"), holding eth0 with the guest address.
  std::string guest_netns;
  // The sandbox netns's address on the host link (net/sandbox_network.h
  // netns_ip, "198.18.0.1"): the remote address of every host socket that
  // talks to the guest (the daemon's connections to its agent, the egress
  // proxy's from it). A runtime whose save cannot keep TCP connections
  // (gVisor) resets those by it first.
  std::string netns_ip;
  // The sandbox's netns as a path ("/run/netns/al-<id>"), for a runtime that
  // acts in it after Start: the daemon's own connections to the guest made
  // from inside it (the data plane's, from the gateway 169.254.0.22) are
  // reset there too before a gVisor save.
  std::string sandbox_netns;
  // GuestLink::kVethNetns: eth0's address ("169.254.0.21/30") and gateway
  // in guest_netns. A runtime that takes them off eth0 when it starts a
  // guest (runsc) puts them back before the next guest starts in that netns
  // (a rollback restores into the sandbox's own network).
  std::string guest_cidr;
  std::string guest_gateway;
  std::string kernel_cmdline_extra;
  // Volumes for a runtime that mounts host directories itself (gvisor);
  // ignored by qemu, whose guests mount volumes over NFS (core/volumes.h).
  std::vector<HostMount> host_mounts;
  // true: the VMM survives this process (a daemon re-adopts it after a
  // restart); false: it dies with the thread that started it.
  bool detach = false;
  // Start() of a template builder: keep the guest RAM so that its
  // SaveSnapshot(keep_running=false) writes a template whose RAM every
  // Restore maps copy-on-write instead of loading (qemu: a file, see
  // docs/snapshots.md "Shared-RAM templates"); such a save ends the VM.
  // Ignored by runtimes that cannot.
  bool shared_memory_template = false;
};

// What a snapshot holds (docs/snapshots.md): sizes in bytes, time in ms.
struct VmSnapshotInfo {
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t save_ms = 0;
  // RAM kept in a file every restore maps (shared_memory_template, or
  // SnapshotMemory::kSharedByRestores), not in memory_bytes; 0 otherwise.
  uint64_t shared_memory_bytes = 0;
};

// How a snapshot keeps the guest's memory (docs/snapshots.md "RAM deltas and
// fork files").
enum class SnapshotMemory {
  // As the runtime restores it best: a VM that maps its RAM from a file its
  // restores map too (qemu: a clone of a shared-RAM template or of a fork)
  // keeps only the pages it changed since that file (a delta); others all.
  kDefault,
  // For a fork: the memory becomes a file of the snapshot's own that every
  // restore maps copy-on-write, so the children share each page none of them
  // writes. Where the runtime cannot (qemu: a VM whose RAM is no memory
  // backend, i.e. a cold boot), as kDefault.
  kSharedByRestores,
  // A disk-only snapshot of a runtime whose guest keeps its files in memory
  // (Runtime::guest_files_in_memory): no memory is written; the caller has
  // put the guest's export of its root (kGuestRootChanges) in the snapshot
  // directory, and the runtime stops the guest (keep_running=false) and
  // commits it. Unimplemented elsewhere.
  kNone,
};

// The file of a kNone snapshot: the tar the guest's agent answers to GET
// /airlock/root-changes (agent/root_changes.h), what its root holds that its
// template does not. The daemon stores and relays it, never parses it.
inline constexpr char kGuestRootChanges[] = "root-changes.tar";

// How a VM restored from a snapshot gets its disk.
enum class SnapshotDisk {
  // A copy-on-write overlay on top of the snapshot's disk: the snapshot must
  // outlive the VM (fork children, template snapshots).
  kShared,
  // A private copy of the snapshot's disk overlay (cost: what the guest wrote
  // since its template): the snapshot may be deleted once the VM runs, and
  // repeated pause/resume never lengthens the backing chain.
  kPrivateCopy,
};

// What a committed snapshot directory holds, as SnapshotStore::Read finds it.
struct SnapshotShape {
  int vcpus = 0;  // the machine shape a memory restore needs
  int memory_mib = 0;
  uint64_t memory_bytes = 0;  // bytes; 0: disk only (DropMemory), boots only (Restore memory=false)
  uint64_t disk_bytes = 0;    // bytes of the snapshot's own disk layer
  // Absolute path of the file the snapshot's disk is layered on: the
  // template rootfs, or the disk of the snapshot the VM was itself restored
  // from (a fork checkpoint, a named snapshot). What reference counting of
  // shared snapshots follows.
  std::string disk_backing;
};

// The snapshot directories a runtime writes (VmInstance::SaveSnapshot) and
// reads (Runtime::Restore): their format is the runtime's own, so core reads,
// deletes and trims them only through here. Stateless and thread-safe; every
// `dir` is an absolute snapshot directory path.
class SnapshotStore {
 public:
  virtual ~SnapshotStore() = default;
  // Reads and checks the snapshot in `dir`: NotFound when it holds none (never
  // saved, or a save that did not commit); InvalidArgument for an unreadable
  // record; DataLoss when a file is missing or its size differs from the
  // record (truncated, half-copied); FailedPrecondition when it can no longer
  // be restored here (unknown format version, its disk backing gone, the
  // template rebuilt since, see ImageStamp).
  virtual StatusOr<SnapshotShape> Read(const std::string& dir) const = 0;
  // Removes the snapshot in `dir`, its commit record first (a crash part-way
  // leaves an invalid snapshot, never a valid-looking broken one), then the
  // rest. OK when `dir` does not exist; an errno status naming the path else.
  virtual Status Delete(const std::string& dir) const = 0;
  // Turns the snapshot in `dir` into a disk-only one (pause with
  // keepMemory=false): the memory is dropped, the disk kept, and the record
  // rewritten atomically (Read then says memory_bytes 0). Read's errors when
  // `dir` is not a valid snapshot.
  virtual Status DropMemory(const std::string& dir) const = 0;
  // Which build of a template rootfs the file at `path` is (an opaque,
  // printable string): equal for copies and touches of one build, different
  // after a rebuild at the same path. Keys template snapshots (a snapshot of
  // another build is never restored over this one). An errno status when the
  // file cannot be read.
  virtual StatusOr<std::string> ImageStamp(const std::string& path) const = 0;
  // Writes the whole disk of the snapshot in `dir` (its layer and every disk
  // under it, as the store recorded them, never as a disk file's own header
  // names them) as one raw, sparse image at `out` (a new file): how a custom
  // template build's last layer becomes a template rootfs. Read's errors;
  // Internal with the tool's output when the copy fails; ResourceExhausted
  // when the disk is full. Unimplemented where the backend cannot.
  virtual Status ExportDisk(const std::string& dir, const std::string& out) const {
    (void)dir, (void)out;
    return Unimplemented("this runtime cannot export snapshot disks");
  }
};

// One running microVM. Destroy() stops the VMM (its process is gone when it
// returns) and removes request.run_dir; it is idempotent and also run by the
// destructor.
class VmInstance {
 public:
  virtual ~VmInstance() = default;
  virtual pid_t pid() const = 0;
  virtual bool alive() = 0;
  // The last few KiB the guest wrote on its console (for error messages).
  virtual std::string ConsoleTail() = 0;
  virtual Status Destroy() = 0;
  // Forget the VMM without stopping it (only for detach=true); returns its
  // pid. Afterwards Destroy() and the destructor do nothing.
  virtual pid_t Release() = 0;
  // Writes memory + device state + disk into `dir` (absolute, new or empty;
  // the manifest is written last, atomically). keep_running=false leaves the
  // guest stopped (pause: the caller destroys the VM next). On failure nothing
  // is left in `dir` and a guest that was running runs again. ENOSPC is
  // ResourceExhausted. Unimplemented where the backend cannot.
  virtual StatusOr<VmSnapshotInfo> SaveSnapshot(const std::string& dir, bool keep_running,
                                                SnapshotMemory memory = SnapshotMemory::kDefault) {
    (void)dir, (void)keep_running, (void)memory;
    return Unimplemented("this VM cannot be snapshotted");
  }
  // Lets a guest left stopped by SaveSnapshot(keep_running=false) run again.
  virtual Status ContinueGuest() { return Unimplemented("this VM cannot be continued"); }
  // The guest's console as a channel that needs no guest network (core/
  // guest_seed.h): writes `line` and '\n' to the console's input without
  // blocking (Unavailable when it cannot take them now or the VMM is gone).
  // Unimplemented where the backend has no console input.
  virtual Status WriteConsoleLine(std::string_view line) {
    (void)line;
    return Unimplemented("this VM has no console input");
  }
  // Whether what the guest wrote on its console since this VMM started (the
  // last few hundred KiB of it) contains `text`. Guest output: a hint, never
  // proof of anything but the guest's own state.
  virtual bool ConsoleContains(const std::string& text) {
    (void)text;
    return false;
  }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;
  // Human-readable accelerator decision, e.g. "tcg (no vmx/svm in /proc/cpuinfo)".
  virtual std::string accelerator() const = 0;
  // What the sandbox network must give this runtime's guests.
  virtual GuestLink guest_link() const { return GuestLink::kTap; }
  // Whether a sandbox of a template whose guest runs nothing but the agent
  // starts sooner by Restore of the template's snapshot than by Start, as
  // measured for this runtime (docs/runtime-gvisor.md "Warm start"). qemu:
  // yes, a restore skips the kernel's boot. gvisor: no, `runsc run` (TTI
  // p50 1.22 s here) beats `runsc restore` (1.34 s). A template with
  // services of its own (image::TemplateReadiness: the code interpreter's
  // warm kernel) starts from its snapshot on every runtime: its cold start
  // waits for them (gvisor: 7.5 s cold, 2.8 s restored).
  virtual bool plain_template_restores_sooner() const { return true; }
  // Whether the guest keeps the files it wrote in its own memory (gVisor's
  // overlay), so that no disk can be kept without that memory. A disk-only
  // snapshot of such a guest is its export (SnapshotMemory::kNone), and a
  // Restore with memory=false boots a fresh guest on the template, to which
  // the caller hands the export back (agent PUT /airlock/root-changes)
  // before anyone else talks to it.
  virtual bool guest_files_in_memory() const { return false; }
  // Boots a VM; it runs when this returns (its guest may still be booting).
  // On failure nothing is left running and run_dir is removed; the error
  // carries the tail of what the VMM and the guest printed.
  virtual StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& request) = 0;
  // Takes over a detached VMM a previous process started in run_dir (its pid),
  // with full control (snapshots included). Unimplemented where unsupported;
  // then the caller falls back to a pid-only handle.
  virtual StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) {
    (void)run_dir, (void)pid;
    return Unimplemented("this runtime cannot reattach to a VMM");
  }
  // The snapshots this runtime writes. Runtimes without snapshots keep the
  // default: every operation is Unimplemented.
  virtual const SnapshotStore& snapshots() const;
  // A VMM in `run_dir` that a process which died mid-pause left stopped
  // (SaveSnapshot with keep_running=false, then neither Destroy nor
  // ContinueGuest) runs its guest again; a half-done save is cancelled. OK
  // when it runs afterwards, and when no VMM answers in `run_dir` (nothing to
  // do: the caller finds it dead). Bounded (a few seconds). The default does
  // nothing: a runtime that cannot snapshot never leaves a guest stopped.
  virtual Status ContinueIfStopped(const std::string& run_dir) {
    (void)run_dir;
    return OkStatus();
  }
  // Starts a VM from a snapshot directory written by VmInstance::SaveSnapshot.
  // request.kernel/initrd/rootfs may be empty: the snapshot's own are used.
  // The machine shape (vcpus, memory) must match the snapshot's
  // (FailedPrecondition otherwise); a corrupt memory file is DataLoss; on
  // failure nothing is left running and run_dir is removed. The guest runs
  // when this returns. memory=false: a cold boot (the snapshot's
  // memory is ignored; a disk-only snapshot needs it) on a private copy of
  // the snapshot's disk, whatever `disk` says; where guest_files_in_memory(),
  // on the template, the export in the snapshot left for the caller.
  virtual StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& request, const std::string& snapshot_dir,
                                                        SnapshotDisk disk, bool memory = true) {
    (void)request, (void)snapshot_dir, (void)disk, (void)memory;
    return Unimplemented("this runtime cannot restore snapshots");
  }
};

// The store of runtimes that cannot snapshot: every operation is Unimplemented
// with `why` (a runtime that knows its reason says it).
class NoSnapshotStore final : public SnapshotStore {
 public:
  explicit NoSnapshotStore(std::string why = "this runtime has no snapshots") : why_(std::move(why)) {}
  StatusOr<SnapshotShape> Read(const std::string&) const override { return Unimplemented(why_); }
  Status Delete(const std::string&) const override { return Unimplemented(why_); }
  Status DropMemory(const std::string&) const override { return Unimplemented(why_); }
  StatusOr<std::string> ImageStamp(const std::string&) const override { return Unimplemented(why_); }

 private:
  std::string why_;
};

inline const SnapshotStore& Runtime::snapshots() const {
  static const NoSnapshotStore none;
  return none;
}

}  // namespace airlock
