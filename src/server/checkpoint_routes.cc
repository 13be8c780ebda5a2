// Checkpoint and rollback routes of the control plane, an airlock extension
// of E2B's API (docs/snapshots.md "Checkpoints and rollback"):
//   POST   /sandboxes/{id}/checkpoints        201 {checkpoint}; 404; 409 not
//          running, or already kMaxCheckpoints; 507 disk full (it keeps running)
//   GET    /sandboxes/{id}/checkpoints        200 [{checkpoint}] oldest first
//   DELETE /sandboxes/{id}/checkpoints/{cid}  204; 404
//   POST   /sandboxes/{id}/rollback {"checkpointID"}  200 {sandbox +
//          checkpointID, rollbackMs}; 400; 404 (sandbox or checkpoint); 409 not
//          running; 500 when the restore failed after the old VMM was stopped
//          (the sandbox is then killed, and the error says so)
// {checkpoint} = {"checkpointID","sandboxID","createdAt","memoryBytes","diskBytes"}
// (+ "saveMs" when created). Ownership is RouteControl's (another team's
// sandbox is 404 before this runs); the work runs on the worker pool, and
// Manager serialises it with pause, resume and kill of the same sandbox.
#include <sys/statvfs.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/log.h"
#include "server/http_status.h"
#include "server/requests/checkpoint.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

json CheckpointJson(const CheckpointInfo& i) {
  return json{{"checkpointID", i.checkpoint_id},
              {"sandboxID", i.sandbox_id},
              {"createdAt", FormatRfc3339Ms(i.created_at_ms)},
              {"memoryBytes", i.memory_bytes},
              {"diskBytes", i.disk_bytes}};
}

void RespondStatus(const std::shared_ptr<HttpConn>& c, const Status& st, HttpStatusContext ctx) {
  int code = HttpStatusFor(st, ctx);
  asio::post(c->executor(), [c, code, st] { c->RespondError(code, st.message()); });
}

}  // namespace

void Server::RouteCheckpoints(std::shared_ptr<HttpConn> c, RouteId route, const std::vector<std::string>& p) {
  if (!Visible(p[0])) return RespondNoSandbox(c, p[0]);
  switch (route) {
    case RouteId::kCreateCheckpoint: return CreateCheckpoint(c, p[0]);
    case RouteId::kListCheckpoints: return ListCheckpoints(c, p[0]);
    case RouteId::kDeleteCheckpoint: return DeleteCheckpoint(c, p[0], p[1]);
    case RouteId::kRollback: return RollbackSandbox(c, p[0]);
    default: return c->RespondError(404, "no route for " + c->method_string() + " " + c->path());
  }
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

void Server::CreateCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id) {
  // No fields; a body, if sent, must still be a JSON object.
  ReadJson(c, [this, c, id](json) {
    asio::post(*workers_, [this, c, id] {
      int memory_mib = 0;
      std::string team;
      if (auto sb = Visible(id)) {
        memory_mib = sb->memory_mib();
        team = sb->attributes().owner_team;
      }
      if (Status budget = CheckTeamDisk(team); !budget.ok()) return RespondStatus(c, budget, HttpStatusContext::kDisk);
      if (Status disk = CheckpointDiskCheck(config_.manager.state_dir, config_.disk_reserve_mib, memory_mib);
          !disk.ok()) {
        LOG_WARN("sandbox={} checkpoint refused: {}", id, disk.message());
        return RespondStatus(c, disk, HttpStatusContext::kDisk);
      }
      auto info = manager_->CreateCheckpoint(id);
      if (!info.ok()) {
        LOG_WARN("sandbox={} checkpoint: {}", id, info.status().message());
        return RespondStatus(c, info.status(), HttpStatusContext::kDisk);
      }
      metrics_.Checkpointed();
      if (team_disk_) team_disk_->Invalidate();
      AddLog(id, "info",
             "checkpoint " + info->checkpoint_id + " created in " + std::to_string(static_cast<int>(info->save_ms)) +
                 " ms (memory " + std::to_string(info->memory_bytes) + " B, disk " + std::to_string(info->disk_bytes) +
                 " B)");
      Audit({{"action", "sandbox.checkpointed"},
             {"sandbox", id},
             {"checkpoint", info->checkpoint_id},
             {"memory_bytes", info->memory_bytes},
             {"disk_bytes", info->disk_bytes},
             {"save_ms", info->save_ms}});
      json out = CheckpointJson(*info);
      out["saveMs"] = info->save_ms;
      std::string body = out.dump();
      asio::post(c->executor(), [c, body] { c->Respond(201, "application/json", body); });
    });
  });
}

void Server::ListCheckpoints(std::shared_ptr<HttpConn> c, const std::string& id) {
  asio::post(*workers_, [this, c, id] {
    auto all = manager_->ListCheckpoints(id);
    if (!all.ok()) return RespondStatus(c, all.status(), HttpStatusContext::kDefault);
    json arr = json::array();
    for (const auto& i : *all) arr.push_back(CheckpointJson(i));
    std::string body = arr.dump();
    asio::post(c->executor(), [c, body] { c->Respond(200, "application/json", body); });
  });
}

void Server::DeleteCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id, const std::string& checkpoint_id) {
  asio::post(*workers_, [this, c, id, checkpoint_id] {
    Status st = manager_->DeleteCheckpoint(id, checkpoint_id);
    if (!st.ok()) return RespondStatus(c, st, HttpStatusContext::kDefault);
    AddLog(id, "info", "checkpoint " + checkpoint_id + " deleted");
    asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
  });
}

void Server::RollbackSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseRollback(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const std::string checkpoint_id = req->checkpoint_id;
    asio::post(*workers_, [this, c, id, checkpoint_id] {
      // Under the sandbox's lock: a pause or kill waiting for the rollback
      // comes after these, never between.
      auto on_running = [this, id] {
        // The guest's TCP state is the checkpoint's: exchanges with the old
        // VMM can never finish (as on pause).
        streams_.Drop(id);  // the registry has the new VMM's pid already (the Manager's)
      };
      auto r = manager_->Rollback(id, checkpoint_id, std::chrono::seconds(60), on_running);
      if (!r.ok()) {
        Status st = r.status();
        LOG_WARN("sandbox={} rollback to {}: {}", id, checkpoint_id, st.message());
        auto sb = manager_->Get(id);
        if (sb && sb->state() == SandboxState::kFailed) {
          // Its old VMM is gone and the checkpoint did not come up: the
          // sandbox is lost, and killed like one whose VMM died.
          metrics_.RollbackLost();
          Audit({{"action", "sandbox.rollback_failed"},
                 {"sandbox", id},
                 {"checkpoint", checkpoint_id},
                 {"lost", true},
                 {"error", st.message()}});
          // Its end (rollback_failed) is decided by the Manager.
          asio::post(*workers_, [this, id] { (void)manager_->Destroy(id); });
        }
        return RespondStatus(c, st, HttpStatusContext::kDefault);
      }
      metrics_.RolledBack();
      AddLog(id, "info",
             "rolled back to checkpoint " + checkpoint_id + " in " + std::to_string(static_cast<int>(r->total_ms)) +
                 " ms");
      Audit({{"action", "sandbox.rolled_back"},
             {"sandbox", id},
             {"checkpoint", checkpoint_id},
             {"rollback_ms", r->total_ms}});
      SandboxRecord rec;
      if (auto sb = Visible(id)) rec = sb->Record();
      json out = SandboxJson(rec, ShownTemplateId(rec));
      out["sandboxID"] = id;  // even when the sandbox ended since
      out["checkpointID"] = checkpoint_id;
      out["rollbackMs"] = r->total_ms;
      std::string text = out.dump();
      asio::post(c->executor(), [c, text] { c->Respond(200, "application/json", text); });
    });
  });
}

}  // namespace airlock::server
