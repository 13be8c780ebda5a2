// The sandbox routes of the control plane (spec §1.4, schemas §1.5):
// create, list, get, kill, timeout, connect, logs; metrics (metrics_history.cc)
// and network (egress_routes.cc). Each parses its request, runs its action
// (control/sandbox_controller.h) on a worker and answers from the outcome.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include "common/log.h"
#include "common/secure_equal.h"
#include "core/http_client.h"
#include "image/image.h"
#include "server/egress_routes.h"
#include "server/http_status.h"
#include "server/mcp_service.h"
#include "server/requests/create.h"
#include "gateway/list_query.h"
#include "gateway/reservation.h"
#include "server/requests/timeout.h"
#include "server/routes.h"
#include "server/sandbox_api.h"
#include "server/template_api.h"

namespace airlock::server {

using nlohmann::json;

void SandboxApi::CreateSandbox(std::shared_ptr<HttpConn> c, const Caller& caller) {
  ReadJson(c, [this, c, caller](json body) {
    auto parsed = requests::ParseCreateRequest(body, {config_.max_vcpus, config_.max_memory_mib, config_.max_disk_mib});
    if (!parsed.ok()) return c->RespondError(400, parsed.status().message());
    // A cluster node takes creates from its fronts only: a front's
    // reservation is bound to this very body. (A local process that reaches
    // the node's API on loopback cannot create past the cluster's slots.)
    if (config_.cluster.claim_reservation) {
      if (c->Header(gateway::kReservationHeader).empty())
        return c->RespondError(403, "a cluster node takes creates from its fronts only: create through a front "
                                    "(serve --mcp-api names one for the MCP tools)");
      parsed->reservation_digest = gateway::CreateDigest(body);
    }
    // The template, resolved once for the caller's team (control/template_catalog.h),
    // off the event loop (it reads the template store, named snapshots and
    // image files) and never behind a bring-up (lookups_).
    asio::post(*lookups_, [this, c, caller, req = *std::move(parsed)]() mutable {
      auto resolved = catalog_->Resolve(req.template_id.value_or("base"), caller.team, caller.admin);
      // Volumes by name, in the caller's team, mounted on the host.
      Status volumes = OkStatus();
      for (auto& m : req.volume_mounts) {
        if (!volumes_) {
          volumes = Unimplemented("volumes are not enabled on this server");
          break;
        }
        auto v = volumes_->Find(caller.team, m.name);
        if (!v.ok()) {
          volumes = NotFound("volumeMounts: volume '" + m.name + "' not found");
          break;
        }
        auto root = volumes_->MountedRoot(*v);
        if (!root.ok()) {
          volumes = root.status();
          break;
        }
        m.volume_id = v->id;
        m.host_dir = *root;
      }
      if (resolved.ok() && !volumes.ok()) resolved = volumes;
      asio::post(c->executor(), [this, c, caller, req, resolved = std::move(resolved)] {
        if (!resolved.ok()) return c->RespondError(HttpStatusFor(resolved.status()), resolved.status().message());
        CreateSandboxFrom(c, caller, req, *resolved);
      });
    });
  });
}

void SandboxApi::CreateSandboxFrom(std::shared_ptr<HttpConn> c, const Caller& caller, const requests::CreateRequest& req,
                               const control::ResolvedTemplate& tmpl) {
  {
    CreateOptions opts;
    opts.detach = true;
    opts.template_name = tmpl.image_template;
    opts.named_snapshot_dir = tmpl.named_snapshot_dir;
    // The runtime: the body's, else the template name's ("base-gvisor"),
    // else the default (the manager's).
    opts.runtime = req.runtime ? *req.runtime : tmpl.runtime_in_name;
    const std::string display_id = tmpl.template_id, alias = tmpl.alias;
    if (!display_id.empty()) templates_->NoteTemplateImage(tmpl.image_template, display_id);
    const image::MachineShape shape = ClampedShape(tmpl.shape);
    opts.vcpus = req.vcpus.value_or(shape.vcpus);
    opts.memory_mib = req.memory_mib.value_or(shape.memory_mib);
    opts.env_vars = req.env_vars;
    opts.egress_policy = req.egress_policy;
    if (Status st = requests::CheckTemplateDisk(req, tmpl.disk_mib); !st.ok())
      return c->RespondError(400, st.message());
    int ttl = ClampTimeout(req.timeout_s.value_or(config_.default_timeout_s));
    opts.timeout = std::chrono::seconds(ttl);
    opts.attributes.metadata = req.metadata;
    if (!req.allow_public_traffic) opts.attributes.traffic_token = RandomHex(32);
    opts.attributes.mask_request_host = req.mask_request_host;
    opts.attributes.https_ports = req.https_ports;
    opts.attributes.volume_mounts = req.volume_mounts;
    opts.attributes.owner_team = caller.team;
    opts.attributes.auto_pause = req.lifecycle.auto_pause;
    opts.attributes.auto_pause_memory = req.lifecycle.auto_pause_memory;
    opts.attributes.auto_resume = req.lifecycle.auto_resume;
    // Idle sleep: the create's interval, else the server's; a sleeping
    // sandbox wakes on its next request, so it resumes on traffic.
    opts.attributes.idle_timeout_s = req.lifecycle.idle_timeout_s.value_or(config_.idle_timeout_s);
    opts.attributes.idle_keeps_processes = req.lifecycle.idle_keeps_processes;
    if (opts.attributes.idle_timeout_s > 0) opts.attributes.auto_resume = true;
    opts.attributes.recorded_env_vars = req.env_vars;  // brokered secrets' values are never persisted
    // A front that placed this create holds its slot in the cluster
    // registry; the controller claims it before starting anything.
    control::CreateAction action{caller, std::move(opts), req.secrets, display_id};
    if (config_.cluster.claim_reservation) {
      action.reservation_token = c->Header(gateway::kReservationHeader);
      action.reservation_digest = req.reservation_digest;
    }
    sandboxes_->Create(std::move(action), [this, c, display_id, alias](control::CreateOutcome out) {
      if (!out.sandbox) {
        HeaderList extra;
        if (out.retry_after_s > 0) extra.push_back({"Retry-After", std::to_string(out.retry_after_s)});
        const int code = out.http_status ? out.http_status : HttpStatusFor(out.status);
        return asio::post(c->executor(), [c, code, st = out.status, error_code = control::CreateErrorCode(out, code),
                                          extra] { c->RespondErrorWithCode(code, st.message(), error_code, extra); });
      }
      const SandboxRecord rec = out.sandbox->Record();
      EmitLifecycle("sandbox.lifecycle.created", *out.sandbox);
      json created = SandboxJson(rec, ShownTemplateId(rec));
      if (!display_id.empty()) created["templateID"] = display_id;
      if (!alias.empty()) created["alias"] = alias;
      asio::post(c->executor(), [c, text = created.dump()] { c->Respond(201, "application/json", text); });
    });
  }
}

void SandboxApi::ListSandboxes(std::shared_ptr<HttpConn> c, const Caller& caller, bool v2) {
  auto parsed = gateway::ParseListSandboxes([&c](const std::string& name) { return c->Query(name); });
  if (!parsed.ok()) return c->RespondError(400, parsed.status().message());
  const gateway::ListSandboxesRequest& q = *parsed;
  std::vector<std::pair<SandboxRecord, int>> rows;
  // X-Total-Running, as E2B's API sets it (packages/api handlers, GetV2Sandboxes):
  // the running sandboxes that pass every filter, before the cursor and the
  // limit; only when running ones were asked for.
  size_t total_running = 0;
  for (const auto& sb : manager_->VisibleList()) {
    SandboxRecord rec = sb->Record();
    if (!caller.admin && rec.owner != caller.team) continue;  // another team's
    if (!(rec.state == "paused" ? q.want_paused : q.want_running)) continue;
    if (!q.template_id.empty() && rec.template_id != q.template_id && ShownTemplateId(rec) != q.template_id) continue;
    if (q.started_after_us && rec.created_at_ms * 1000 < *q.started_after_us) continue;
    if (q.started_before_us && rec.created_at_ms * 1000 >= *q.started_before_us) continue;
    bool match = true;
    for (auto& [k, v] : q.metadata) {
      auto it = rec.metadata.find(k);
      if (it == rec.metadata.end() || it->second != v) match = false;
    }
    if (!match) continue;
    if (rec.state != "paused") ++total_running;
    rows.emplace_back(std::move(rec), sb->disk_mib());
  }
  auto key = [](const SandboxRecord& r) { return std::make_pair(r.created_at_ms, r.id); };
  std::sort(rows.begin(), rows.end(),
            [&](auto& a, auto& b) { return q.ascending ? key(a.first) < key(b.first) : key(b.first) < key(a.first); });
  json arr = json::array();
  HeaderList extra;
  if (q.want_running) extra.push_back({"X-Total-Running", std::to_string(total_running)});
  int taken = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i].first;
    if (q.after && (q.ascending ? !(key(r) > *q.after) : !(key(r) < *q.after))) continue;
    if (taken == q.limit) {
      const auto& last = rows[i - 1].first;
      extra.push_back({"X-Next-Token", std::to_string(last.created_at_ms) + "_" + last.id});
      break;
    }
    SandboxRecord shown = r;
    shown.template_id = ShownTemplateId(r);
    arr.push_back(ListedSandboxJson(shown, rows[i].second, false));
    ++taken;
  }
  (void)v2;
  c->Respond(200, "application/json", arr.dump(), extra);
}

void SandboxApi::GetSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  auto sb = Visible(id);
  if (!sb) return RespondNoSandbox(c, id);
  SandboxRecord shown = sb->Record();
  shown.template_id = ShownTemplateId(shown);
  json detail = ListedSandboxJson(shown, sb->disk_mib(), true);
  AddEgressFields(manager_->egress(), id, detail);
  secrets_->AddSecretFields(id, detail);
  c->Respond(200, "application/json", detail.dump());
}

void SandboxApi::KillSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  // Decided here, on the event loop: from now on nothing shows or reaches it.
  if (!sandboxes_->Kill(id).ok()) return RespondNoSandbox(c, id);
  streams_.Drop(id);
  asio::post(*workers_, [this, c, id] {
    sandboxes_->DestroyKilled(id);
    asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
  });
}

void SandboxApi::SetTimeout(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseSetTimeout(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const int64_t timeout_s = req->timeout_s;
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(timeout_s)} * 1000;
    if (!Visible(id)) return RespondNoSandbox(c, id);
    asio::post(*workers_, [this, c, id, ends, timeout_s] {
      Status st = sandboxes_->SetTimeout(id, ends, timeout_s);
      if (st.ok()) EmitLifecycle("sandbox.lifecycle.updated", id, {{"set_timeout", FormatRfc3339Ms(ends)}});
      asio::post(c->executor(), [this, c, id, st] {
        if (st.code() == StatusCode::kFailedPrecondition) return c->RespondError(409, st.message());
        if (st.code() == StatusCode::kNotFound && Visible(id)) return c->RespondError(404, st.message());
        if (!st.ok()) return RespondNoSandbox(c, id);
        c->Respond(204, "", "");
      });
    });
  });
}

void SandboxApi::Refresh(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseRefresh(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    const int64_t ends = NowUnixMs() + int64_t{ClampTimeout(req->duration_s)} * 1000;
    if (!Visible(id)) return RespondNoSandbox(c, id);
    asio::post(*workers_, [this, c, id, ends, s = req->duration_s] {
      Status st = sandboxes_->Refresh(id, ends, s);
      if (st.ok()) EmitLifecycle("sandbox.lifecycle.updated", id, {{"set_timeout", FormatRfc3339Ms(ends)}});
      asio::post(c->executor(), [this, c, id, st] {
        if (!st.ok()) return RespondNoSandbox(c, id);
        c->Respond(204, "", "");
      });
    });
  });
}

void SandboxApi::ConnectSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto req = requests::ParseConnect(body);
    if (!req.ok()) return c->RespondError(400, req.status().message());
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(req->timeout_s.value_or(config_.default_timeout_s))} * 1000;
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    memory_->NoteActivity(id);  // a connected sandbox is in use: not the memory-pressure policy's first pause
    asio::post(*workers_, [this, c, id, ends] {
      control::ConnectOutcome out = sandboxes_->Connect(id, ends);
      if (!out.status.ok()) {
        return asio::post(c->executor(),
                          [c, st = out.status] { c->RespondError(HttpStatusFor(st), st.message()); });
      }
      if (!out.sandbox) return asio::post(c->executor(), [this, c, id] { RespondNoSandbox(c, id); });
      const SandboxRecord rec = out.sandbox->Record();
      std::string text = SandboxJson(rec, ShownTemplateId(rec)).dump();
      asio::post(c->executor(),
                 [c, text, code = out.resumed ? 201 : 200] { c->Respond(code, "application/json", text); });
    });
  });
}

void SandboxApi::Logs(std::shared_ptr<HttpConn> c, const std::string& id, bool v2) {
  auto req = gateway::ParseSandboxLogs([&c](const std::string& name) { return c->Query(name); }, v2);
  if (!req.ok()) return c->RespondError(400, req.status().message());
  // Every entry (the sandbox's events, then its egress decisions), by time.
  std::vector<std::pair<int64_t, json>> all;
  {
    auto sb = Visible(id);
    if (!sb) return RespondNoSandbox(c, id);
    for (const auto& e : sb->Logs()) {
      all.emplace_back(e.ts_ms, json{{"timestamp", FormatRfc3339Ms(e.ts_ms)},
                                     {"level", e.level},
                                     {"message", e.message},
                                     {"fields", json::object()}});
    }
  }
  for (auto& e : EgressLogEntries(id)) all.push_back(std::move(e));
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (req->backward) std::reverse(all.begin(), all.end());
  json entries = json::array(), lines = json::array();
  for (const auto& [ts, e] : all) {
    if (entries.size() >= static_cast<size_t>(req->limit)) break;
    const std::string& message = e["message"].get_ref<const std::string&>();
    if (!req->Keeps(ts, e["level"].get_ref<const std::string&>(), message)) continue;
    if (!v2) lines.push_back({{"timestamp", e["timestamp"]}, {"line", message}});
    entries.push_back(e);
  }
  json out = v2 ? json{{"logs", entries}} : json{{"logs", lines}, {"logEntries", entries}};
  c->Respond(200, "application/json", out.dump());
}

}  // namespace airlock::server
