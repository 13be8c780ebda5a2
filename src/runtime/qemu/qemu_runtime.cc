#include "runtime/qemu/qemu_runtime.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/log.h"
#include "common/subprocess.h"
#include "runtime/qemu/jail.h"
#include "runtime/qemu/qemu_vm.h"
#include "runtime/qemu/qmp_client.h"
#include "runtime/qemu/snapshot.h"

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
  StatusOr<VmSnapshotInfo> SaveSnapshot(const std::string& dir, bool keep_running, SnapshotMemory memory) override {
    SaveSnapshotOptions o;
    o.keep_running = keep_running;
    o.ram_file = memory == SnapshotMemory::kSharedByRestores;
    ASSIGN_OR_RETURN(auto m, vm_->SaveSnapshot(dir, o));
    return VmSnapshotInfo{m.memory_bytes, m.disk_bytes, m.save_ms, m.ram_bytes};
  }
  Status ContinueGuest() override { return vm_->Resume(); }
  Status WriteConsoleLine(std::string_view line) override {
    if (released_) return Unavailable("the VMM was released");
    return vm_->WriteConsole(std::string(line) + "\n");
  }
  bool ConsoleContains(const std::string& text) override { return !released_ && vm_->ConsoleContains(text); }

 private:
  std::unique_ptr<QemuVm> vm_;
  bool released_ = false;
};

// snapshot.h's directories (manifest.json, memory, disk.qcow2).
class QemuSnapshotStore final : public SnapshotStore {
 public:
  StatusOr<SnapshotShape> Read(const std::string& dir) const override {
    ASSIGN_OR_RETURN(SnapshotManifest m, ReadSnapshot(dir));
    SnapshotShape s;
    s.vcpus = m.vcpus;
    s.memory_mib = m.memory_mib;
    s.memory_bytes = m.memory_bytes;
    s.disk_bytes = m.disk_bytes;
    s.disk_backing = m.disk_backing;
    return s;
  }
  Status Delete(const std::string& dir) const override { return DeleteSnapshot(dir); }
  Status DropMemory(const std::string& dir) const override { return DropSnapshotMemory(dir); }
  StatusOr<std::string> ImageStamp(const std::string& path) const override { return FileStamp(path); }
  Status ExportDisk(const std::string& dir, const std::string& out) const override {
    return ExportSnapshotDisk(dir, out);
  }
};

class QemuRuntime final : public Runtime {
 public:
  QemuRuntime(std::string state_dir, AccelDecision accel, const VmmJailOptions& jail)
      : state_dir_(std::move(state_dir)),
        accel_(accel),
        jail_(jail),
        uids_(jail.lease_root, jail.uid_base, jail.uid_count) {}
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
    spec.shared_ram_file = r.shared_memory_template;
    return spec;
  }

  // A uid of its own for this VMM (released by QemuVm::Destroy, or here if it never started).
  Status Jail(VmSpec& spec) {
    if (!jail_.enabled) return OkStatus();
    ASSIGN_OR_RETURN(spec.uid_lease, uids_.Acquire(spec.sandbox_id));
    spec.jail = std::make_pair(spec.uid_lease.uid, static_cast<gid_t>(spec.uid_lease.uid));
    return OkStatus();
  }

  StatusOr<std::unique_ptr<VmInstance>> Start(const VmStartRequest& r) override {
    VmSpec spec = SpecFor(r);
    RETURN_IF_ERROR(Jail(spec));
    auto vm = QemuVm::Start(spec);
    if (!vm.ok()) {
      (void)VmmUidPool::Release(spec.uid_lease);
      return vm.status();
    }
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm).value()));
  }

  StatusOr<std::unique_ptr<VmInstance>> Adopt(const std::string& run_dir, pid_t pid) override {
    ASSIGN_OR_RETURN(auto vm, QemuVm::Reattach(run_dir, pid));
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm)));
  }

  const SnapshotStore& snapshots() const override { return store_; }

  // Over QMP: a VMM stopped mid-pause (or mid-save) is `cont`inued.
  Status ContinueIfStopped(const std::string& run_dir) override {
    auto qmp = QmpClient::Connect(VmPaths::For(run_dir).qmp_socket, std::chrono::seconds(2));
    if (!qmp.ok()) qmp = QmpClient::Connect(VmPaths::Legacy(run_dir).qmp_socket, std::chrono::seconds(2));
    if (!qmp.ok()) return OkStatus();  // no VMM answers: nothing to continue
    auto st = (*qmp)->Execute("query-status");
    if (!st.ok() || st->value("running", true)) return OkStatus();
    std::string status = st->value("status", "");
    LOG_WARN("vmm in {} was left '{}' (a daemon died mid-pause); continuing it", run_dir, status);
    (void)(*qmp)->Execute("migrate_cancel");
    Status last = OkStatus();
    for (int i = 0; i < 50; ++i) {
      auto cont = (*qmp)->Execute("cont");
      if (cont.ok()) return OkStatus();
      last = cont.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return last.WithContext("continue the vmm in " + run_dir + " (left '" + status + "')");
  }

  StatusOr<std::unique_ptr<VmInstance>> Restore(const VmStartRequest& r, const std::string& dir, SnapshotDisk disk,
                                                bool memory) override {
    ASSIGN_OR_RETURN(auto m, ReadSnapshot(dir));
    VmStartRequest req = r;
    if (req.kernel.empty()) req.kernel = m.kernel;
    if (req.initrd.empty()) req.initrd = m.initrd;
    if (req.rootfs.empty()) req.rootfs = m.rootfs;
    VmSpec spec = SpecFor(req);
    RestoreOptions o;
    o.private_disk = disk == SnapshotDisk::kPrivateCopy;
    o.disk_only = !memory;
    RETURN_IF_ERROR(Jail(spec));
    auto vm = QemuVm::Restore(spec, dir, o);
    if (!vm.ok()) {
      (void)VmmUidPool::Release(spec.uid_lease);
      return vm.status();
    }
    return std::unique_ptr<VmInstance>(new QemuInstance(std::move(vm).value()));
  }

 private:
  std::string state_dir_;
  AccelDecision accel_;
  VmmJailOptions jail_;
  VmmUidPool uids_;
  QemuSnapshotStore store_;
};

}  // namespace

StatusOr<std::unique_ptr<Runtime>> NewQemuRuntime(const std::string& state_dir, const VmmJailOptions& jail) {
  for (const char* tool : {"qemu-system-x86_64", "qemu-img"}) {
    if (!FindExecutable(tool).ok()) {
      return FailedPrecondition(std::string(tool) +
                                " is not installed (fix: apt-get install qemu-system-x86 qemu-utils, "
                                "or run scripts/setup)");
    }
  }
  if (jail.enabled) {
    Status st = CheckVmmJail(state_dir, jail);
    if (!st.ok()) {
      return FailedPrecondition(st.message() +
                                " (VMMs are never run as root instead; fix: run airlock as root on a kernel with mount "
                                "namespaces and pivot_root, see `airlock doctor`; for debugging only: --no-vmm-jail)");
    }
  } else {
    LOG_WARN("VMM jail is OFF (--no-vmm-jail): QEMU runs as root with every capability in the host mount namespace");
  }
  return std::unique_ptr<Runtime>(new QemuRuntime(state_dir, ProbeAccelCached(state_dir), jail));
}

Status CheckVmmJail(const std::string& state_dir, const VmmJailOptions& jail) {
  VmmUidPool pool(jail.lease_root, jail.uid_base, jail.uid_count);
  ASSIGN_OR_RETURN(UidLease lease, pool.Acquire("jail-probe-" + std::to_string(::getpid())));
  std::string scratch = state_dir.empty() ? "/tmp" : state_dir + "/run";
  std::error_code ec;
  std::filesystem::create_directories(scratch, ec);
  auto r = ProbeJail("qemu-system-x86_64", lease.uid, scratch);
  (void)VmmUidPool::Release(lease);
  return r.ok() ? OkStatus() : r.status();
}

}  // namespace airlock::qemu
