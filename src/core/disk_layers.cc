// Disk layers of custom template builds (Manager::SaveDiskLayer,
// CreateOnDiskLayer; docs/templates.md "Layers"):
//
//   snapshots/layers/<name>/   disk.qcow2 + manifest.json (memory dropped)
//
// A layer is a runtime snapshot whose memory was dropped: its disk is a copy
// of the build sandbox's overlay (all it wrote since it started), backed by
// what the sandbox started on (the base image's rootfs, its template
// snapshot's disk, or the private copy of an earlier layer's). Layers never
// change once committed; the template store's index says which are live.
// A layer is read, exported and deleted by the runtime that wrote it; a
// sandbox on a layer runs on that runtime (builds use qemu: templates/builder.cc).
#include <filesystem>

#include "common/log.h"
#include "core/manager.h"
#include "runtime/registry.h"

namespace airlock {
namespace fs = std::filesystem;

StatusOr<VmSnapshotInfo> Manager::SaveDiskLayer(const std::string& id, const std::string& dir) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  const std::string tmp = dir + ".tmp";
  std::lock_guard<std::mutex> op(sb->op_mu_);
  if (sb->state() != SandboxState::kRunning) return FailedPrecondition("sandbox " + id + " is not running");
  VmInstance* vm = nullptr;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    vm = sb->vm_.get();
  }
  if (!vm) return FailedPrecondition("sandbox " + id + " has no VMM");
  std::error_code ec;
  fs::create_directories(fs::path(dir).parent_path(), ec);
  if (ec) return Internal("mkdir " + fs::path(dir).parent_path().string() + ": " + ec.message());
  // A new save: the store of the sandbox's runtime, which must be able to
  // drop the memory (asked before the save).
  ASSIGN_OR_RETURN(Runtime * runtime, RuntimeNamed(sb->runtime_));
  RETURN_IF_ERROR(RuntimeOpStatus(CheckDropsMemory(*runtime, tmp), sb->runtime_, "saving a disk layer"));
  auto saved = vm->SaveSnapshot(tmp, /*keep_running=*/true);
  if (!saved.ok()) return RuntimeOpStatus(saved.status(), sb->runtime_, "saving a disk layer", "layer of " + id);
  Status st =
      RuntimeOpStatus(runtime->snapshots().DropMemory(tmp), sb->runtime_, "saving a disk layer", "layer of " + id);
  if (st.ok() && ::rename(tmp.c_str(), dir.c_str()) != 0)
    st = ErrnoError("rename " + tmp).WithContext("layer of " + id);
  if (!st.ok()) {
    (void)runtime->snapshots().Delete(tmp);
    return st;
  }
  VmSnapshotInfo info = *saved;
  info.memory_bytes = 0;
  return info;
}

StatusOr<std::shared_ptr<Sandbox>> Manager::CreateOnDiskLayer(const std::string& dir, const CreateOptions& options) {
  ASSIGN_OR_RETURN(SnapshotShape shape, snapshot_dirs_->ReadDiskLayer(dir));
  // It boots on the runtime that wrote the layer, and no other.
  const std::string runtime = RuntimeOfSnapshot(dir);
  if (!options.runtime.empty() && options.runtime != runtime) {
    return InvalidArgument("layer " + fs::path(dir).filename().string() + " was written by the " + runtime +
                           " runtime; it cannot boot on " + options.runtime);
  }
  BringUpPlan plan;
  plan.source = MachineSource::kDiskLayer;
  plan.runtime = runtime;
  plan.snapshot_dir = dir;
  plan.template_name = options.template_name;
  plan.vcpus = shape.vcpus;
  plan.memory_mib = shape.memory_mib;
  plan.detach = options.detach;
  plan.env_vars = options.env_vars;
  plan.attributes = options.attributes;
  plan.egress_policy = options.egress_policy;
  plan.egress_limits = options.egress_limits;
  plan.timeout = options.timeout;
  plan.handover = options.handover;
  plan.ready_timeout = options.ready_timeout;
  plan.what = "build sandbox on layer " + fs::path(dir).filename().string();
  return StartSandbox(std::move(plan));
}

}  // namespace airlock
