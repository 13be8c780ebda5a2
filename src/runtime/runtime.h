// The Runtime interface: what a VMM backend does when the Sandbox state
// machine (core/manager.h) asks for a transition. One folder per backend
// under src/runtime/ implements it (qemu/ today; firecracker/, gvisor/ later).
//
// A runtime never decides anything about a sandbox's life; it only starts and
// stops machines. Errors are Status values naming the failing step.
#pragma once

#include <sys/types.h>

#include <chrono>
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
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual std::string_view name() const = 0;
  // Human-readable accelerator decision, e.g. "tcg (no vmx/svm in /proc/cpuinfo)".
  virtual std::string accelerator() const = 0;
  virtual StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& request) = 0;
};

}  // namespace airlock
