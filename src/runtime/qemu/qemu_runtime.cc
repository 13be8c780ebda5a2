#include "runtime/qemu/qemu_runtime.h"

#include "common/subprocess.h"
#include "runtime/qemu/qemu_vm.h"

namespace airlock::qemu {
namespace {

class QemuInstance final : public VmInstance {
 public:
  explicit QemuInstance(std::unique_ptr<QemuVm> vm) : vm_(std::move(vm)) {}
  pid_t pid() const override { return vm_->pid(); }
  bool alive() override { return vm_->CheckAlive().ok(); }
  std::string ConsoleTail() override {
    std::string tail = vm_->console_tail();
    constexpr size_t kShown = 4096;  // enough for an error message
    return tail.size() > kShown ? tail.substr(tail.size() - kShown) : tail;
  }
  Status Destroy() override { return released_ ? OkStatus() : vm_->Destroy(); }
  pid_t Release() override {
    released_ = true;
    return vm_->Release();
  }
  StatusOr<VmSnapshotInfo> SaveSnapshot(const std::string& dir, bool keep_running) override {
    SaveSnapshotOptions o;
    o.keep_running = keep_running;
    ASSIGN_OR_RETURN(auto m, vm_->SaveSnapshot(dir, o));
    return VmSnapshotInfo{m.memory_bytes, m.disk_bytes, m.save_ms};
  }
  Status ContinueGuest() override { return vm_->Resume(); }

 private:
  std::unique_ptr<QemuVm> vm_;
  bool released_ = false;
};

class QemuRuntime final : public Runtime {
 public:
  QemuRuntime(std::string state_dir, AccelDecision accel) : state_dir_(std::move(state_dir)), accel_(accel) {}
  std::string_view name() const override { return "qemu"; }
  std::string accelerator() const override { return std::string(AccelName(accel_.accel)) + " (" + accel_.reason + ")"; }

  VmSpec SpecFor(const VmStartRequest& r) const {
    VmSpec spec;
    spec.sandbox_id = r.sandbox_id;
    spec.kernel = r.kernel;
    spec.initrd = r.initrd;
    spec.rootfs_template = r.rootfs;
    spec.run_dir = r.run_dir;
    spec.vcpus = r.vcpus;
    spec.memory_mib = r.memory_mib;
    spec.extra_cmdline = r.kernel_cmdline_extra;
    spec.netns_fd = r.netns_fd;
    spec.tap_name = r.tap;
    spec.accel = accel_.accel;
    spec.state_dir = state_dir_;
    spec.detach = r.detach;
    return spec;
  }

  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& r) override {
    ASSIGN_OR_RETURN(auto vm, QemuVm::Start(SpecFor(r)));
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm)));
  }

  StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) override {
    ASSIGN_OR_RETURN(auto vm, QemuVm::Reattach(run_dir, pid));
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm)));
  }

  StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& r, const std::string& dir,
                                                SnapshotDisk disk, bool memory) override {
    ASSIGN_OR_RETURN(auto m, ReadSnapshot(dir));
    VmStartRequest req = r;
    if (req.kernel.empty()) req.kernel = m.kernel;
    if (req.initrd.empty()) req.initrd = m.initrd;
    if (req.rootfs.empty()) req.rootfs = m.rootfs;
    VmSpec spec = SpecFor(req);
    RestoreOptions o;
    o.private_disk = disk == SnapshotDisk::kPrivateCopy;
    o.disk_only = !memory;
    ASSIGN_OR_RETURN(auto vm, QemuVm::Restore(spec, dir, o));
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm)));
  }

 private:
  std::string state_dir_;
  AccelDecision accel_;
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> NewQemuRuntime(const std::string& state_dir) {
  for (const char* tool : {"qemu-system-x86_64", "qemu-img"}) {
    if (!FindExecutable(tool).ok()) {
      return FailedPrecondition(std::string(tool) + " is not installed (fix: apt-get install qemu-system-x86 qemu-utils, "
                                "or run scripts/setup)");
    }
  }
  return std::unique_ptr<Runtime>(new QemuRuntime(state_dir, ProbeAccelCached(state_dir)));
}

}  // namespace airlock::qemu
