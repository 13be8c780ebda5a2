// Checkpoints and rollback of a running sandbox, in place (Manager::
// CreateCheckpoint / ListCheckpoints / DeleteCheckpoint / Rollback;
// docs/snapshots.md "Checkpoints and rollback").
//
//   snapshots/checkpoints/<sandbox id>-<checkpoint id>/   memory, disk.qcow2,
//       manifest.json, checkpoint.json (ids and creation time)
//
// Checkpoint: running ─▶ SaveSnapshot(keep_running) into <dir>.tmp ─▶
//             checkpoint.json ─▶ rename to <dir> (the commit); the sandbox
//             keeps running (stopped for the save only).
// Rollback:   running ─▶ rolling back ─▶ checkpoint read and checked (a
//             failure here leaves the sandbox running, untouched) ─▶ old VMM
//             stopped (network, egress, run dir, token kept) ─▶ bring-up from
//             the checkpoint (MachineSource::kCheckpoint: vmm restored on a
//             private copy of the checkpoint's disk, lease, agent ready, /init
//             with clock + entropy) ─▶ running. A failure after the VMM was
//             stopped leaves the sandbox failed: the error says so.
// The checkpoint is kept (roll back to it again); its disk is copied, never
// layered on, so it can be deleted at any time and rollbacks never lengthen
// the backing chain. Every checkpoint of a sandbox goes when it is killed;
// a daemon start removes uncommitted ones and those of sandboxes that are gone.
//
// A rollback is journaled (Registry::RollbackIntent): "stopping" (checkpoint,
// old VMM pid) before the old VMM is stopped, "restored" (new VMM pid) once
// the new one runs, cleared once the sandbox's row names the new VMM. A
// daemon killed in between is followed by one that completes the rollback
// (RecoverRollback, RedoRollback): it adopts the new VMM when the intent
// says "restored" and it answers; otherwise every VMM of the run dir and
// the network go and the sandbox comes up from the checkpoint again. Where
// that restore fails the sandbox is kept paused on the checkpoint (a resume
// retries it); its checkpoints are never deleted by this recovery.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/file_util.h"
#include "common/clock.h"
#include "common/log.h"
#include "core/adopted_vm.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"
#include "net/names.h"
#include "net/sandbox_network.h"

namespace airlock {
namespace fs = std::filesystem;
namespace {

constexpr char kCheckpointInfoFile[] = "checkpoint.json";

Status WriteCheckpointInfo(const std::string& dir, const CheckpointInfo& info) {
  const std::string path = dir + "/" + kCheckpointInfoFile;
  const std::string text = nlohmann::json{
      {"checkpointID", info.checkpoint_id},
      {"sandboxID", info.sandbox_id},
      {"createdAtMs",
       info.created_at_ms}}.dump();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create " + path);
  Status st;
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd) != 0)
    st = ErrnoError("write " + path);
  ::close(fd);
  return st;
}

int64_t ReadCheckpointCreatedAt(const std::string& dir) {
  std::ifstream f(dir + "/" + kCheckpointInfoFile);
  if (!f) return 0;
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (!j.is_object()) return 0;
  return j.value("createdAtMs", int64_t{0});
}

Status CheckpointNotFound(const std::string& id, const std::string& checkpoint_id) {
  return NotFound("checkpoint " + checkpoint_id + " of sandbox " + id + " not found");
}

// Test hook (tests/integration/checkpoint_test.cc): with
// AIRLOCK_TEST_HOLD_ROLLBACK=<point> in its environment, a rollback that
// reaches <point> logs "test hook: rollback held at <point>" and waits there
// for good, so that a test kills the daemon with SIGKILL at that exact
// moment. Points: "stopping" (intent recorded, old VMM still up),
// "stopped" (old VMM gone, nothing new yet), "restoring" (new VMM up and
// /init done, not recorded anywhere), "restored" (new VMM recorded in the
// intent, the sandbox's row not yet). Never set outside tests.
constexpr char kHoldRollbackEnv[] = "AIRLOCK_TEST_HOLD_ROLLBACK";

bool HoldsAt(std::string_view point) {
  const char* v = std::getenv(kHoldRollbackEnv);
  return v != nullptr && point == v;
}

void HoldForTest(std::string_view point) {
  if (!HoldsAt(point)) return;
  LOG_WARN("test hook: rollback held at {}", point);
  spdlog::default_logger()->flush();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace

StatusOr<std::vector<CheckpointInfo>> Manager::ListCheckpoints(const std::string& id) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(snapshot_dirs_->checkpoints(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    if (tmp || sandbox_id != id) continue;
    auto shape = snapshot_dirs_->Read(e.path().string(), sb->runtime_);
    if (!shape.ok()) continue;  // being deleted, or unusable: not offered
    CheckpointInfo i;
    i.checkpoint_id = checkpoint_id;
    i.sandbox_id = id;
    i.created_at_ms = ReadCheckpointCreatedAt(e.path().string());
    i.memory_bytes = shape->memory_bytes;
    i.disk_bytes = shape->disk_bytes;
    i.dir = e.path().string();
    out.push_back(std::move(i));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return std::tie(a.created_at_ms, a.checkpoint_id) < std::tie(b.created_at_ms, b.checkpoint_id);
  });
  return out;
}

StatusOr<CheckpointInfo> Manager::CreateCheckpoint(const std::string& id) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::lock_guard<std::mutex> op(sb->op_mu_);  // no pause, rollback or kill meanwhile
  if (sb->state() != SandboxState::kRunning) {
    return FailedPrecondition("sandbox " + id + " is " + std::string(SandboxStateName(sb->state())) +
                              "; only a running sandbox can be checkpointed");
  }
  ASSIGN_OR_RETURN(auto existing, ListCheckpoints(id));
  if (static_cast<int>(existing.size()) >= kMaxCheckpoints) {
    return FailedPrecondition("sandbox " + id + " already has " + std::to_string(existing.size()) +
                              " checkpoints, the most allowed; delete one first");
  }
  VmInstance* vm = nullptr;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    vm = sb->vm_.get();
  }
  if (!vm) return FailedPrecondition("sandbox " + id + " has no VMM");
  CheckpointInfo info;
  info.checkpoint_id = kCheckpointPrefix + RandomHex(8);
  info.sandbox_id = id;
  info.created_at_ms = NowUnixMs();
  info.dir = snapshot_dirs_->checkpoints() + "/" + id + "-" + info.checkpoint_id;
  const std::string tmp = info.dir + kCheckpointTmp;
  std::error_code ec;
  fs::create_directories(snapshot_dirs_->checkpoints(), ec);
  if (ec) return Internal("mkdir " + snapshot_dirs_->checkpoints() + ": " + ec.message());
  // The guest is stopped for the save only and continues (a failed save
  // leaves nothing behind and the guest running).
  auto saved = vm->SaveSnapshot(tmp, /*keep_running=*/true);
  if (!saved.ok()) return RuntimeOpStatus(saved.status(), sb->runtime_, "checkpoint", "checkpoint " + id);
  Status st = WriteCheckpointInfo(tmp, info);
  if (st.ok() && ::rename(tmp.c_str(), info.dir.c_str()) != 0) st = ErrnoError("rename " + tmp);
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return st.WithContext("checkpoint " + id);
  }
  if (Status s = FsyncDir(snapshot_dirs_->checkpoints()); !s.ok()) LOG_WARN("sandbox={} {}", id, s.message());
  info.memory_bytes = saved->memory_bytes;
  info.disk_bytes = saved->disk_bytes;
  info.save_ms = static_cast<double>(saved->save_ms);
  LOG_INFO("sandbox={} checkpoint {} created memory_bytes={} disk_bytes={} save_ms={}", id, info.checkpoint_id,
           info.memory_bytes, info.disk_bytes, saved->save_ms);
  return info;
}

Status Manager::DeleteCheckpoint(const std::string& id, const std::string& checkpoint_id) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  if (!ValidCheckpointId(checkpoint_id)) return CheckpointNotFound(id, checkpoint_id);
  std::lock_guard<std::mutex> op(sb->op_mu_);  // not while a rollback reads it
  const std::string dir = snapshot_dirs_->checkpoints() + "/" + id + "-" + checkpoint_id;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return CheckpointNotFound(id, checkpoint_id);
  RETURN_IF_ERROR(snapshot_dirs_->Delete(dir, sb->runtime_));
  LOG_INFO("sandbox={} checkpoint {} deleted", id, checkpoint_id);
  return OkStatus();
}

StatusOr<RollbackResult> Manager::Rollback(const std::string& id, const std::string& checkpoint_id,
                                           std::chrono::milliseconds ready_timeout,
                                           const std::function<void()>& on_running) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  if (!ValidCheckpointId(checkpoint_id)) return CheckpointNotFound(id, checkpoint_id);
  std::lock_guard<std::mutex> op(sb->op_mu_);
  if (sb->state() != SandboxState::kRunning) {
    return FailedPrecondition("sandbox " + id + " is " + std::string(SandboxStateName(sb->state())) +
                              "; only a running sandbox can be rolled back");
  }
  // Everything that can be checked without stopping the sandbox is checked
  // first: a failure here leaves it running as it was.
  const std::string dir = snapshot_dirs_->checkpoints() + "/" + id + "-" + checkpoint_id;
  auto shape = snapshot_dirs_->Read(dir, sb->runtime_);
  if (!shape.ok()) {
    if (shape.status().code() == StatusCode::kNotFound) return CheckpointNotFound(id, checkpoint_id);
    return shape.status().WithContext("rollback " + id + " to " + checkpoint_id);
  }
  if (shape->memory_bytes == 0 || shape->vcpus != sb->vcpus_ || shape->memory_mib != sb->memory_mib_) {
    return FailedPrecondition("checkpoint " + checkpoint_id + " does not fit sandbox " + id + " (" +
                              std::to_string(shape->vcpus) + " vCPUs, " + std::to_string(shape->memory_mib) +
                              " MiB, memory " + std::to_string(shape->memory_bytes) + " B)");
  }
  // The intent, durably, before anything is stopped: a daemon killed from
  // here on is followed by one that completes the rollback (RecoverRollback)
  // instead of taking the sandbox for dead.
  pid_t old_pid = -1;
  {
    std::lock_guard<std::mutex> l(sb->mu_);
    if (sb->vm_) old_pid = sb->vm_->pid();
  }
  if (config_.registry) {
    Status journaled =
        config_.registry->PutRollbackIntent({id, checkpoint_id, kRollbackStopping, old_pid, NowUnixMs()});
    if (!journaled.ok()) return journaled.WithContext("rollback " + id + " to " + checkpoint_id + " (nothing stopped)");
  }
  if (Status s = sb->Transition(SandboxState::kRollingBack); !s.ok()) {
    if (config_.registry) (void)config_.registry->ClearRollbackIntent(id);
    return s;
  }
  HoldForTest("stopping");
  // The old machine goes; its network (netns, IP, tap, egress policy and
  // exposed ports), run dir and identity stay.
  if (sb->agent_) sb->agent_->CancelAll();
  if (Status s = sb->DestroyVm(); !s.ok()) LOG_WARN("sandbox={} rollback: {}", id, s.message());
  HoldForTest("stopped");
  RollbackResult result;
  result.stop_ms = MsSince(t0);
  BringUpPlan plan = PlanOf(*sb);
  plan.source = MachineSource::kCheckpoint;
  plan.snapshot_dir = dir;
  plan.shared_snapshot = sb->shared_snapshot_;
  plan.ready_timeout = ready_timeout;
  plan.what = "rollback " + id + " to " + checkpoint_id;
  if (HoldsAt("restoring")) {
    plan.handover = [](Sandbox&) {
      HoldForTest("restoring");
      return OkStatus();
    };
  }
  CreateTimings timings;
  Status st = BringUp(*sb, plan, &timings);
  if (!st.ok()) {
    (void)sb->Transition(SandboxState::kFailed);
    LOG_ERROR("sandbox={} rollback failed after its VMM was stopped; the sandbox is failed: {}", id, st.message());
    (void)End(id, SandboxOutcome::kRollbackFailed, st.message());  // the caller destroys it
    return Internal("rollback failed after the sandbox's VMM was stopped; sandbox " + id +
                    " is failed and must be killed: " + st.message());
  }
  result.steps = timings.steps;
  result.total_ms = MsSince(t0);
  if (config_.registry) {
    pid_t new_pid = -1;
    {
      std::lock_guard<std::mutex> l(sb->mu_);
      if (sb->vm_) new_pid = sb->vm_->pid();
    }
    if (Status s = config_.registry->PutRollbackIntent({id, checkpoint_id, kRollbackRestored, new_pid, NowUnixMs()});
        !s.ok()) {
      LOG_WARN("sandbox={} rollback: {}", id, s.message());
    }
  }
  HoldForTest("restored");
  Persist(*sb, "running");  // its new VMM's pid
  if (config_.registry) {
    if (Status s = config_.registry->ClearRollbackIntent(id); !s.ok())
      LOG_WARN("sandbox={} rollback: {}", id, s.message());
  }
  if (on_running) on_running();
  LOG_INFO("sandbox={} rolled back to {} stop_ms={:.0f} total_ms={:.0f}", id, checkpoint_id, result.stop_ms,
           result.total_ms);
  return result;
}

}  // namespace airlock
