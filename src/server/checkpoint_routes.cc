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

void SnapshotApi::RouteCheckpoints(std::shared_ptr<HttpConn> c, RouteId route, const std::vector<std::string>& p) {
  if (!Visible(p[0])) return RespondNoSandbox(c, p[0]);
  switch (route) {
    case RouteId::kCreateCheckpoint: return CreateCheckpoint(c, p[0]);
    case RouteId::kListCheckpoints: return ListCheckpoints(c, p[0]);
    case RouteId::kDeleteCheckpoint: return DeleteCheckpoint(c, p[0], p[1]);
    case RouteId::kRollback: return RollbackSandbox(c, p[0]);
    default: return c->RespondError(404, "no route for " + c->method_string() + " " + c->path());
  }
}

void SnapshotApi::CreateCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id) {
  // No fields; a body, if sent, must still be a JSON object.
  ReadJson(c, [this, c, id](json) {
    asio::post(*workers_, [this, c, id] {
      auto info = sandboxes_->Checkpoint(id);
      if (!info.ok()) return RespondStatus(c, info.status(), HttpStatusContext::kDisk);
      json out = CheckpointJson(*info);
      EmitLifecycle("sandbox.lifecycle.checkpointed", id, {{"checkpoint_id", out["checkpointID"]}});
      out["saveMs"] = info->save_ms;
      std::string body = out.dump();
      asio::post(c->executor(), [c, body] { c->Respond(201, "application/json", body); });
    });
  });
}

void SnapshotApi::ListCheckpoints(std::shared_ptr<HttpConn> c, const std::string& id) {
  asio::post(*workers_, [this, c, id] {
    auto all = manager_->ListCheckpoints(id);
    if (!all.ok()) return RespondStatus(c, all.status(), HttpStatusContext::kDefault);
    json arr = json::array();
    for (const auto& i : *all) arr.push_back(CheckpointJson(i));
    std::string body = arr.dump();
    asio::post(c->executor(), [c, body] { c->Respond(200, "application/json", body); });
  });
}

void SnapshotApi::DeleteCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id, const std::string& checkpoint_id) {
  asio::post(*workers_, [this, c, id, checkpoint_id] {
    Status st = sandboxes_->DeleteCheckpoint(id, checkpoint_id);
    if (!st.ok()) return RespondStatus(c, st, HttpStatusContext::kDefault);
    asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
  });
}

void SnapshotApi::RollbackSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
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
      auto r = sandboxes_->Rollback(id, checkpoint_id, on_running);
      if (!r.ok()) return RespondStatus(c, r.status(), HttpStatusContext::kDefault);
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
