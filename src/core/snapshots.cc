// Pause and resume of sandboxes (Manager::Pause / Manager::Resume), and their
// crash-safety paths at daemon start (docs/snapshots.md, "Sandbox features").
//
// Pause:  running ─▶ pausing ─▶ snapshot into snapshots/paused/<id>.tmp,
//         rename to <id> (the commit) ─▶ on_saved (registry: paused)
//         ─▶ VMM stopped, network removed ─▶ paused.
// Resume: paused ─▶ resuming ─▶ new network ─▶ VMM restored from <id> (a
//         private copy of its disk) ─▶ agent /health ─▶ /init (time, fresh
//         entropy) ─▶ running ─▶ <id> deleted.
// A failure in pause leaves the sandbox running; in resume, paused.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_util.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/adopted_vm.h"
#include "core/http_client.h"
#include "core/manager.h"
#include "core/sandbox_egress.h"
#include "net/names.h"
#include "net/sandbox_network.h"

namespace airlock {
namespace fs = std::filesystem;

Status Manager::ExportGuestRoot(Sandbox& sb, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("mkdir " + dir + ": " + ec.message());
  if (::chmod(dir.c_str(), 0700) != 0) return ErrnoError("chmod " + dir);
  // What a guest can have written: its memory (gVisor's overlay is in it),
  // its template's disk, and the archive's headers (1 KiB an entry).
  const uint64_t cap = (uint64_t(sb.memory_mib()) + uint64_t(std::max(sb.disk_mib(), 0)) + 256) << 20;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string tar = dir + "/" + kGuestRootChanges;
  Status st = sb.agent_->ExportRootChanges(tar, cap);
  if (!st.ok()) {
    fs::remove(tar, ec);
    return st;
  }
  LOG_INFO("sandbox={} exported its root's changes: {} bytes in {:.0f} ms", sb.id_, fs::file_size(tar, ec), MsSince(t0));
  return OkStatus();
}

StatusOr<bool> Manager::PrepareSaveWithoutMemory(Sandbox& sb, const std::string& dir) {
  ASSIGN_OR_RETURN(Runtime * runtime, RuntimeNamed(sb.runtime_));
  if (runtime->guest_files_in_memory()) {
    RETURN_IF_ERROR(ExportGuestRoot(sb, dir));
    return true;
  }
  // A runtime that cannot drop a snapshot's memory says so before anything
  // is saved (its save would stop the guest for nothing).
  RETURN_IF_ERROR(CheckDropsMemory(*runtime, dir));
  // Only the disk is kept: what the guest has in its page cache must reach
  // the virtual disk first, or the reboot would not see it.
  RETURN_IF_ERROR(SyncGuestFilesystems(sb));
  return false;
}

Status Manager::ImportGuestRoot(Sandbox& sb, const std::string& dir) {
  const std::string tar = dir + "/" + kGuestRootChanges;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(nlohmann::json r, sb.agent_->ImportRootChanges(tar));
  const uint64_t skipped = r.value("skipped", uint64_t{0});
  LOG_INFO("sandbox={} imported its root's changes: {} entries, {} removed, {} bytes, {} skipped in {:.0f} ms", sb.id_,
           r.value("entries", uint64_t{0}), r.value("deleted", uint64_t{0}), r.value("bytes", uint64_t{0}), skipped,
           MsSince(t0));
  if (skipped > 0) {
    sb.AddLog("warning", "resume: " + std::to_string(skipped) + " saved entries could not be restored (first: " +
                             r.value("firstError", std::string()) + ")");
  }
  return OkStatus();
}

Status Manager::SyncGuestFilesystems(Sandbox& sb) {
  ExecRequest sync;
  sync.cmd = "/bin/sync";
  sync.user = "root";
  sync.timeout = std::chrono::seconds(60);
  auto synced = sb.agent_->Exec(sync, {});
  if (!synced.ok()) return synced.status().WithContext("sync guest filesystems");
  if (synced->exit_code != 0) return Internal("guest sync failed: " + synced->status);
  return OkStatus();
}

StatusOr<PauseResult> Manager::Pause(const std::string& id, const PauseOptions& options) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::lock_guard<std::mutex> op(sb->op_mu_);
  SandboxState state = sb->state();
  if (state == SandboxState::kPaused) return AlreadyExists("sandbox " + id + " is already paused");
  RETURN_IF_ERROR(sb->Transition(SandboxState::kPausing));
  VmInstance* vm = nullptr;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    vm = sb->vm_.get();
  }
  const std::string dir = snapshot_dirs_->paused() + "/" + id;
  const std::string tmp = dir + ".tmp";
  auto back_to_running = [&](Status s) -> Status {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    (void)sb->Transition(SandboxState::kRunning);
    LOG_WARN("sandbox={} pause failed, still running: {}", id, s.message());
    return s;
  };
  if (!vm) return back_to_running(FailedPrecondition("sandbox " + id + " has no VMM"));
  std::error_code ec;
  fs::create_directories(snapshot_dirs_->paused(), ec);
  if (ec) return back_to_running(Internal("mkdir " + snapshot_dirs_->paused() + ": " + ec.message()));
  fs::remove_all(tmp, ec);
  fs::remove_all(dir, ec);  // a stale, never-registered pause of this sandbox
  // What the sandbox's runtime cannot do is named in the error (HTTP 501).
  const char* what = options.keep_memory ? "pause" : "pause without memory";
  bool exported = false;
  if (!options.keep_memory) {
    auto prepared = PrepareSaveWithoutMemory(*sb, tmp);
    if (!prepared.ok()) return back_to_running(RuntimeOpStatus(prepared.status(), sb->runtime_, what, "pause " + id));
    exported = *prepared;
  }
  // The save writes every file under a temporary name, the manifest last; the
  // directory is renamed into place only once it is complete.
  auto info = vm->SaveSnapshot(tmp, /*keep_running=*/false, exported ? SnapshotMemory::kNone : SnapshotMemory::kDefault);
  if (!info.ok()) return back_to_running(RuntimeOpStatus(info.status(), sb->runtime_, what, "pause " + id));
  if (!options.keep_memory && !exported) {
    // The filesystem only: the memory image is dropped before the commit
    // (resume boots the kernel on the saved disk). A new save: the store of
    // the sandbox's runtime.
    auto runtime = RuntimeNamed(sb->runtime_);
    Status s = runtime.ok() ? (*runtime)->snapshots().DropMemory(tmp) : runtime.status();
    if (!s.ok()) {
      (void)vm->ContinueGuest();
      return back_to_running(RuntimeOpStatus(s, sb->runtime_, what, "pause " + id));
    }
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp);
    (void)vm->ContinueGuest();
    return back_to_running(s);
  }
  if (Status s = FsyncDir(snapshot_dirs_->paused()); !s.ok()) LOG_WARN("sandbox={} {}", id, s.message());
  sb->SetPauseSnapshot(dir, options.keep_memory);
  // Paused from here on, for the registry and the API: a daemon killed now
  // finds a complete snapshot.
  Persist(*sb, "paused");
  sb->AddLog("info", "sandbox paused");
  if (config_.events.paused) config_.events.paused(*sb);
  if (options.on_saved) {
    if (Status s = options.on_saved(); !s.ok()) LOG_WARN("sandbox={} pause recorded badly: {}", id, s.message());
  }
  if (Status s = sb->StopRuntime(); !s.ok()) LOG_WARN("sandbox={} pause teardown: {}", id, s.message());
  RETURN_IF_ERROR(sb->Transition(SandboxState::kPaused));
  PauseResult r;
  r.snapshot = *info;
  r.total_ms = MsSince(t0);
  LOG_INFO("sandbox={} paused memory_bytes={} disk_bytes={} save_ms={} total_ms={:.0f} keep_memory={}", id,
           info->memory_bytes, info->disk_bytes, info->save_ms, r.total_ms, options.keep_memory);
  return r;
}

StatusOr<ResumeResult> Manager::Resume(const std::string& id, std::chrono::milliseconds ready_timeout,
                                       int64_t ends_at_ms) {
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::lock_guard<std::mutex> op(sb->op_mu_);
  ResumeResult result;
  SandboxState state = sb->state();
  if (state == SandboxState::kRunning) return result;
  RETURN_IF_ERROR(sb->Transition(SandboxState::kResuming));
  // The new TTL before the guest runs: with the old, expired one the reaper
  // would pause an autoPause sandbox again the moment it resumed.
  if (ends_at_ms > 0) (void)sb->SetEndsAt(ends_at_ms, /*extend_only=*/false);
  // The same identity, shape and network policy (kept in the run dir) as
  // before the pause; the machine from its pause snapshot.
  BringUpPlan plan = PlanOf(*sb);
  plan.source = MachineSource::kPausedSandbox;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    plan.snapshot_dir = sb->snapshot_dir_;
    plan.snapshot_memory = sb->memory_snapshot_;
  }
  plan.ready_timeout = ready_timeout;
  plan.what = "resume " + id;
  Status st = plan.snapshot_dir.empty() ? FailedPrecondition("no pause snapshot").WithContext(plan.what) : OkStatus();
  CreateTimings timings;
  if (st.ok()) st = BringUp(*sb, plan, &timings);
  if (!st.ok()) {
    (void)sb->Transition(SandboxState::kPaused);
    LOG_WARN("sandbox={} resume failed, still paused: {}", id, st.message());
    return st;
  }
  // The VM runs on a private copy of the snapshot's disk: the snapshot is no
  // longer needed. Unless it is a checkpoint (a sandbox kept paused on one
  // when a rollback could not be completed after a restart, checkpoints.cc):
  // that stays, and the rollback is now done.
  if (snapshot_dirs_->IsCheckpoint(plan.snapshot_dir)) {
    if (config_.registry) (void)config_.registry->ClearRollbackIntent(id);
  } else if (Status s = snapshot_dirs_->Delete(plan.snapshot_dir, sb->runtime_); !s.ok()) {
    LOG_WARN("sandbox={} delete pause snapshot: {}", id, s.message());
  }
  Persist(*sb, "running");
  sb->AddLog("info", "sandbox running");
  if (config_.events.resumed) config_.events.resumed(*sb);
  result.resumed = true;
  result.total_ms = MsSince(t0);
  LOG_INFO("sandbox={} resumed total_ms={:.0f} memory={}", id, result.total_ms, plan.snapshot_memory);
  return result;
}

Status Manager::DeletePrivateSnapshots(Sandbox& sb) {
  std::error_code ec;
  fs::remove_all(snapshot_dirs_->paused() + "/" + sb.id_ + ".tmp", ec);
  Status checkpoints = snapshot_dirs_->DeleteCheckpointsOf(sb.id_);
  const std::string dir = snapshot_dirs_->paused() + "/" + sb.id_;
  if (!fs::exists(dir, ec)) return checkpoints;
  Status st = snapshot_dirs_->Delete(dir, sb.runtime_);
  return st.ok() ? checkpoints : st;
}

}  // namespace airlock
