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
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "common/log.h"
#include "core/manager.h"
#include "core/registry.h"
#include "core/sandbox_egress.h"

namespace airlock {
namespace fs = std::filesystem;
namespace {

constexpr char kCheckpointInfoFile[] = "checkpoint.json";
constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kCheckpointTmp[] = ".tmp";

double CkptMsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// "ckpt-" and 16 lowercase hex digits.
bool ValidCheckpointId(const std::string& s) {
  if (s.size() != 5 + 16 || s.rfind(kCheckpointPrefix, 0) != 0) return false;
  return std::all_of(s.begin() + 5, s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The sandbox and checkpoint ids of a checkpoints/ entry name
// ("<sandbox id>-ckpt-<hex>", perhaps + ".tmp"); false for anything else.
bool ParseCheckpointEntry(std::string name, std::string* sandbox_id, std::string* checkpoint_id, bool* tmp) {
  *tmp = name.size() > 4 && name.compare(name.size() - 4, 4, kCheckpointTmp) == 0;
  if (*tmp) name.resize(name.size() - 4);
  size_t at = name.rfind(std::string("-") + kCheckpointPrefix);
  if (at == std::string::npos || at == 0) return false;
  *sandbox_id = name.substr(0, at);
  *checkpoint_id = name.substr(at + 1);
  return ValidCheckpointId(*checkpoint_id);
}

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

}  // namespace

StatusOr<std::vector<CheckpointInfo>> Manager::ListCheckpoints(const std::string& id) {
  std::shared_ptr<Sandbox> sb = Get(id);
  if (!sb) return NotFound("sandbox " + id + " not found");
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints_dir(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    if (tmp || sandbox_id != id) continue;
    auto shape = ReadSnapshot(e.path().string(), sb->runtime_);
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
  info.dir = checkpoints_dir() + "/" + id + "-" + info.checkpoint_id;
  const std::string tmp = info.dir + kCheckpointTmp;
  std::error_code ec;
  fs::create_directories(checkpoints_dir(), ec);
  if (ec) return Internal("mkdir " + checkpoints_dir() + ": " + ec.message());
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
  if (Status s = FsyncDir(checkpoints_dir()); !s.ok()) LOG_WARN("sandbox={} {}", id, s.message());
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
  const std::string dir = checkpoints_dir() + "/" + id + "-" + checkpoint_id;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return CheckpointNotFound(id, checkpoint_id);
  RETURN_IF_ERROR(DeleteSnapshot(dir, sb->runtime_));
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
  const std::string dir = checkpoints_dir() + "/" + id + "-" + checkpoint_id;
  auto shape = ReadSnapshot(dir, sb->runtime_);
  if (!shape.ok()) {
    if (shape.status().code() == StatusCode::kNotFound) return CheckpointNotFound(id, checkpoint_id);
    return shape.status().WithContext("rollback " + id + " to " + checkpoint_id);
  }
  if (shape->memory_bytes == 0 || shape->vcpus != sb->vcpus_ || shape->memory_mib != sb->memory_mib_) {
    return FailedPrecondition("checkpoint " + checkpoint_id + " does not fit sandbox " + id + " (" +
                              std::to_string(shape->vcpus) + " vCPUs, " + std::to_string(shape->memory_mib) +
                              " MiB, memory " + std::to_string(shape->memory_bytes) + " B)");
  }
  RETURN_IF_ERROR(sb->Transition(SandboxState::kRollingBack));
  // The old machine goes; its network (netns, IP, tap, egress policy and
  // exposed ports), run dir and identity stay.
  if (sb->agent_) sb->agent_->CancelAll();
  if (Status s = sb->DestroyVm(); !s.ok()) LOG_WARN("sandbox={} rollback: {}", id, s.message());
  RollbackResult result;
  result.stop_ms = CkptMsSince(t0);
  BringUpPlan plan = PlanOf(*sb);
  plan.source = MachineSource::kCheckpoint;
  plan.snapshot_dir = dir;
  plan.shared_snapshot = sb->shared_snapshot_;
  plan.ready_timeout = ready_timeout;
  plan.what = "rollback " + id + " to " + checkpoint_id;
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
  result.total_ms = CkptMsSince(t0);
  Persist(*sb, "running");  // its new VMM's pid
  if (on_running) on_running();
  LOG_INFO("sandbox={} rolled back to {} stop_ms={:.0f} total_ms={:.0f}", id, checkpoint_id, result.stop_ms,
           result.total_ms);
  return result;
}

Status Manager::DeleteCheckpointsOf(const std::string& id) {
  Status first;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints_dir(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    if (sandbox_id != id) continue;
    Status st = DeleteSnapshot(e.path().string());
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

void Manager::SweepCheckpoints() {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(checkpoints_dir(), ec)) {
    std::string sandbox_id, checkpoint_id;
    bool tmp = false;
    if (!ParseCheckpointEntry(e.path().filename().string(), &sandbox_id, &checkpoint_id, &tmp)) continue;
    std::error_code run_ec;
    const bool gone = !fs::exists(config_.state_dir + "/run/" + sandbox_id, run_ec);
    bool ours = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      ours = sandboxes_.count(sandbox_id) > 0;
    }
    if (tmp) {
      // A save a daemon died in: ours (nothing of ours is saving while we
      // start), of a sandbox that is gone, or older than any save.
      std::error_code age_ec;
      auto age = fs::file_time_type::clock::now() - fs::last_write_time(e.path(), age_ec);
      if (!(ours || gone || (!age_ec && age > std::chrono::minutes(10)))) continue;
      LOG_WARN("removing uncommitted checkpoint {}", e.path().string());
      fs::remove_all(e.path(), ec);
    } else if (gone) {
      LOG_INFO("removing checkpoint {} of sandbox {}, which is gone", checkpoint_id, sandbox_id);
      if (Status st = DeleteSnapshot(e.path().string()); !st.ok()) LOG_WARN("{}", st.message());
    }
  }
}

}  // namespace airlock
