// Pause, fork, named snapshots, checkpoints and rollback (spec §1.4 rows 2
// and 6, docs/snapshots.md):
//   POST   /sandboxes/{id}/pause {"memory"?}   204; 409 already paused; 507 disk
//   POST   /sandboxes/{id}/fork {"timeout"?, "count"?}  201 [{sandbox}|{error}]
//   POST   /sandboxes/{id}/snapshots {"name"?}  201 {"snapshotID","names"}
//   GET    /snapshots?sandboxID=&name=&limit=&nextToken=
//   DELETE /templates/{snapshotID or name}     (TemplateApi hands it over) 204/404/409
//   POST|GET /sandboxes/{id}/checkpoints, DELETE .../checkpoints/{cid},
//   POST   /sandboxes/{id}/rollback {"checkpointID"}  (checkpoint_routes.cc)
// Snapshots belong to the team that owns the sandbox they were taken of.
// io thread, never blocking: the actions (control/sandbox_controller.h) run
// on a worker.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api_base.h"
#include "server/routes.h"

namespace airlock::server {

class SnapshotApi : public ApiHandlers {
 public:
  explicit SnapshotApi(const Services& s) : ApiHandlers(s) {}
  void PauseSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
  void ForkSandbox(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller);
  void CreateSnapshot(std::shared_ptr<HttpConn> c, const std::string& id);
  void ListSnapshots(std::shared_ptr<HttpConn> c, const Caller& caller);
  void DeleteSnapshot(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller);
  // `p`: the route's parameters (routes.h), p[0] a sandbox the caller owns, live or 404.
  void RouteCheckpoints(std::shared_ptr<HttpConn> c, RouteId route, const std::vector<std::string>& p);

 private:
  void CreateCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id);
  void ListCheckpoints(std::shared_ptr<HttpConn> c, const std::string& id);
  void DeleteCheckpoint(std::shared_ptr<HttpConn> c, const std::string& id, const std::string& checkpoint_id);
  void RollbackSandbox(std::shared_ptr<HttpConn> c, const std::string& id);
};

}  // namespace airlock::server
