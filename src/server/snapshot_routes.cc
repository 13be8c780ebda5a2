// Snapshot routes of the control plane (spec §1.4 rows 2 and 6):
//   POST /sandboxes/{id}/pause   {"memory"?: bool}  204; 404; 409 when already
//                                paused (the SDK's pause() then returns false);
//                                507 when the disk is full (it keeps running)
//   POST /v2/sandboxes/{id}/connect on a paused sandbox resumes it: 201.
// The work runs on the worker pool; Manager::Pause/Resume (core/snapshots.cc)
// serialise per sandbox.
#include <algorithm>
#include <cctype>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "server/http_status.h"
#include "server/requests/fork.h"
#include "gateway/list_query.h"
#include "server/requests/pause.h"
#include "server/requests/snapshot.h"
#include "server/server.h"
#include "templates/template_store.h"

namespace airlock::server {

using nlohmann::json;

void SnapshotApi::ForkSandbox(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller) {
  ReadJson(c, [this, c, id, caller](json body) {
    auto req = requests::ParseFork(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const int count = req->count;
    auto parent = Visible(id);
    if (!parent) return RespondNoSandbox(c, id);
    if (Status st = sandboxes_->AdmitFork(*parent, count); !st.ok()) return c->RespondError(503, st.message());
    int ttl = ClampTimeout(req->timeout_s.value_or(config_.default_timeout_s));
    asio::post(*workers_, [this, c, id, count, ttl, memory = req->memory, key_id = caller.key_id] {
      auto children = sandboxes_->Fork(id, count, ttl, memory, key_id);
      if (!children.ok()) {
        Status st = children.status();
        int code = HttpStatusFor(st, HttpStatusContext::kDisk);
        return asio::post(c->executor(), [c, code, st] { c->RespondError(code, st.message()); });
      }
      json out = json::array();
      for (auto& child : *children) {
        if (!child.ok()) {
          // A node at its cluster capacity: 503, as a create placed nowhere.
          out.push_back({{"error", {{"code", HttpStatusFor(child.status())}, {"message", child.status().message()}}}});
          continue;
        }
        SandboxRecord r = (*child)->Record();
        EmitLifecycle("sandbox.lifecycle.created", **child);
        out.push_back({{"sandbox", SandboxJson(r, ShownTemplateId(r))}});
      }
      std::string text = out.dump();
      asio::post(c->executor(), [c, text] { c->Respond(201, "application/json", text); });
    });
  });
}

void SnapshotApi::CreateSnapshot(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseSnapshot(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const std::string name = req->name;
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    std::string owner = sb->attributes().owner_team;
    asio::post(*workers_, [this, c, id, name, owner] {
      if (Status budget = CheckTeamDisk(owner); !budget.ok()) {
        return asio::post(c->executor(), [c, budget] { c->RespondError(507, budget.message()); });
      }
      // The team's namespace is shared by its snapshots and its templates:
      // a name of one of the team's templates (or any template's id) is taken.
      if (!name.empty()) {
        std::string lower = name;
        for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        if (templates_->store().FindAlias(owner, lower).ok() || templates_->store().GetTemplate(name).ok()) {
          return asio::post(c->executor(), [c, name] {
            c->RespondError(409, "snapshot name '" + name + "' is a template of your team");
          });
        }
      }
      auto snap = manager_->CreateNamedSnapshot(id, name, owner);
      if (!snap.ok()) {
        Status st = snap.status();
        int code = HttpStatusFor(st, HttpStatusContext::kDisk);
        return asio::post(c->executor(), [c, code, st] { c->RespondError(code, st.message()); });
      }
      // The snapshot is its sandbox's team's; without that record nobody but admin could use it.
      if (Status st = registry_->SetOwner(OwnedKind::kSnapshot, snap->snapshot_id, owner); !st.ok()) {
        (void)manager_->DeleteNamedSnapshot(snap->snapshot_id);
        return asio::post(c->executor(), [c, st] { c->RespondError(500, st.message()); });
      }
      if (team_disk_) team_disk_->Invalidate();
      AddLog(id, "info", "snapshot " + snap->snapshot_id + " created");
      EmitLifecycle("sandbox.lifecycle.checkpointed", id, {{"snapshot_id", snap->snapshot_id}});
      std::string out = json{{"snapshotID", snap->snapshot_id}, {"names", snap->names}}.dump();
      asio::post(c->executor(), [c, out] { c->Respond(201, "application/json", out); });
    });
  });
}

void SnapshotApi::ListSnapshots(std::shared_ptr<HttpConn> c, const Caller& caller) {
  auto req = gateway::ParseListSnapshots([&c](const std::string& name) { return c->Query(name); });
  if (!req.ok()) return c->RespondError(400, req.status().message());
  asio::post(*workers_,
             [this, c, sandbox = req->sandbox_id, name = req->name, after = req->after, limit = req->limit, caller] {
               auto all = manager_->snapshot_dirs().ListNamed();
               if (!all.ok()) {
                 Status st = all.status();
                 return asio::post(c->executor(), [c, st] { c->RespondError(500, st.message()); });
               }
               json arr = json::array();
               HeaderList extra;
               bool past = after.empty();
               for (const auto& s : *all) {
                 if (!past) {
                   past = s.snapshot_id == after;  // the token is the last id of the previous page
                   continue;
                 }
                 if (!sandbox.empty() && s.sandbox_id != sandbox) continue;
                 if (!CallerOwns(caller, OwnedKind::kSnapshot, s.snapshot_id)) continue;  // another team's
                 if (!name.empty() && std::find(s.names.begin(), s.names.end(), name) == s.names.end()) continue;
                 if (static_cast<int>(arr.size()) == limit) {
                   extra.push_back({"X-Next-Token", arr.back()["snapshotID"].get<std::string>()});
                   break;
                 }
                 arr.push_back({{"snapshotID", s.snapshot_id}, {"names", s.names}});
               }
               std::string out = arr.dump();
               asio::post(c->executor(), [c, out, extra] { c->Respond(200, "application/json", out, extra); });
             });
}

void SnapshotApi::DeleteSnapshot(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller) {
  asio::post(*workers_, [this, c, id, caller] {
    std::string dir = catalog_->NamedSnapshotDir(id, caller.team, caller.admin);
    Status st = !dir.empty() && !CallerOwns(caller, OwnedKind::kSnapshot, dir.substr(dir.rfind('/') + 1))
                    ? NotFound("snapshot " + id + " not found")
                    : manager_->DeleteNamedSnapshot(id, caller.team, caller.admin);
    asio::post(c->executor(), [c, st] {
      if (st.ok()) return c->Respond(204, "", "");
      c->RespondError(HttpStatusFor(st), st.message());
    });
  });
}

void SnapshotApi::PauseSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParsePause(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    PauseOptions opts;
    opts.keep_memory = req->keep_memory;
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    if (sb->api_state() == "paused") return c->RespondError(409, "sandbox " + id + " is already paused");
    asio::post(*workers_, [this, c, id, opts, team = sb->attributes().owner_team] {
      auto r = sandboxes_->Pause(id, team, opts);
      if (!r.ok()) {
        return asio::post(c->executor(), [c, st = r.status()] {
          c->RespondError(HttpStatusFor(st, HttpStatusContext::kDisk), st.message());
        });
      }
      asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
    });
  });
}

}  // namespace airlock::server
