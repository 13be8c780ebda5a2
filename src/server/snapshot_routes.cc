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
#include "server/server.h"

namespace airlock::server {

using nlohmann::json;

namespace {

int PauseHttpStatus(const Status& st) {
  switch (st.code()) {
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 409;
    case StatusCode::kFailedPrecondition:
      return 409;  // pausing, resuming, killing
    case StatusCode::kResourceExhausted:
      return 507;
    case StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

StatusOr<std::optional<int64_t>> OptionalSecondsField(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return InvalidArgument(std::string(field) + " must be a non-negative integer number of seconds");
  }
  return std::optional<int64_t>(it->get<int64_t>());
}

}  // namespace

StatusOr<Lifecycle> ParseLifecycle(const json& body) {
  Lifecycle l;
  auto flag = [&](const char* name, bool* out) -> Status {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return OkStatus();
    if (!it->is_boolean()) return InvalidArgument(std::string(name) + " must be a boolean");
    *out = it->get<bool>();
    return OkStatus();
  };
  RETURN_IF_ERROR(flag("autoPause", &l.auto_pause));
  RETURN_IF_ERROR(flag("autoPauseMemory", &l.auto_pause_memory));
  if (auto it = body.find("autoResume"); it != body.end() && !it->is_null()) {
    if (!it->is_object() || !it->contains("enabled") || !(*it)["enabled"].is_boolean()) {
      return InvalidArgument("autoResume must be {\"enabled\": bool}");
    }
    l.auto_resume = (*it)["enabled"].get<bool>();
  }
  if (l.auto_resume && (!l.auto_pause || !l.auto_pause_memory)) {
    return InvalidArgument("autoResume needs autoPause with memory kept");
  }
  return l;
}

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
    auto timeout = OptionalSecondsField(body, "timeout");
    if (!timeout.ok()) return c->RespondError(400, timeout.status().message());
    int count = 1;
    if (auto it = body.find("count"); it != body.end() && !it->is_null()) {
      if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 16) {
        return c->RespondError(400, "count must be an integer 1..16");
      }
      count = it->get<int>();
    }
    SandboxRecord parent;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      parent = it->second.rec;
    }
    int ttl = ClampTimeout(timeout->value_or(config_.default_timeout_s));
    std::string key_id = caller.key_id;
    asio::post(*workers_, [this, c, id, count, ttl, parent, key_id] {
      auto children = manager_->Fork(id, count);
      if (!children.ok()) {
        Status st = children.status();
        int code = st.code() == StatusCode::kNotFound             ? 404
                   : st.code() == StatusCode::kFailedPrecondition ? 409
                   : st.code() == StatusCode::kInvalidArgument    ? 400
                   : st.code() == StatusCode::kResourceExhausted  ? 507
                                                                  : 500;
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
        if (Status s = InheritSecrets(id, **child, key_id); !s.ok()) {
          LOG_WARN("sandbox={} fork child secrets: {}", (*child)->id(), s.message());
          ForgetSecrets((*child)->id());
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
          ForgetSecrets(r.id);
          (void)manager_->Destroy(r.id);
          out.push_back({{"error", {{"code", 500}, {"message", "fork child owner: " + st.message()}}}});
          continue;
        }
        if (Status st = registry_->PutSandbox(r); !st.ok()) LOG_WARN("sandbox={} registry: {}", r.id, st.message());
        {
          std::lock_guard<std::mutex> l(mu_);
          int disk_mib = sandboxes_.count(id) ? sandboxes_[id].disk_mib : 0;
          Entry e{r, *child, disk_mib, {}};
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
    std::string name;
    if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
      if (!it->is_string()) return c->RespondError(400, "name must be a string");
      name = it->get<std::string>();
    }
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
        int code = st.code() == StatusCode::kNotFound             ? 404
                   : st.code() == StatusCode::kAlreadyExists      ? 409
                   : st.code() == StatusCode::kFailedPrecondition ? 409
                   : st.code() == StatusCode::kInvalidArgument    ? 400
                   : st.code() == StatusCode::kResourceExhausted  ? 507
                                                                  : 500;
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
  std::string sandbox = c->Query("sandboxID").value_or(""), name = c->Query("name").value_or("");
  std::string after = c->Query("nextToken").value_or("");
  int limit = 100;
  if (auto l = c->Query("limit"); l && !l->empty()) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (*end != '\0' || v < 1) return c->RespondError(400, "limit must be a positive integer");
    limit = static_cast<int>(std::min<long>(v, 100));
  }
  asio::post(*workers_, [this, c, sandbox, name, after, limit, caller] {
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
      int code = st.code() == StatusCode::kNotFound ? 404 : st.code() == StatusCode::kFailedPrecondition ? 409 : 500;
      c->RespondError(code, st.message());
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
  if (state == "running") EnsureSandboxCa(id);  // adopted while paused: its CA is minted now
  if (state == "paused") AbortStreams(id);
}

void Server::PauseSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    PauseOptions opts;
    if (auto it = body.find("memory"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) return c->RespondError(400, "memory must be a boolean");
      opts.keep_memory = it->get<bool>();
    }
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
        return asio::post(c->executor(), [c, st] { c->RespondError(PauseHttpStatus(st), st.message()); });
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
      int code = st.code() == StatusCode::kNotFound ? 404 : st.code() == StatusCode::kFailedPrecondition ? 409 : 500;
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
