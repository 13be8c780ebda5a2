// Control plane: the E2B REST API of spec §1 (schemas §1.5), plus path
// aliases for older SDKs (§1.7). Every route but GET /health needs a valid
// X-API-Key (401 JSON otherwise). Blocking work runs on the worker pool.
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "core/http_client.h"
#include "image/image.h"
#include "server/server.h"
#include "server/egress_routes.h"

namespace airlock::server {

using nlohmann::json;

namespace {

int HttpStatusFor(const Status& st) {
  switch (st.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kResourceExhausted: return 503;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// {"k": "v", ...} → map, or an error naming the field.
StatusOr<std::map<std::string, std::string>> StringMap(const json& body, const char* field) {
  std::map<std::string, std::string> out;
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) return InvalidArgument(std::string(field) + " must be an object of strings");
  for (auto& [k, v] : it->items()) {
    if (!v.is_string()) return InvalidArgument(std::string(field) + "." + k + " must be a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

// Optional non-negative integer field; error when present and not one.
StatusOr<std::optional<int64_t>> OptionalSeconds(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return InvalidArgument(std::string(field) + " must be an integer number of seconds");
  }
  int64_t v = it->get<int64_t>();
  if (v < 0) return InvalidArgument(std::string(field) + " must not be negative");
  return std::optional<int64_t>(v);
}

// Splits "/a/b/c" into {"a","b","c"}.
std::vector<std::string> Segments(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

void Server::ReadJson(std::shared_ptr<HttpConn> c, std::function<void(json)> then) {
  c->ReadBodyToString(config_.max_json_body, [c, then = std::move(then)](StatusOr<std::string> body) {
    if (!body.ok()) {
      int code = body.status().code() == StatusCode::kResourceExhausted  ? 413
                 : body.status().code() == StatusCode::kDeadlineExceeded ? 408
                                                                         : 400;
      return c->RespondError(code, body.status().message());
    }
    json j = body->empty() ? json::object() : json::parse(*body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return c->RespondError(400, "request body must be a JSON object");
    then(std::move(j));
  });
}

StatusOr<bool> ParseAllowPublicTraffic(const json& body) {
  auto n = body.find("network");
  if (n == body.end() || !n->is_object()) return true;
  auto a = n->find("allowPublicTraffic");
  if (a == n->end() || a->is_null()) return true;
  if (!a->is_boolean()) return InvalidArgument("network.allowPublicTraffic must be a boolean");
  return a->get<bool>();
}

std::string FillMaskPort(std::string mask, const std::string& port) {
  for (size_t at = 0; (at = mask.find("${PORT}", at)) != std::string::npos; at += port.size()) mask.replace(at, 7, port);
  return mask;
}

StatusOr<std::string> ParseMaskRequestHost(const json& body) {
  auto n = body.find("network");
  if (n == body.end() || !n->is_object()) return std::string();
  auto m = n->find("maskRequestHost");
  if (m == n->end() || m->is_null()) return std::string();
  if (!m->is_string()) return InvalidArgument("network.maskRequestHost must be a string");
  std::string v = m->get<std::string>();
  if (v.empty() || v.size() > 255) return InvalidArgument("network.maskRequestHost must be 1..255 characters");
  // A host[:port], "${PORT}" anywhere: it becomes a Host header, so nothing
  // that could end the header line or smuggle another one.
  for (char ch : FillMaskPort(v, "1")) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_' || ch == ':' ||
          ch == '[' || ch == ']')) {
      return InvalidArgument("network.maskRequestHost '" + v +
                             "' is not a host[:port] (letters, digits, . - _ : [ ] and ${PORT} only)");
    }
  }
  return v;
}

json TrafficTokenJson(const SandboxRecord& r) {
  return r.traffic_token.empty() ? json(nullptr) : json(r.traffic_token);
}

static json SandboxJson(const SandboxRecord& r) {
  return json{{"sandboxID", r.id},
              {"templateID", r.template_id},
              {"clientID", "airlock"},
              {"envdVersion", kEnvdVersion},
              {"envdAccessToken", r.access_token},
              {"trafficAccessToken", TrafficTokenJson(r)},
              {"domain", nullptr}};
}

static json ListedJson(const SandboxRecord& r, int disk_mib, bool detail) {
  json j{{"sandboxID", r.id},
         {"templateID", r.template_id},
         {"clientID", "airlock"},
         {"startedAt", FormatRfc3339Ms(r.created_at_ms)},
         {"endAt", FormatRfc3339Ms(r.ends_at_ms)},
         {"state", r.state == "paused" ? "paused" : "running"},
         {"cpuCount", r.vcpus},
         {"memoryMB", r.memory_mib},
         {"diskSizeMB", disk_mib},
         {"envdVersion", kEnvdVersion},
         {"metadata", r.metadata},
         {"volumeMounts", json::array()}};
  if (detail) {
    j["envdAccessToken"] = r.access_token;
    j["domain"] = nullptr;
    j["allowInternetAccess"] = false;
    j["lifecycle"] = {{"onTimeout", r.auto_pause ? "pause" : "kill"}, {"autoResume", r.auto_resume}};
  }
  return j;
}

void Server::HandleControl(std::shared_ptr<HttpConn> c) {
  const std::string& path = c->path();
  auto verb = c->method();
  if (path == "/health" && verb == http::Method::kGet)
    return c->Respond(200, "application/json", "{\"status\":\"ok\"}");
  if (path == "/metrics" && verb == http::Method::kGet) return ServeMetrics(c);
  auto key = registry_->LookupApiKey(c->Header("X-API-Key"));
  if (!key.ok()) return c->RespondError(500, key.status().message());
  if (!*key) {
    AuditAuthFailure(c);
    return c->RespondError(401, c->Header("X-API-Key").empty() ? "missing X-API-Key" : "invalid X-API-Key");
  }
  const Caller caller{(*key)->id, (*key)->team, (*key)->admin};

  auto seg = Segments(path);
  bool v2 = !seg.empty() && seg[0] == "v2";
  if (v2) seg.erase(seg.begin());
  AuditControlCall(c, caller.key_id, ControlActionName(seg, verb),
                   seg.size() >= 2 && seg[0] == "sandboxes" ? seg[1] : "");
  if (seg.size() == 1 && seg[0] == "snapshots" && verb == http::Method::kGet && !v2) return ListSnapshots(c, caller);
  if (seg.size() == 2 && seg[0] == "templates" && verb == http::Method::kDelete && !v2)
    return DeleteSnapshot(c, seg[1], caller);
  if (!seg.empty() && seg[0] == "secrets" && !v2 && seg.size() <= 2) {
    return HandleSecrets(c, caller, seg.size() == 2 ? seg[1] : "");
  }
  if (seg.empty() || seg[0] != "sandboxes") return c->RespondError(404, "no route for " + c->method_string() + " " + path);
  if (seg.size() == 1) {
    if (verb == http::Method::kPost) return CreateSandbox(c, caller);
    if (verb == http::Method::kGet) return ListSandboxes(c, caller, v2);
    return c->RespondError(405, "method not allowed");
  }
  const std::string& id = seg[1];
  // Every route under /sandboxes/{id} acts on one sandbox: another team's is
  // answered exactly as one that does not exist.
  if (!CallerOwns(caller, OwnedKind::kSandbox, id)) return c->RespondError(404, "sandbox " + id + " not found");
  if (seg.size() == 2) {
    if (verb == http::Method::kGet && !v2) return GetSandbox(c, id);
    if (verb == http::Method::kDelete && !v2) return KillSandbox(c, id);
    return c->RespondError(405, "method not allowed");
  }
  if (seg.size() == 3) {
    const std::string& action = seg[2];
    if (action == "timeout" && verb == http::Method::kPost) return SetTimeout(c, id);
    if ((action == "connect" || action == "resume") && verb == http::Method::kPost) return ConnectSandbox(c, id);
    if (action == "metrics" && verb == http::Method::kGet) return Metrics(c, id);
    if (action == "logs" && verb == http::Method::kGet) return Logs(c, id, v2);
    if (action == "network" && verb == http::Method::kPut && !v2) return UpdateNetwork(c, id);
    if (action == "pause" && verb == http::Method::kPost) return PauseSandbox(c, id);
    if (action == "fork" && verb == http::Method::kPost) return ForkSandbox(c, id, caller);
    if (action == "audit" && verb == http::Method::kGet) return SandboxAudit(c, id);
    if (action == "snapshots" && verb == http::Method::kPost) return CreateSnapshot(c, id);
  }
  c->RespondError(404, "no route for " + c->method_string() + " " + path);
}

bool Server::CallerOwns(const Caller& caller, OwnedKind kind, const std::string& id) {
  if (caller.admin) return true;
  auto owner = registry_->OwnerOf(kind, id);
  if (!owner.ok()) {
    LOG_WARN("owner of {}: {}", id, owner.status().message());
    return false;
  }
  return caller.Owns(*owner);
}

void Server::CreateSandbox(std::shared_ptr<HttpConn> c, const Caller& caller) {
  ReadJson(c, [this, c, caller](json body) {
    CreateOptions opts;
    opts.detach = true;
    opts.vcpus = config_.default_vcpus;
    opts.memory_mib = config_.default_memory_mib;
    if (auto it = body.find("templateID"); it != body.end() && !it->is_null()) {
      if (!it->is_string() || it->get<std::string>().empty()) return c->RespondError(400, "templateID must be a string");
      opts.template_name = it->get<std::string>();
      // A named snapshot is a template of its team only.
      std::string snap = manager_->FindNamedSnapshot(opts.template_name);
      if (!snap.empty() && !CallerOwns(caller, OwnedKind::kSnapshot, snap.substr(snap.rfind('/') + 1))) {
        return c->RespondError(404, "template " + opts.template_name + " not found");
      }
    }
    auto timeout = OptionalSeconds(body, "timeout");
    if (!timeout.ok()) return c->RespondError(400, timeout.status().message());
    auto metadata = StringMap(body, "metadata");
    if (!metadata.ok()) return c->RespondError(400, metadata.status().message());
    auto envs = StringMap(body, "envVars");
    if (!envs.ok()) return c->RespondError(400, envs.status().message());
    opts.env_vars = *envs;
    auto policy = PolicyFromCreateBody(body);
    if (!policy.ok()) return c->RespondError(400, policy.status().message());
    opts.egress_policy = *policy;
    auto lifecycle = ParseLifecycle(body);
    if (!lifecycle.ok()) return c->RespondError(400, lifecycle.status().message());
    auto public_traffic = ParseAllowPublicTraffic(body);
    if (!public_traffic.ok()) return c->RespondError(400, public_traffic.status().message());
    auto mask_host = ParseMaskRequestHost(body);
    if (!mask_host.ok()) return c->RespondError(400, mask_host.status().message());
    int template_disk_mib = 0;
    if (auto img = image::FindImage(config_.manager.state_dir, opts.template_name); img.ok()) {
      struct stat st;
      if (::stat(img->rootfs.c_str(), &st) == 0) template_disk_mib = static_cast<int>(st.st_size >> 20);
    }
    if (Status st = ApplyResourceRequest(body, &opts, template_disk_mib); !st.ok()) return c->RespondError(400, st.message());
    int ttl = ClampTimeout(timeout->value_or(config_.default_timeout_s));
    auto meta = std::move(metadata).value();
    json secrets_spec = body.contains("secrets") ? body["secrets"] : json();
    // E2B's Secret.fill placeholders in envVars name secrets too.
    auto lifted = LiftSecretPlaceholders(&opts.env_vars, secrets_spec);
    if (!lifted.ok()) return c->RespondError(400, lifted.status().message());
    secrets_spec = std::move(lifted).value();
    if (secrets_spec.is_object() && secrets_spec.empty()) secrets_spec = json();
    if (auto parsed = ParseSecretsSpec(secrets_spec); !parsed.ok()) return c->RespondError(400, parsed.status().message());
    std::string key_id = caller.key_id;
    Admit(c, key_id, opts.memory_mib,
          [this, c, opts, ttl, meta, secrets_spec, key_id, caller, lifecycle = *lifecycle,
           public_traffic = *public_traffic, mask_host = *mask_host](uint64_t ticket) {
      auto t0 = std::chrono::steady_clock::now();
      CreateOptions run_opts = opts;  // + secret env vars, never persisted
      auto attached = AttachSecrets(secrets_spec, caller, &run_opts);
      if (!attached.ok()) {
        AdmissionDone(ticket, "", 0);
        Status st = attached.status();
        return asio::post(c->executor(), [c, st] { c->RespondError(HttpStatusFor(st), st.message()); });
      }
      auto sb = manager_->Create(run_opts);
      if (!sb.ok()) {
        LOG_WARN("create failed: {}", sb.status().message());
        Status st = sb.status();
        Audit({{"action", "sandbox.create_failed"}, {"error", st.message()}});
        AdmissionDone(ticket, "", 0);
        return asio::post(c->executor(), [c, st] { c->RespondError(HttpStatusFor(st), st.message()); });
      }
      if (Status ca = InstallSandboxCa(**sb, run_opts.egress_policy, &attached.value()); !ca.ok()) {
        (void)manager_->Destroy((*sb)->id());
        AdmissionDone(ticket, "", 0);
        return asio::post(c->executor(), [c, ca] { c->RespondError(500, ca.message()); });
      }
      SandboxRecord r;
      r.id = (*sb)->id();
      r.template_id = opts.template_name;
      r.state = "running";
      r.created_at_ms = NowUnixMs();
      r.ends_at_ms = r.created_at_ms + int64_t{ttl} * 1000;
      r.metadata = meta;
      r.env_vars = opts.env_vars;
      r.access_token = (*sb)->access_token();
      if (!public_traffic) r.traffic_token = RandomHex(32);
      r.mask_request_host = mask_host;
      r.vcpus = opts.vcpus;
      r.memory_mib = opts.memory_mib;
      r.netns_ip = (*sb)->netns_ip();
      r.vmm_pid = (*sb)->vmm_pid();
      r.run_dir = (*sb)->run_dir();
      r.auto_pause = lifecycle.auto_pause;
      r.auto_pause_memory = lifecycle.auto_pause_memory;
      r.auto_resume = lifecycle.auto_resume;
      r.owner = caller.team;
      if (Status st = registry_->SetOwner(OwnedKind::kSandbox, r.id, r.owner); !st.ok()) {
        // A sandbox nobody can be shown to own is not handed out.
        LOG_WARN("sandbox={} owner: {}", r.id, st.message());
        ForgetSecrets(r.id);
        (void)manager_->Destroy(r.id);
        AdmissionDone(ticket, "", 0);
        return asio::post(c->executor(), [c, st] { c->RespondError(500, st.message()); });
      }
      if (Status st = registry_->PutSandbox(r); !st.ok()) LOG_WARN("sandbox={} registry: {}", r.id, st.message());
      CommitSecrets(r.id, std::move(attached).value(), key_id);
      int disk_mib = 0;
      if (auto img = image::FindImage(config_.manager.state_dir, r.template_id); img.ok()) {
        struct stat st;
        if (::stat(img->rootfs.c_str(), &st) == 0) disk_mib = static_cast<int>(st.st_size >> 20);
      }
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      AdmissionDone(ticket, r.id, ms / 1000.0);  // before a kill can see it
      {
        std::lock_guard<std::mutex> l(mu_);
        Entry e{r, *sb, disk_mib, {}, {}};
        e.logs.push_back({r.created_at_ms, "info", "sandbox created in " + std::to_string(static_cast<int>(ms)) + " ms"});
        sandboxes_[r.id] = std::move(e);
      }
      LOG_INFO("sandbox={} created total_ms={:.0f} ttl_s={}", r.id, ms, ttl);
      if (!(*sb)->timings().from_snapshot) EnsureTemplateSnapshotAsync(r.template_id, r.vcpus, r.memory_mib);
      Audit({{"action", "sandbox.created"}, {"sandbox", r.id}, {"template", r.template_id}, {"vcpus", r.vcpus},
             {"memory_mib", r.memory_mib}, {"ttl_s", ttl}, {"create_ms", static_cast<int64_t>(ms)}});
      std::string out = SandboxJson(r).dump();
      asio::post(c->executor(), [c, out] { c->Respond(201, "application/json", out); });
    });
  });
}

void Server::ListSandboxes(std::shared_ptr<HttpConn> c, const Caller& caller, bool v2) {
  std::map<std::string, std::string> meta;
  if (auto m = c->Query("metadata"); m && !m->empty()) meta = ParseMetadataFilter(*m);
  bool want_running = true, want_paused = true;
  if (auto st = c->Query("state"); st && !st->empty()) {
    want_running = ("," + *st + ",").find(",running,") != std::string::npos;
    want_paused = ("," + *st + ",").find(",paused,") != std::string::npos;
  }
  std::string tmpl = c->Query("template").value_or("");
  bool asc = c->Query("order").value_or("desc") == "asc";
  int limit = 100;
  if (auto l = c->Query("limit"); l && !l->empty()) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (*end != '\0' || v < 1) return c->RespondError(400, "limit must be a positive integer");
    limit = static_cast<int>(std::min<long>(v, 100));
  }
  std::optional<std::pair<int64_t, std::string>> after;
  if (auto t = c->Query("nextToken"); t && !t->empty()) {
    after = ParsePageToken(*t);
    if (!after) return c->RespondError(400, "invalid nextToken");
  }
  // startedAfter (E2B: at or after) and startedBefore (airlock: strictly
  // before), RFC 3339, compared on the microsecond grid.
  std::optional<int64_t> started_after_us, started_before_us;
  for (auto [name, out] : {std::pair{"startedAfter", &started_after_us}, std::pair{"startedBefore", &started_before_us}}) {
    auto v = c->Query(name);
    if (!v) continue;
    auto us = ParseRfc3339Us(*v);
    if (!us.ok()) return c->RespondError(400, std::string("invalid ") + name + ": " + us.status().message());
    *out = *us;
  }
  std::vector<std::pair<SandboxRecord, int>> rows;
  size_t total_running = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, e] : sandboxes_) {
      if (!caller.admin && e.rec.owner != caller.team) continue;  // another team's
      ++total_running;
      if (!(e.rec.state == "paused" ? want_paused : want_running)) continue;
      if (!tmpl.empty() && e.rec.template_id != tmpl) continue;
      if (started_after_us && e.rec.created_at_ms * 1000 < *started_after_us) continue;
      if (started_before_us && e.rec.created_at_ms * 1000 >= *started_before_us) continue;
      bool match = true;
      for (auto& [k, v] : meta) {
        auto it = e.rec.metadata.find(k);
        if (it == e.rec.metadata.end() || it->second != v) match = false;
      }
      if (match) rows.emplace_back(e.rec, e.disk_mib);
    }
  }
  auto key = [](const SandboxRecord& r) { return std::make_pair(r.created_at_ms, r.id); };
  std::sort(rows.begin(), rows.end(), [&](auto& a, auto& b) {
    return asc ? key(a.first) < key(b.first) : key(b.first) < key(a.first);
  });
  json arr = json::array();
  HeaderList extra = {{"X-Total-Running", std::to_string(total_running)}};
  int taken = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i].first;
    if (after && (asc ? !(key(r) > *after) : !(key(r) < *after))) continue;
    if (taken == limit) {
      const auto& last = rows[i - 1].first;
      extra.push_back({"X-Next-Token", std::to_string(last.created_at_ms) + "_" + last.id});
      break;
    }
    arr.push_back(ListedJson(r, rows[i].second, false));
    ++taken;
  }
  (void)v2;
  c->Respond(200, "application/json", arr.dump(), extra);
}

void Server::GetSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
  json detail = ListedJson(it->second.rec, it->second.disk_mib, true);
  AddEgressFields(manager_->egress(), id, detail);
  AddSecretFields(id, detail);
  c->Respond(200, "application/json", detail.dump());
}

void Server::KillSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!sandboxes_.count(id)) return c->RespondError(404, "sandbox " + id + " not found");
    sandboxes_.erase(id);
  }
  DropStreams(id);
  LOG_INFO("sandbox={} kill requested", id);
  asio::post(*workers_, [this, c, id] {
    ForgetSecrets(id);
    Status st = manager_->Destroy(id);
    (void)registry_->DeleteSandbox(id);
    SandboxReleased(id);
    asio::post(c->executor(), [c, st, id] {
      if (!st.ok() && st.code() != StatusCode::kNotFound) LOG_WARN("sandbox={} destroy: {}", id, st.message());
      c->Respond(204, "", "");
    });
  });
}

void Server::SetTimeout(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto t = OptionalSeconds(body, "timeout");
    if (!t.ok()) return c->RespondError(400, t.status().message());
    if (!*t) return c->RespondError(400, "timeout is required");
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(**t)} * 1000;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      it->second.rec.ends_at_ms = ends;
      if (it->second.logs.size() >= kMaxLogs) it->second.logs.pop_front();
      it->second.logs.push_back({NowUnixMs(), "info", "timeout set to " + std::to_string(**t) + " s"});
    }
    asio::post(*workers_, [this, c, id, ends] {
      (void)registry_->SetEndsAt(id, ends);
      asio::post(c->executor(), [c] { c->Respond(204, "", ""); });
    });
  });
}

void Server::ConnectSandbox(std::shared_ptr<HttpConn> c, const std::string& id) {
  ReadJson(c, [this, c, id](json body) {
    auto t = OptionalSeconds(body, "timeout");
    if (!t.ok()) return c->RespondError(400, t.status().message());
    int64_t ends = NowUnixMs() + int64_t{ClampTimeout(t->value_or(config_.default_timeout_s))} * 1000;
    SandboxRecord rec;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = sandboxes_.find(id);
      if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
      if (it->second.rec.state == "paused") return ResumeSandbox(c, id, ends);
      // A running sandbox's TTL is only ever extended (spec §1.5.6).
      if (ends > it->second.rec.ends_at_ms) it->second.rec.ends_at_ms = ends;
      rec = it->second.rec;
    }
    asio::post(*workers_, [this, c, rec] {
      (void)registry_->SetEndsAt(rec.id, rec.ends_at_ms);
      std::string out = SandboxJson(rec).dump();
      asio::post(c->executor(), [c, out] { c->Respond(200, "application/json", out); });
    });
  });
}

void Server::Logs(std::shared_ptr<HttpConn> c, const std::string& id, bool v2) {
  int64_t from = 0;
  if (auto s = c->Query(v2 ? "cursor" : "start"); s && !s->empty()) from = std::strtoll(s->c_str(), nullptr, 10);
  size_t limit = 1000;
  if (auto s = c->Query("limit"); s && !s->empty()) limit = std::strtoul(s->c_str(), nullptr, 10);
  json entries = json::array(), lines = json::array();
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) return c->RespondError(404, "sandbox " + id + " not found");
    for (const auto& e : it->second.logs) {
      if (e.ts_ms < from || entries.size() >= limit) continue;
      entries.push_back({{"timestamp", FormatRfc3339Ms(e.ts_ms)}, {"level", e.level}, {"message", e.message},
                         {"fields", json::object()}});
      lines.push_back({{"timestamp", FormatRfc3339Ms(e.ts_ms)}, {"line", e.message}});
    }
  }
  for (auto& e : EgressLogEntries(id, from)) {
    if (entries.size() >= limit) break;
    lines.push_back({{"timestamp", e["timestamp"]}, {"line", e["message"]}});
    entries.push_back(std::move(e));
  }
  json out = v2 ? json{{"logs", entries}} : json{{"logs", lines}, {"logEntries", entries}};
  c->Respond(200, "application/json", out.dump());
}

}  // namespace airlock::server
