#include "control/sandbox_controller.h"

#include <sys/statvfs.h>

#include <chrono>

#include "common/clock.h"
#include "common/log.h"
#include "core/registry.h"
#include "templates/template_store.h"

namespace airlock::control {

using nlohmann::json;

SandboxController::SandboxController(Deps deps, Hooks hooks, boost::asio::io_context& io)
    : d_(std::move(deps)),
      hooks_(std::move(hooks)),
      admission_tick_(io, std::chrono::milliseconds(100),
                      [this] { (void)d_.admission.Pump(Admission::Clock::now()); }) {}

Status SandboxController::CheckDisk() const {
  const int64_t need = d_.disk_reserve_mib + d_.disk_per_create_mib;
  for (const std::string& dir : {d_.state_dir, d_.db_dir}) {
    struct statvfs vfs;
    if (::statvfs(dir.c_str(), &vfs) != 0) return ErrnoError("statvfs " + dir);
    int64_t free_mib = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
    if (free_mib < need) {
      return ResourceExhausted(
          "not enough free disk for another sandbox: " + std::to_string(free_mib) + " MiB free on the filesystem of " +
          dir + ", " + std::to_string(d_.disk_reserve_mib) + " MiB kept for the registry and audit trail plus " +
          std::to_string(d_.disk_per_create_mib) + " MiB per create (serve --disk-reserve, --disk-per-create)");
    }
  }
  return OkStatus();
}

void SandboxController::Record(const std::string& action, const std::string& id, json record,
                               const std::string& log) {
  record["action"] = action;
  if (!id.empty() && !record.contains("sandbox")) record["sandbox"] = id;
  if (hooks_.audit) hooks_.audit(std::move(record));
  if (!log.empty() && !id.empty()) {
    if (auto sb = d_.manager.Get(id)) sb->AddLog("info", log);
  }
}

std::string CreateErrorCode(const CreateOutcome& out, int http_status) {
  if (http_status < 500) return "";
  if (http_status == 503 || http_status == 507 || out.status.code() == StatusCode::kResourceExhausted)
    return "sandbox_capacity_unavailable";
  switch (out.status.code()) {
    case StatusCode::kInternal:
    case StatusCode::kUnknown:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kUnavailable:
    case StatusCode::kAborted:
      return "sandbox_create_failed";
    default:
      return "internal_server_error";
  }
}

void SandboxController::Create(CreateAction action, std::function<void(CreateOutcome)> done) {
  if (Status disk = CheckDisk(); !disk.ok()) {
    d_.metrics.AdmissionRejected(507);
    LOG_WARN("create refused (507): {}", disk.message());
    return done({nullptr, disk, disk.code() == StatusCode::kResourceExhausted ? 507 : 0, 0});
  }
  const std::string key_id = action.caller.key_id;
  const int memory_mib = action.options.memory_mib;
  d_.admission.Request(key_id, memory_mib, Admission::Clock::now(),
                       [this, action = std::move(action), done = std::move(done)](AdmissionDecision d) {
                         if (!d.granted) {
                           if (d.reason.empty())
                             d_.metrics.AdmissionRejected(d.http_status);
                           else
                             d_.metrics.AdmissionRejected(d.reason);
                           LOG_INFO("create refused ({}): {}", d.http_status, d.message);
                           return done({nullptr, Status(StatusCode::kResourceExhausted, d.message), d.http_status,
                                        d.retry_after_s});
                         }
                         d_.metrics.CreateStarted();
                         hooks_.run_blocking(
                             [this, action, done, t = d.ticket] { done(CreateAdmitted(action, t)); });
                       });
}

CreateOutcome SandboxController::CreateAdmitted(const CreateAction& action, uint64_t ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  const CreateOptions& opts = action.options;
  // A front's reservation: this node's, unused, for this very create.
  int64_t reservation = 0;
  if (!action.reservation_token.empty() && hooks_.claim_reservation) {
    auto claimed = hooks_.claim_reservation(action.reservation_token, action.reservation_digest);
    if (!claimed.ok()) {
      AdmissionDone(ticket, "", 0);
      LOG_WARN("create refused: {}", claimed.status().message());
      Record("sandbox.create_failed", "", {{"error", claimed.status().message()}});
      return {nullptr, claimed.status(), claimed.status().code() == StatusCode::kPermissionDenied ? 403 : 503, 0};
    }
    reservation = *claimed;
  }
  auto release = [&] {
    if (reservation && hooks_.release_reservation) hooks_.release_reservation(reservation);
  };
  CreateOptions run_opts = opts;  // + secret env vars, never persisted
  auto attached = d_.secrets.Attach(action.secrets, action.caller, &run_opts);
  if (!attached.ok()) {
    AdmissionDone(ticket, "", 0);
    release();
    return {nullptr, attached.status()};
  }
  // The bring-up's last step: the sandbox's CA (when it has secrets to
  // broker) and its owners row; without them it is not handed out.
  run_opts.handover = [this, &attached, egress = run_opts.egress_policy, reservation](Sandbox& sb) -> Status {
    RETURN_IF_ERROR(d_.secrets.InstallSandboxCa(sb, egress, &attached.value()));
    RETURN_IF_ERROR(d_.registry.SetOwner(OwnedKind::kSandbox, sb.id(), sb.attributes().owner_team));
    if (!hooks_.record_in_cluster) return OkStatus();
    return hooks_.record_in_cluster(sb.id(), reservation).WithContext("cluster registry");
  };
  auto sb = d_.manager.Create(run_opts);
  if (!sb.ok()) {
    LOG_WARN("create failed: {}", sb.status().message());
    Record("sandbox.create_failed", "", {{"error", sb.status().message()}});
    AdmissionDone(ticket, "", 0);
    release();
    return {nullptr, sb.status()};
  }
  const std::string id = (*sb)->id();
  if (!action.template_id.empty() && d_.template_store)
    (void)d_.template_store->CountSpawn(action.template_id);  // E2B's spawnCount
  d_.secrets.Commit(id, std::move(attached).value(), action.caller.key_id);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  AdmissionDone(ticket, id, ms / 1000.0);
  const int ttl = static_cast<int>(opts.timeout.count());
  LOG_INFO("sandbox={} created total_ms={:.0f} ttl_s={}", id, ms, ttl);
  if (!(*sb)->timings().from_snapshot)
    EnsureTemplateSnapshot(opts.template_name, opts.vcpus, opts.memory_mib, (*sb)->runtime());
  Record("sandbox.created", id,
         {{"template", opts.template_name},
          {"runtime", (*sb)->runtime()},
          {"vcpus", opts.vcpus},
          {"memory_mib", opts.memory_mib},
          {"ttl_s", ttl},
          {"create_ms", static_cast<int64_t>(ms)}});
  return {*sb, OkStatus()};
}

void SandboxController::AdmissionDone(uint64_t ticket, const std::string& sandbox_id, double seconds) {
  if (sandbox_id.empty())
    d_.metrics.CreateFailed();
  else
    d_.metrics.CreateSucceeded(seconds);
  d_.admission.CreateDone(ticket, sandbox_id, Admission::Clock::now());
}

Status SandboxController::Kill(const std::string& id) {
  if (!d_.manager.Visible(id)) return NotFound("sandbox " + id + " not found");
  RETURN_IF_ERROR(d_.manager.End(id, SandboxOutcome::kKilled));
  LOG_INFO("sandbox={} kill requested", id);
  return OkStatus();
}

void SandboxController::DestroyKilled(const std::string& id) {
  Status st = d_.manager.Destroy(id);  // the Manager's events: secrets, audit, admission
  if (!st.ok() && st.code() != StatusCode::kNotFound) LOG_WARN("sandbox={} destroy: {}", id, st.message());
}

Status SandboxController::SetTimeout(const std::string& id, int64_t ends_at_ms, int64_t timeout_s) {
  // As E2B (orchestrator KeepAliveFor): only a running sandbox's timeout is
  // set. Being paused: 409; paused: 404, which the SDK before 2.1 reads as
  // "resume it" in Sandbox.connect (it sets the timeout first).
  if (auto sb = d_.manager.Visible(id)) {
    if (sb->state() == SandboxState::kPausing) {
      return FailedPrecondition("sandbox " + id + " is being paused");
    }
    if (sb->api_state() == "paused") return NotFound("sandbox " + id + " is paused (connect resumes it)");
  }
  auto set = d_.manager.SetEndsAt(id, ends_at_ms);  // and the registry
  if (!set.ok()) return set.status();
  if (auto sb = d_.manager.Get(id)) sb->AddLog("info", "timeout set to " + std::to_string(timeout_s) + " s");
  return OkStatus();
}

Status SandboxController::Refresh(const std::string& id, int64_t ends_at_ms, int64_t duration_s) {
  auto sb = d_.manager.Visible(id);
  if (!sb || sb->api_state() == "paused") return NotFound("sandbox " + id + " is not running");
  auto set = d_.manager.SetEndsAt(id, ends_at_ms, /*extend_only=*/true);
  if (!set.ok()) return set.status();
  sb->AddLog("info", "refreshed for " + std::to_string(duration_s) + " s");
  return OkStatus();
}

ConnectOutcome SandboxController::Connect(const std::string& id, int64_t ends_at_ms) {
  auto sb = d_.manager.Visible(id);
  if (!sb) return {};
  if (sb->api_state() != "paused") {
    // A running sandbox's TTL is only ever extended (spec §1.5.6).
    auto set = d_.manager.SetEndsAt(id, ends_at_ms, /*extend_only=*/true);
    if (!set.ok()) return {};
    return {d_.manager.Visible(id), false, OkStatus()};
  }
  // Paused, or being paused: Resume waits for a pause in progress to finish
  // (the sandbox's operation lock), then resumes, as E2B's connect does. The
  // registry and the TTL (a resumed sandbox's starts anew, before its guest
  // runs) are the Manager's.
  auto r = d_.manager.Resume(id, std::chrono::seconds(60), ends_at_ms);
  if (!r.ok()) {
    LOG_WARN("sandbox={} resume: {}", id, r.status().message());
    return {nullptr, false, r.status()};
  }
  // Not resumed: the pause had failed and it ran on; its TTL only extends.
  if (!r->resumed) (void)d_.manager.SetEndsAt(id, ends_at_ms, /*extend_only=*/true);
  auto now = d_.manager.Visible(id);
  if (!now) return {};
  now->AddLog("info", r->resumed ? "resumed in " + std::to_string(static_cast<int>(r->total_ms)) + " ms" : "connected");
  return {now, r->resumed, OkStatus()};
}

StatusOr<PauseResult> SandboxController::Pause(const std::string& id, const std::string& team,
                                               const PauseOptions& options) {
  if (hooks_.check_team_disk) {
    if (Status budget = hooks_.check_team_disk(team); !budget.ok())
      return Status(StatusCode::kResourceExhausted, budget.message());
  }
  auto r = d_.manager.Pause(id, options);
  if (hooks_.disk_changed) hooks_.disk_changed();
  auto sb = d_.manager.Get(id);
  if (!r.ok()) {
    LOG_WARN("sandbox={} pause: {}", id, r.status().message());
    // The SDK reads a 409 as "already paused" (false): the sandbox's log says why.
    if (sb) sb->AddLog("warn", "pause failed, still running: " + r.status().message());
    return r.status();
  }
  if (sb) {
    sb->AddLog("info", "paused in " + std::to_string(static_cast<int>(r->total_ms)) + " ms (memory " +
                           std::to_string(r->snapshot.memory_bytes) + " B, disk " +
                           std::to_string(r->snapshot.disk_bytes) + " B)");
  }
  return r;
}

Status SandboxController::AdmitFork(const Sandbox& parent, int count) {
  // The children are admitted by memory like creates (docs/limits.md), all at once.
  std::string reason;
  if (std::string m = d_.admission.CheckMemory(count * parent.memory_mib(), &reason); !m.empty()) {
    d_.metrics.AdmissionRejected(reason);
    LOG_INFO("fork of sandbox={} refused (503): {}", parent.id(), m);
    return Status(StatusCode::kUnavailable, m);
  }
  return OkStatus();
}

StatusOr<std::vector<StatusOr<std::shared_ptr<Sandbox>>>> SandboxController::Fork(const std::string& id, int count,
                                                                                     int ttl_s, bool memory,
                                                                                     const std::string& key_id) {
  ForkOptions fo;
  fo.timeout = std::chrono::seconds(ttl_s);
  fo.keep_memory = memory;
  // Each child's last bring-up step: the parent's secrets (same
  // placeholders, already in the child's memory) with a CA of the
  // child's own, and its owners row (its parent's team).
  fo.handover = [this, id, key_id](Sandbox& child) -> Status {
    RETURN_IF_ERROR(d_.secrets.Inherit(id, child, key_id).WithContext("fork child secrets"));
    RETURN_IF_ERROR(d_.registry.SetOwner(OwnedKind::kSandbox, child.id(), child.attributes().owner_team)
                        .WithContext("fork child owner"));
    if (!hooks_.record_in_cluster) return OkStatus();
    return hooks_.record_in_cluster(child.id(), kForkChild).WithContext("cluster registry");
  };
  ASSIGN_OR_RETURN(auto children, d_.manager.Fork(id, count, fo));
  for (auto& child : children) {
    if (!child.ok()) continue;
    // Counted by admission from now on; one that already ended is released again.
    d_.admission.Adopt((*child)->id(), key_id, (*child)->memory_mib());
    if (!d_.manager.Visible((*child)->id())) Released((*child)->id());
  }
  if (auto sb = d_.manager.Get(id)) sb->AddLog("info", "forked " + std::to_string(count) + " time(s)");
  return children;
}

namespace {

// A checkpoint writes up to the guest's RAM (the memory stream, zero pages
// excepted) plus its disk layer: refused (507) unless that much is free
// beyond the reserve kept for the registry and audit trail.
Status CheckpointDiskCheck(const std::string& state_dir, int64_t reserve_mib, int64_t memory_mib) {
  struct statvfs vfs;
  if (::statvfs(state_dir.c_str(), &vfs) != 0) return ErrnoError("statvfs " + state_dir);
  const int64_t free_mib = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize) >> 20;
  if (free_mib >= reserve_mib + memory_mib) return OkStatus();
  return ResourceExhausted("not enough free disk for a checkpoint: " + std::to_string(free_mib) +
                           " MiB free on the "
                           "filesystem of " +
                           state_dir + ", " + std::to_string(reserve_mib) +
                           " MiB kept for the registry and audit trail (serve --disk-reserve) plus up to " +
                           std::to_string(memory_mib) + " MiB for the checkpoint (the guest's memory)");
}

}  // namespace

StatusOr<CheckpointInfo> SandboxController::Checkpoint(const std::string& id) {
  int memory_mib = 0;
  std::string team;
  if (auto sb = d_.manager.Visible(id)) {
    memory_mib = sb->memory_mib();
    team = sb->attributes().owner_team;
  }
  if (hooks_.check_team_disk) RETURN_IF_ERROR(hooks_.check_team_disk(team));
  if (Status disk = CheckpointDiskCheck(d_.state_dir, d_.disk_reserve_mib, memory_mib); !disk.ok()) {
    LOG_WARN("sandbox={} checkpoint refused: {}", id, disk.message());
    return disk;
  }
  auto info = d_.manager.CreateCheckpoint(id);
  if (!info.ok()) {
    LOG_WARN("sandbox={} checkpoint: {}", id, info.status().message());
    return info.status();
  }
  d_.metrics.Checkpointed();
  if (hooks_.disk_changed) hooks_.disk_changed();
  Record("sandbox.checkpointed", id,
         {{"checkpoint", info->checkpoint_id},
          {"memory_bytes", info->memory_bytes},
          {"disk_bytes", info->disk_bytes},
          {"save_ms", info->save_ms}},
         "checkpoint " + info->checkpoint_id + " created in " + std::to_string(static_cast<int>(info->save_ms)) +
             " ms (memory " + std::to_string(info->memory_bytes) + " B, disk " + std::to_string(info->disk_bytes) +
             " B)");
  return info;
}

Status SandboxController::DeleteCheckpoint(const std::string& id, const std::string& checkpoint_id) {
  RETURN_IF_ERROR(d_.manager.DeleteCheckpoint(id, checkpoint_id));
  if (auto sb = d_.manager.Get(id)) sb->AddLog("info", "checkpoint " + checkpoint_id + " deleted");
  return OkStatus();
}

StatusOr<RollbackResult> SandboxController::Rollback(const std::string& id, const std::string& checkpoint_id,
                                                     std::function<void()> on_running) {
  auto r = d_.manager.Rollback(id, checkpoint_id, std::chrono::seconds(60), std::move(on_running));
  if (!r.ok()) {
    Status st = r.status();
    LOG_WARN("sandbox={} rollback to {}: {}", id, checkpoint_id, st.message());
    auto sb = d_.manager.Get(id);
    if (sb && sb->state() == SandboxState::kFailed) {
      // Its old VMM is gone and the checkpoint did not come up: the
      // sandbox is lost, and killed like one whose VMM died.
      d_.metrics.RollbackLost();
      Record("sandbox.rollback_failed", id, {{"checkpoint", checkpoint_id}, {"lost", true}, {"error", st.message()}});
      // Its end (rollback_failed) is decided by the Manager.
      hooks_.run_blocking([this, id] { (void)d_.manager.Destroy(id); });
    }
    return st;
  }
  d_.metrics.RolledBack();
  Record("sandbox.rolled_back", id, {{"checkpoint", checkpoint_id}, {"rollback_ms", r->total_ms}},
         "rolled back to checkpoint " + checkpoint_id + " in " + std::to_string(static_cast<int>(r->total_ms)) +
             " ms");
  return r;
}

void SandboxController::EnsureTemplateSnapshot(const std::string& template_name, int vcpus, int memory_mib,
                                               const std::string& runtime) {
  if (!d_.template_snapshots) return;
  hooks_.run_blocking([this, template_name, vcpus, memory_mib, runtime] {
    Status st = d_.manager.template_snapshots().Ensure(template_name, vcpus, memory_mib, runtime);
    if (st.code() == StatusCode::kUnimplemented) {
      // A runtime without snapshots: its sandboxes boot every time.
      LOG_DEBUG("template={} snapshot: {}", template_name, st.message());
    } else if (!st.ok()) {
      LOG_WARN("template={} snapshot: {}", template_name, st.message());
    }
  });
}

void SandboxController::Released(const std::string& id) { d_.admission.SandboxGone(id, Admission::Clock::now()); }

}  // namespace airlock::control
