#include "control/sandbox_controller.h"

#include <chrono>

#include "common/clock.h"
#include "common/log.h"
#include "core/registry.h"
#include "templates/template_store.h"

namespace airlock::control {

using nlohmann::json;

void SandboxController::Record(const std::string& action, const std::string& id, json record,
                               const std::string& log) {
  record["action"] = action;
  if (!id.empty() && !record.contains("sandbox")) record["sandbox"] = id;
  if (hooks_.audit) hooks_.audit(std::move(record));
  if (!log.empty() && !id.empty()) {
    if (auto sb = d_.manager.Get(id)) sb->AddLog("info", log);
  }
}

void SandboxController::Create(CreateAction action, std::function<void(CreateOutcome)> done) {
  if (Status disk = hooks_.check_disk ? hooks_.check_disk() : OkStatus(); !disk.ok()) {
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
  CreateOptions run_opts = opts;  // + secret env vars, never persisted
  auto attached = d_.secrets.Attach(action.secrets, action.caller, &run_opts);
  if (!attached.ok()) {
    AdmissionDone(ticket, "", 0);
    return {nullptr, attached.status()};
  }
  // The bring-up's last step: the sandbox's CA (when it has secrets to
  // broker) and its owners row; without them it is not handed out.
  run_opts.handover = [this, &attached, egress = run_opts.egress_policy,
                       reserved = action.front_reserved](Sandbox& sb) -> Status {
    RETURN_IF_ERROR(d_.secrets.InstallSandboxCa(sb, egress, &attached.value()));
    RETURN_IF_ERROR(d_.registry.SetOwner(OwnedKind::kSandbox, sb.id(), sb.attributes().owner_team));
    if (!hooks_.record_in_cluster) return OkStatus();
    return hooks_.record_in_cluster(sb.id(), reserved).WithContext("cluster registry");
  };
  auto sb = d_.manager.Create(run_opts);
  if (!sb.ok()) {
    LOG_WARN("create failed: {}", sb.status().message());
    Record("sandbox.create_failed", "", {{"error", sb.status().message()}});
    AdmissionDone(ticket, "", 0);
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
  if (!(*sb)->timings().from_snapshot && hooks_.ensure_template_snapshot)
    hooks_.ensure_template_snapshot(opts.template_name, opts.vcpus, opts.memory_mib, (*sb)->runtime());
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
  auto set = d_.manager.SetEndsAt(id, ends_at_ms);  // and the registry
  if (!set.ok()) return set.status();
  if (auto sb = d_.manager.Get(id)) sb->AddLog("info", "timeout set to " + std::to_string(timeout_s) + " s");
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
  // The registry and the TTL (a resumed sandbox's starts anew) are the Manager's.
  auto r = d_.manager.Resume(id, std::chrono::seconds(60), ends_at_ms);
  if (!r.ok()) {
    LOG_WARN("sandbox={} resume: {}", id, r.status().message());
    return {nullptr, false, r.status()};
  }
  if (!r->resumed) (void)d_.manager.SetEndsAt(id, ends_at_ms);
  auto now = d_.manager.Visible(id);
  if (!now) return {};
  now->AddLog("info", r->resumed ? "resumed in " + std::to_string(static_cast<int>(r->total_ms)) + " ms" : "connected");
  return {now, r->resumed, OkStatus()};
}

}  // namespace airlock::control
