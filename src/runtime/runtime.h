// The Runtime interface: what a VMM backend does when the Sandbox state
// machine (core/manager.h) asks for a transition. One folder per backend
// under src/runtime/ implements it (qemu/ today; firecracker/, gvisor/ later).
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

#include "common/status.h"

namespace airlock {

// Everything a runtime needs to start one microVM.
struct VmStartRequest {
  std::string sandbox_id;
  std::string kernel;       // uncompressed ELF vmlinux
  std::string initrd;       // initramfs (newc cpio)
  std::string rootfs;       // template ext4 image; never written (an overlay is)
  std::string run_dir;      // per-sandbox directory owned by the runtime
  int vcpus = 1;
  int memory_mib = 512;
  int netns_fd = -1;        // the sandbox's network namespace (not owned)
  std::string tap;          // tap device inside that netns
  std::string kernel_cmdline_extra;
  // true: the VMM survives this process (a daemon re-adopts it after a
  // restart); false: it dies with the thread that started it.
  bool detach = false;
};

// What a snapshot holds (docs/snapshots.md): sizes in bytes, time in ms.
struct VmSnapshotInfo {
  uint64_t memory_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t save_ms = 0;
};

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

// One running microVM. Destroy() is idempotent and also run by the destructor.
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
  virtual StatusOr<VmSnapshotInfo> SaveSnapshot(const std::string& dir, bool keep_running) {
    (void)dir, (void)keep_running;
    return Unimplemented("this VM cannot be snapshotted");
  }
  // Lets a guest left stopped by SaveSnapshot(keep_running=false) run again.
  virtual Status ContinueGuest() { return Unimplemented("this VM cannot be continued"); }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;
  // Human-readable accelerator decision, e.g. "tcg (no vmx/svm in /proc/cpuinfo)".
  virtual std::string accelerator() const = 0;
  virtual StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& request) = 0;
  // Starts a VM from a snapshot directory written by VmInstance::SaveSnapshot.
  // request.kernel/initrd/rootfs may be empty: the snapshot's own are used.
  // The machine shape (vcpus, memory) must match the snapshot's
  // (FailedPrecondition otherwise); a corrupt memory file is DataLoss. The
  // guest runs when this returns.
  // Takes over a detached VMM a previous process started in run_dir (its pid),
  // with full control (snapshots included). Unimplemented where unsupported;
  // then the caller falls back to a pid-only handle.
  virtual StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) {
    (void)run_dir, (void)pid;
    return Unimplemented("this runtime cannot reattach to a VMM");
  }
  // memory=false: a cold boot on a private copy of the snapshot's disk.
  virtual StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& request,
                                                        const std::string& snapshot_dir, SnapshotDisk disk,
                                                        bool memory = true) {
    (void)request, (void)snapshot_dir, (void)disk, (void)memory;
    return Unimplemented("this runtime cannot restore snapshots");
  }
};

}  // namespace airlock
