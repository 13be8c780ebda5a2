// Snapshot routes of the control plane (spec §1.4 rows 2 and 6):
//   POST /sandboxes/{id}/pause   {"memory"?: bool}  204; 404; 409 when already
//                                paused (the SDK's pause() then returns false);
//                                507 when the disk is full (it keeps running)
//   POST /v2/sandboxes/{id}/connect on a paused sandbox resumes it: 201.
// The work runs on the worker pool; Manager::Pause/Resume (core/snapshots.cc)
// serialise per sandbox.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "server/http_status.h"
#include "server/requests/fork.h"
#include "server/requests/list.h"
#include "server/requests/pause.h"
#include "server/requests/snapshot.h"
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

void Server::AutoPauseAsync(const std::string& id, bool keep_memory) {
  LOG_INFO("sandbox={} TTL expired: pausing (autoPause)", id);
  asio::post(*workers_, [this, id, keep_memory] {
    PauseOptions opts;
    opts.keep_memory = keep_memory;
    opts.on_saved = [this, id] {
      RecordState(id, "paused");
      return OkStatus();
    };
    auto r = manager_->Pause(id, opts);
    {
      std::lock_guard<std::mutex> l(mu_);
      auto_pausing_.erase(id);
    }
    if (r.ok()) return AddLog(id, "info", "paused at TTL (autoPause)");
    // A sandbox that cannot be paused is not kept past its TTL.
    LOG_WARN("sandbox={} autoPause failed, killing: {}", id, r.status().message());
    DestroyAsync(id, "TTL expired (autoPause failed)");
  });
}

void Server::EnsureTemplateSnapshotAsync(const std::string& template_name, int vcpus, int memory_mib) {
  if (config_.no_template_snapshot) return;
  asio::post(*workers_, [this, template_name, vcpus, memory_mib] {
    Status st = manager_->EnsureTemplateSnapshot(template_name, vcpus, memory_mib);
    if (!st.ok()) LOG_WARN("template={} snapshot: {}", template_name, st.message());
  });
}

void Server::ForkSandbox(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller) {
  ReadJson(c, [this, c, id, caller](json body) {
    auto req = requests::ParseFork(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const int count = req->count;
    SandboxRecord parent;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      parent = it->second.rec;
    }
    int ttl = ClampTimeout(req->timeout_s.value_or(config_.default_timeout_s));
    std::string key_id = caller.key_id;
    asio::post(*workers_, [this, c, id, count, ttl, parent, key_id] {
      auto children = manager_->Fork(id, count);
      if (!children.ok()) {
        Status st = children.status();
        int code = HttpStatusFor(st, HttpStatusContext::kDisk);
        return asio::post(c->executor(), [c, code, st] { c->RespondError(code, st.message()); });
      }
      json out = json::array();
      for (auto& child : *children) {
        if (!child.ok()) {
          out.push_back({{"error", {{"code", 500}, {"message", child.status().message()}}}});
          continue;
        }
        // The parent's secrets (same placeholders, already in the child's
        // memory) with a CA of the child's own; a child without it is destroyed.
        if (Status s = secrets_->Inherit(id, **child, key_id); !s.ok()) {
          LOG_WARN("sandbox={} fork child secrets: {}", (*child)->id(), s.message());
          secrets_->Forget((*child)->id());
          (void)manager_->Destroy((*child)->id());
          out.push_back({{"error", {{"code", 500}, {"message", "fork child secrets: " + s.message()}}}});
          continue;
        }
        SandboxRecord r = parent;
        r.id = (*child)->id();
        r.state = "running";
        r.created_at_ms = NowUnixMs();
        r.ends_at_ms = r.created_at_ms + int64_t{ttl} * 1000;
        r.access_token = (*child)->access_token();
        if (!parent.traffic_token.empty()) r.traffic_token = RandomHex(32);  // each child its own
        r.netns_ip = (*child)->netns_ip();
        r.vmm_pid = (*child)->vmm_pid();
        r.run_dir = (*child)->run_dir();
        // A child belongs to its parent's team (r.owner is the parent's).
        if (Status st = registry_->SetOwner(OwnedKind::kSandbox, r.id, r.owner); !st.ok()) {
          LOG_WARN("sandbox={} owner: {}", r.id, st.message());
          secrets_->Forget(r.id);
          (void)manager_->Destroy(r.id);
          out.push_back({{"error", {{"code", 500}, {"message", "fork child owner: " + st.message()}}}});
          continue;
        }
        if (Status st = registry_->PutSandbox(r); !st.ok()) LOG_WARN("sandbox={} registry: {}", r.id, st.message());
        {
          std::lock_guard<std::mutex> l(mu_);
          int disk_mib = sandboxes_.count(id) ? sandboxes_[id].disk_mib : 0;
          Entry e{r, *child, disk_mib, {}, {}};
          e.logs.push_back({r.created_at_ms, "info", "forked from " + id});
          sandboxes_[r.id] = std::move(e);
        }
        out.push_back({{"sandbox",
                        {{"sandboxID", r.id},
                         {"templateID", r.template_id},
                         {"clientID", "airlock"},
                         {"envdVersion", kEnvdVersion},
                         {"envdAccessToken", r.access_token},
                         {"trafficAccessToken", TrafficTokenJson(r)},
                         {"domain", nullptr}}}});
      }
      AddLog(id, "info", "forked " + std::to_string(count) + " time(s)");
      std::string text = out.dump();
      asio::post(c->executor(), [c, text] { c->Respond(201, "application/json", text); });
    });
  });
}

void Server::CreateSnapshot(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseSnapshot(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const std::string name = req->name;
    std::string owner;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      owner = it->second.rec.owner;
    }
    asio::post(*workers_, [this, c, id, name, owner] {
      auto snap = manager_->CreateNamedSnapshot(id, name);
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
      AddLog(id, "info", "snapshot " + snap->snapshot_id + " created");
      std::string out = json{{"snapshotID", snap->snapshot_id}, {"names", snap->names}}.dump();
      asio::post(c->executor(), [c, out] { c->Respond(201, "application/json", out); });
    });
  });
}

void Server::ListSnapshots(std::shared_ptr<HttpConn> c, const Caller& caller) {
  auto req = requests::ParseListSnapshots([&c](const std::string& name) { return c->Query(name); });
  if (!req.ok()) return c->RespondError(400, req.status().message());
  asio::post(*workers_,
             [this, c, sandbox = req->sandbox_id, name = req->name, after = req->after, limit = req->limit, caller] {
               auto all = manager_->ListNamedSnapshots();
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

void Server::DeleteSnapshot(std::shared_ptr<HttpConn> c, const std::string& id, const Caller& caller) {
  asio::post(*workers_, [this, c, id, caller] {
    std::string dir = manager_->FindNamedSnapshot(id);
    Status st = !dir.empty() && !CallerOwns(caller, OwnedKind::kSnapshot, dir.substr(dir.rfind('/') + 1))
                    ? NotFound("snapshot " + id + " not found")
                    : manager_->DeleteNamedSnapshot(id);
    asio::post(c->executor(), [c, st] {
      if (st.ok()) return c->Respond(204, "", "");
      c->RespondError(HttpStatusFor(st), st.message());
    });
  });
}

void Server::RecordState(const std::string& id, const std::string& state) {
  SandboxRecord rec;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return;
    Entry& e = it->second;
    e.rec.state = state;
    if (state == "running" && e.sb) {
      e.rec.netns_ip = e.sb->netns_ip();
      e.rec.vmm_pid = e.sb->vmm_pid();
    }
    rec = e.rec;
    if (e.logs.size() >= kMaxLogs) e.logs.pop_front();
    e.logs.push_back({NowUnixMs(), "info", "sandbox " + state});
  }
  if (Status st = registry_->PutSandbox(rec); !st.ok()) LOG_WARN("sandbox={} registry: {}", id, st.message());
  if (state == "paused") DropStreams(id);  // its guest is stopping: no stream may wait on it
  if (state == "running") secrets_->EnsureSandboxCa(id);  // adopted while paused: its CA is minted now
}

void Server::PauseSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParsePause(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    PauseOptions opts;
    opts.keep_memory = req->keep_memory;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      if (it->second.rec.state == "paused") return c->RespondError(409, "sandbox " + id + " is already paused");
    }
    opts.on_saved = [this, id] {
      RecordState(id, "paused");
      return OkStatus();
    };
    asio::post(*workers_, [this, c, id, opts] {
      auto r = manager_->Pause(id, opts);
      if (!r.ok()) {
        Status st = r.status();
        LOG_WARN("sandbox={} pause: {}", id, st.message());
        return asio::post(c->executor(),
                          [c, st] { c->RespondError(HttpStatusFor(st, HttpStatusContext::kDisk), st.message()); });
      }
      AddLog(id, "info",
             "paused in " + std::to_string(static_cast<int>(r->total_ms)) + " ms (memory " +
                 std::to_string(r->snapshot.memory_bytes) + " B, disk " + std::to_string(r->snapshot.disk_bytes) +
                 " B)");
      asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
    });
  });
}

void Server::ResumeSandbox(std::shared_ptr<HttpConn> c, const std::string& id, int64_t ends_at_ms) {
  asio::post(*workers_, [this, c, id, ends_at_ms] {
    auto r = manager_->Resume(id);
    if (!r.ok()) {
      Status st = r.status();
      LOG_WARN("sandbox={} resume: {}", id, st.message());
      int code = HttpStatusFor(st);
      return asio::post(c->executor(), [c, code, st] { c->RespondError(code, st.message()); });
    }
    SandboxRecord rec;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) {
        return asio::post(c->executor(), [c, id] { c->RespondError(404, "sandbox " + id + " not found"); });
      }
      it->second.rec.ends_at_ms = ends_at_ms;  // a resumed sandbox's TTL starts anew
    }
    if (r->resumed) RecordState(id, "running");
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it != sandboxes_.end()) rec = it->second.rec;
    }
    if (!r->resumed) (void)registry_->SetEndsAt(id, ends_at_ms);
    AddLog(id, "info",
           r->resumed ? "resumed in " + std::to_string(static_cast<int>(r->total_ms)) + " ms" : "connected");
    json out{{"sandboxID", rec.id},         {"templateID", rec.template_id},       {"clientID", "airlock"},
             {"envdVersion", kEnvdVersion}, {"envdAccessToken", rec.access_token}, {"domain", nullptr},
             {"trafficAccessToken", TrafficTokenJson(rec)}};
    int status = r->resumed ? 201 : 200;
    std::string body = out.dump();
    asio::post(c->executor(), [c, status, body] { c->Respond(status, "application/json", body); });
  });
}

}  // namespace airlock::server
