// TemplateApi (template_api.h): the custom-templates routes, the signed
// upload URL of COPY archives (no API key: the URL carries an HMAC), the
// upload TTL's sweep. The route table, with each route's audit action, is
// routes.h. Every SQLite call runs on the worker pool; the answer is posted back.
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/secure_equal.h"
#include "core/registry.h"
#include "core/template_runtime.h"
#include "http/url.h"
#include "image/hash.h"
#include "image/image.h"
#include "server/http_status.h"
#include "server/template_api.h"
#include "server/views.h"  // kEnvdVersion
#include "templates/build_spec.h"
#include "templates/builder.h"
#include "templates/template_store.h"
#include "templates/upload_ttl.h"

namespace airlock::server {

namespace fs = std::filesystem;
using nlohmann::json;
namespace tpl = templates;

namespace {

constexpr int64_t kUploadLinkSeconds = 30 * 60;  // as E2B's local storage
constexpr char kZeroUuid[] = "00000000-0000-0000-0000-000000000000";

// The HTTP status of a store or resolution error: the server's mapping,
// except that a state conflict is E2B's 400 ("build is not in waiting
// state"), not 409.
int StatusOf(const Status& st) {
  return st.code() == StatusCode::kFailedPrecondition ? 400 : HttpStatusFor(st);
}


std::string NewTemplateId() {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::string bytes = RandomBytes(20), out;
  for (unsigned char b : bytes) out += kAlphabet[b % 36];
  return out;
}

bool Hex64(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The size of a build's rootfs (its disk as sandboxes get it), MiB.
int64_t ImageDiskMib(const std::string& state_dir, const std::string& image_name) {
  auto img = image::FindImage(state_dir, image_name);
  struct stat st;
  if (!img.ok() || ::stat(img->rootfs.c_str(), &st) != 0) return 0;
  return static_cast<int64_t>(st.st_size >> 20);
}

json LogJson(const tpl::LogEntry& e) {
  json j = {{"timestamp", FormatRfc3339Ms(e.ts_ms)}, {"level", e.level}, {"message", e.message}};
  if (!e.step.empty()) j["step"] = e.step;
  return j;
}

}  // namespace

// One answer from a worker: status and JSON body (or an error message).
struct TemplateAnswer {
  int status = 200;
  json body;  // null: no body (Content-Length: 0)
  std::string error;
  static TemplateAnswer Error(const Status& st) { return {StatusOf(st), nullptr, st.message()}; }
};

void TemplateApi::InTemplateWorker(std::shared_ptr<HttpConn> c, std::function<TemplateAnswer()> work) {
  asio::post(deps_.workers, [c, work = std::move(work)] {
    TemplateAnswer a = work();
    asio::post(c->executor(), [c, a = std::move(a)] {
      if (!a.error.empty() || a.status >= 400) return c->RespondError(a.status, a.error);
      if (a.body.is_null()) return c->Respond(a.status, "", "");
      c->Respond(a.status, "application/json", a.body.dump());
    });
  });
}

TemplateApi::TemplateApi(Config config, Deps deps) : config_(std::move(config)), deps_(std::move(deps)) {}

TemplateApi::~TemplateApi() = default;  // builder_ (its ~Builder stops it) goes before store_

StatusOr<std::unique_ptr<TemplateApi>> TemplateApi::Open(Config config, Deps deps) {
  std::unique_ptr<TemplateApi> api(new TemplateApi(std::move(config), std::move(deps)));
  RETURN_IF_ERROR(api->Init());
  return api;
}

Status TemplateApi::Init() {
  ASSIGN_OR_RETURN(store_, tpl::TemplateStore::Open(config_.db_path));
  upload_key_ = RandomBytes(32);
  tpl::BuilderConfig bc;
  bc.state_dir = config_.state_dir;
  bc.owner = config_.owner;
  bc.max_concurrent = config_.max_builds;
  bc.timeout = std::chrono::seconds(config_.build_timeout_s);
  bc.allow = config_.build_allow;
  bc.insecure_registries = config_.insecure_registries;
  bc.registry_allow = config_.registry_allow;
  bc.max_image_unpack_bytes = config_.max_image_unpack_mib > 0 ? static_cast<uint64_t>(config_.max_image_unpack_mib) << 20 : 0;
  bc.audit = [this](const json& r) { deps_.audit(r); };
  bc.image_installed = deps_.image_installed;
  builder_ = std::make_unique<tpl::Builder>(deps_.manager, *store_, std::move(bc));
  builder_->Start();
  if (auto ready = store_->BuildsWithStatus(tpl::kReady); ready.ok()) {
    for (const auto& b : *ready) NoteTemplateImage(b.image, b.template_id);
  }
  SweepUploads();  // the first sweep of expired uploads
  return OkStatus();
}

void TemplateApi::Stop() {
  if (builder_) builder_->Stop();
}

void TemplateApi::Route(std::shared_ptr<HttpConn> c, const Caller& caller, RouteId route,
                        const std::vector<std::string>& p) {
  using R = RouteId;
  switch (route) {
    case R::kRequestTemplateBuild: return RequestTemplateBuild(c, caller);
    case R::kListTemplates: return ListTemplates(c, caller);
    case R::kAssignTemplateTags: return TemplateTags(c, caller, true);
    case R::kDeleteTemplateTags: return TemplateTags(c, caller, false);
    case R::kAliasExists: return AliasExists(c, caller, p[0]);
    case R::kFilesLink: return FilesLink(c, caller, p[0], p[1]);
    case R::kStartTemplateBuild: return StartTemplateBuild(c, caller, p[0], p[1]);
    case R::kTemplateBuildStatus: return TemplateBuildStatus(c, caller, p[0], p[1]);
    case R::kListTemplateTags: return ListTemplateTags(c, caller, p[0]);
    case R::kPublishTemplate: return PublishTemplate(c, caller, p[0], false);
    case R::kPublishTemplateV2: return PublishTemplate(c, caller, p[0], true);
    case R::kGetTemplate: return GetTemplate(c, caller, p[0]);
    case R::kDeleteTemplate: return DeleteTemplate(c, caller, p[0]);
    default: return c->RespondError(404, "no route for " + c->method_string() + " " + c->path());
  }
}

void TemplateApi::NoteTemplateImage(const std::string& image, const std::string& template_id) {
  if (image.empty()) return;
  std::lock_guard<std::mutex> l(template_images_mu_);
  template_images_[image] = template_id;
}

std::string TemplateApi::DisplayTemplateId(const std::string& image) {
  std::lock_guard<std::mutex> l(template_images_mu_);
  auto it = template_images_.find(image);
  return it == template_images_.end() ? image : it->second;
}

bool TemplateApi::IsTemplateOwner(const Caller& caller, const tpl::TemplateRow& t) {
  return caller.admin || t.team == caller.team;
}

std::string TemplateApi::UploadToken(const std::string& team, const std::string& hash, int64_t expires) const {
  const std::string msg = team + std::string(1, '\0') + hash + std::string(1, '\0') + std::to_string(expires);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), upload_key_.data(), static_cast<int>(upload_key_.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  return HexEncode(std::string(reinterpret_cast<char*>(mac), len));
}

void TemplateApi::DeleteTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref) {
  auto self = this;
  asio::post(deps_.workers, [self, c, caller, ref] {
    auto t = tpl::ResolveTemplate(*self->store_, ref, caller.team, caller.admin);
    if (!t.ok()) {
      if (self->deps_.named_snapshot(ref, caller.team, caller.admin).empty()) {
        return asio::post(c->executor(), [c, ref] { c->RespondError(404, "template '" + ref + "' not found"); });
      }
      return asio::post(c->executor(), [self, c, caller, ref] { self->deps_.delete_snapshot(c, ref, caller); });
    }
    TemplateAnswer a;
    if (!self->IsTemplateOwner(caller, t->tmpl)) {
      a = TemplateAnswer{403, nullptr, "template '" + ref + "' is not yours"};
    } else {
      self->builder_->CancelTemplate(t->tmpl.id);
      auto builds = self->store_->DeleteTemplate(t->tmpl.id);
      if (!builds.ok()) {
        a = TemplateAnswer::Error(builds.status());
      } else {
        for (const auto& b : *builds) {
          if (!b.image.empty()) (void)image::RemoveTemplateImage(self->config_.state_dir, b.image);
        }
        self->builder_->CollectGarbage();
        image::CollectGarbage(self->config_.state_dir);
        self->deps_.audit({{"action", "template.deleted"}, {"template", t->tmpl.id}, {"team", t->tmpl.team}});
        a = TemplateAnswer{204, nullptr, ""};
      }
    }
    asio::post(c->executor(), [c, a] {
      if (!a.error.empty()) return c->RespondError(a.status, a.error);
      c->Respond(a.status, "", "");
    });
  });
}

void TemplateApi::RequestTemplateBuild(std::shared_ptr<HttpConn> c, const Caller& caller) {
  deps_.read_json(c, [this, c, caller](json body) {
    std::string name;
    if (body.contains("name") && body["name"].is_string()) name = body["name"].get<std::string>();
    else if (body.contains("alias") && body["alias"].is_string()) name = body["alias"].get<std::string>();
    if (name.empty()) return c->RespondError(400, "\"name\" is required");
    auto parsed = tpl::ParseName(name);
    if (!parsed.ok()) return c->RespondError(400, parsed.status().message());
    if (!parsed->ns.empty() && parsed->ns != caller.team)
      return c->RespondError(400, "Invalid name: namespace '" + parsed->ns + "' is not your team's");
    if (parsed->tag.size() == 36 && tpl::IsUuid(parsed->tag))
      return c->RespondError(400, "Invalid name: a tag cannot be a UUID");
    for (const auto& builtin : image::KnownTemplates()) {
      if (parsed->alias == builtin || image::CanonicalTemplateName(parsed->alias) == builtin)
        return c->RespondError(409, "Alias '" + parsed->alias + "' is already used");
    }
    // "base-gvisor" and the like: a built-in template on another runtime.
    if (ParseTemplateRuntime(parsed->alias, kDefaultRuntime).runtime_in_name)
      return c->RespondError(409, "Alias '" + parsed->alias + "' is already used (a built-in template on a runtime)");
    std::vector<std::string> tags;
    if (!parsed->tag.empty()) tags.push_back(parsed->tag);
    if (auto t = body.find("tags"); t != body.end() && !t->is_null()) {
      if (!t->is_array()) return c->RespondError(400, "\"tags\" must be an array of strings");
      for (const auto& x : *t) {
        if (!x.is_string()) return c->RespondError(400, "\"tags\" must be an array of strings");
        std::string tag = x.get<std::string>();
        if (tag == "default") continue;
        if (Status st = tpl::ValidateTag(tag); !st.ok()) return c->RespondError(400, st.message());
        tags.push_back(tag);
      }
    }
    auto int_field = [&](const char* k, int def) -> StatusOr<int> {
      auto it = body.find(k);
      if (it == body.end() || it->is_null()) return def;
      if (!it->is_number_integer()) return InvalidArgument(std::string("\"") + k + "\" must be an integer");
      return it->get<int>();
    };
    auto cpu = int_field("cpuCount", 2);
    auto mem = int_field("memoryMB", 1024);
    auto disk = int_field("minFreeDiskMb", 0);
    for (auto* r : {&cpu, &mem, &disk}) {
      if (!r->ok()) return c->RespondError(400, r->status().message());
    }
    if (*cpu < 1 || (*cpu != 1 && *cpu % 2 != 0) || *cpu > config_.max_vcpus)
      return c->RespondError(400, "cpuCount must be 1 or even, at most " + std::to_string(config_.max_vcpus));
    if (*mem < 128 || *mem % 2 != 0 || *mem > config_.max_memory_mib)
      return c->RespondError(400, "memoryMB must be even, 128.." + std::to_string(config_.max_memory_mib));
    if (*disk < 0 || *disk > config_.max_disk_mib) return c->RespondError(400, "minFreeDiskMb is out of range");
    const std::string alias = parsed->alias;
    InTemplateWorker(c, [this, caller, alias, tags, cpu = *cpu, mem = *mem, disk = *disk]() -> TemplateAnswer {
      // One namespace per team for its templates and its snapshots: a create
      // by this name must not mean two things.
      if (!deps_.named_snapshot(alias, caller.team, false).empty())
        return {409, nullptr, "Alias '" + alias + "' is already used by a snapshot of your team"};
      auto r = store_->RequestBuild(caller.team, alias, tags, cpu, mem, disk, NewTemplateId());
      if (!r.ok()) return TemplateAnswer::Error(r.status());
      deps_.audit({{"action", "template.build_requested"},
             {"template", r->template_id},
             {"build", r->build_id},
             {"alias", alias},
             {"team", caller.team},
             {"key", caller.key_id}});
      return {202,
              json{{"templateID", r->template_id},
                   {"buildID", r->build_id},
                   {"aliases", {alias}},
                   {"names", {caller.team + "/" + alias}},
                   {"tags", r->tags},
                   {"public", r->is_public}},
              ""};
    });
  });
}

void TemplateApi::FilesLink(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                       const std::string& hash) {
  if (!Hex64(hash)) return c->RespondError(400, "Invalid files hash");
  std::string base = config_.public_url;
  if (base.empty()) {
    std::string host = c->Header("Host");
    if (host.empty() || host.find_first_of(" /\\\r\n") != std::string::npos) host = config_.listen;
    base = "http://" + host;
  }
  InTemplateWorker(c, [this, caller, template_id, hash, base]() -> TemplateAnswer {
    auto t = store_->GetTemplate(template_id);
    if (!t.ok() || !IsTemplateOwner(caller, *t)) return {404, nullptr, "template '" + template_id + "' not found"};
    // Present: its row and its file (gone after the upload TTL); the TTL starts again.
    bool present = store_->FindFile(t->team, hash).ok();
    if (present) (void)store_->TouchFile(t->team, hash, NowUnixMs());
    const int64_t expires = NowUnixMs() / 1000 + kUploadLinkSeconds;
    std::string url = base + "/upload/" + hash + "?team=" + http::UrlEncodeComponent(t->team) +
                      "&expires=" + std::to_string(expires) +
                      "&token=" + UploadToken(t->team, hash, expires);
    return {201, json{{"present", present}, {"url", url}}, ""};
  });
}

void TemplateApi::HandleUpload(std::shared_ptr<HttpConn> c) {
  if (c->method() != http::Method::kPut) return c->RespondError(405, "method not allowed");
  const std::string path = c->path();
  const std::string hash = path.substr(std::string("/upload/").size());
  auto team_q = c->Query("team");
  auto expires_s = c->Query("expires");
  auto token = c->Query("token");
  if (!Hex64(hash) || !team_q || !expires_s || !token) return c->RespondError(400, "malformed upload URL");
  const std::string team = *team_q;
  int64_t expires = 0;
  try {
    expires = std::stoll(*expires_s);
  } catch (...) {
    return c->RespondError(400, "malformed upload URL");
  }
  const std::string want = UploadToken(team, hash, expires);
  if (!SecureEqual(*token, want))
    return c->RespondError(403, "invalid upload token");
  if (expires < NowUnixMs() / 1000) return c->RespondError(403, "the upload link expired");
  // The team's disk budget first (on a worker: it may measure), then the body.
  asio::post(deps_.workers, [this, c, team, hash] {
    Status budget = deps_.check_team_disk(team);
    const int64_t left = deps_.team_disk ? deps_.team_disk->RemainingBytes(team) : INT64_MAX;
    asio::post(c->executor(), [this, c, team, hash, budget, left] {
      if (!budget.ok()) return c->RespondError(507, budget.message());
      ReceiveUpload(c, team, hash, left);
    });
  });
}

void TemplateApi::ReceiveUpload(std::shared_ptr<HttpConn> c, const std::string& team, const std::string& hash,
                           int64_t budget_left) {
  const uint64_t max = static_cast<uint64_t>(config_.max_upload_mib) << 20;
  if (c->content_length() && *c->content_length() > max)
    return c->RespondError(413, "upload larger than " + std::to_string(config_.max_upload_mib) + " MiB");
  // What the team may still write: more than that is 507, as soon as it shows.
  const uint64_t left = static_cast<uint64_t>(std::max<int64_t>(budget_left, 0));
  const std::string over_budget = "team " + team + " would exceed its " +
                                  std::to_string(deps_.team_disk ? deps_.team_disk->budget_mib() : 0) +
                                  " MiB disk budget (uploads, layers, images, checkpoints, paused and named "
                                  "snapshots; serve --team-disk-budget) with this upload";
  if (c->content_length() && *c->content_length() > left) return c->RespondError(507, over_budget);
  const std::string dest = tpl::FilesPathOf(config_.state_dir, team, hash);
  std::error_code ec;
  fs::create_directories(fs::path(dest).parent_path(), ec);
  if (ec) return c->RespondError(500, "mkdir: " + ec.message());
  const std::string tmp = dest + ".tmp-" + RandomHex(6);
  auto out = std::make_shared<std::ofstream>(tmp, std::ios::binary | std::ios::trunc);
  if (!*out) return c->RespondError(500, "cannot write " + tmp);
  auto size = std::make_shared<uint64_t>(0);
  c->ReadBody(
      [out, size, max, left, over_budget](std::string_view chunk) -> Status {
        *size += chunk.size();
        if (*size > max) return ResourceExhausted("upload too large");
        if (*size > left) return ResourceExhausted(over_budget);
        out->write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
        if (!*out) return ResourceExhausted("write failed (disk full?)");
        return OkStatus();
      },
      [this, c, out, size, tmp, dest, team, hash, max](Status st) {
        out->close();
        if (st.ok() && !*out) st = ResourceExhausted("write failed (disk full?)");
        if (!st.ok()) {
          ::unlink(tmp.c_str());
          if (st.code() == StatusCode::kUnavailable) return;  // the client went away
          int code = st.code() != StatusCode::kResourceExhausted ? HttpStatusFor(st) : *size > max ? 413 : 507;
          return c->RespondError(code, st.message());
        }
        InTemplateWorker(c, [this, tmp, dest, team, hash, size]() -> TemplateAnswer {
          std::lock_guard<std::mutex> l(upload_mu_);  // not while the TTL's sweep runs
          if (::rename(tmp.c_str(), dest.c_str()) != 0) {
            ::unlink(tmp.c_str());
            return TemplateAnswer::Error(ErrnoError("rename " + tmp));
          }
          if (Status p = store_->PutFile(team, hash, dest, static_cast<int64_t>(*size)); !p.ok())
            return TemplateAnswer::Error(p);
          if (deps_.team_disk) deps_.team_disk->Invalidate();
          deps_.audit({{"action", "template.files_uploaded"}, {"team", team}, {"hash", hash}, {"bytes", *size}});
          return {200, nullptr, ""};
        });
      });
}

void TemplateApi::StartTemplateBuild(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                                const std::string& build_id) {
  deps_.read_json(c, [this, c, caller, template_id, build_id](json body) {
    if (!tpl::IsUuid(build_id)) return c->RespondError(400, "build id must be a UUID");
    auto spec = tpl::ParseBuildStart(body);
    if (!spec.ok()) return c->RespondError(400, spec.status().message());
    InTemplateWorker(c, [this, caller, template_id, build_id, body]() -> TemplateAnswer {
      auto t = store_->GetTemplate(template_id);
      if (!t.ok()) return {404, nullptr, "template '" + template_id + "' not found"};
      if (!IsTemplateOwner(caller, *t)) return {403, nullptr, "template '" + template_id + "' is not yours"};
      auto b = store_->GetBuild(build_id);
      if (!b.ok() || b->template_id != template_id) return {404, nullptr, "build '" + build_id + "' not found"};
      if (Status st = deps_.check_team_disk(t->team); !st.ok()) return {507, nullptr, st.message()};
      if (Status st = store_->StartBuild(build_id, body); !st.ok()) return {400, nullptr, st.message()};
      if (Status st = builder_->Enqueue(build_id); !st.ok()) return TemplateAnswer::Error(st);
      deps_.audit({{"action", "template.build_started"}, {"template", template_id}, {"build", build_id}, {"key", caller.key_id}});
      return {202, nullptr, ""};
    });
  });
}

void TemplateApi::TemplateBuildStatus(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& template_id,
                                 const std::string& build_id) {
  int64_t offset = 0, limit = 100;
  if (auto o = c->Query("logsOffset")) {
    try {
      offset = std::stoll(*o);
    } catch (...) {
      return c->RespondError(400, "logsOffset must be a non-negative integer");
    }
    if (offset < 0) return c->RespondError(400, "logsOffset must be a non-negative integer");
  }
  if (auto l = c->Query("limit")) {
    try {
      limit = std::clamp<int64_t>(std::stoll(*l), 0, 100);
    } catch (...) {
      return c->RespondError(400, "limit must be an integer");
    }
  }
  InTemplateWorker(c, [this, caller, template_id, build_id, offset, limit]() -> TemplateAnswer {
    auto t = store_->GetTemplate(template_id);
    if (!t.ok() || !IsTemplateOwner(caller, *t)) return {404, nullptr, "template '" + template_id + "' not found"};
    auto b = store_->GetBuild(build_id);
    if (!b.ok() || b->template_id != template_id) return {400, nullptr, "Build '" + build_id + "' not found"};
    auto logs = store_->Logs(build_id, offset, limit);
    if (!logs.ok()) return TemplateAnswer::Error(logs.status());
    json entries = json::array();
    for (const auto& e : *logs) entries.push_back(LogJson(e));
    json out = {{"buildID", build_id},
                {"templateID", template_id},
                {"status", b->status},
                {"logs", json::array()},
                {"logEntries", entries}};
    if (b->status == tpl::kError) {
      json reason = b->reason.is_object() ? b->reason : json{{"message", "Unknown error"}};
      if (reason.contains("step") && reason["step"].is_string() && reason["step"].get<std::string>().empty())
        reason.erase("step");
      json mine = json::array();
      for (const auto& e : *logs) {
        if ((e.level == "warn" || e.level == "error") && reason.contains("step") && e.step == reason["step"])
          mine.push_back(LogJson(e));
      }
      reason["logEntries"] = mine;
      out["reason"] = reason;
    }
    return {200, out, ""};
  });
}

void TemplateApi::AliasExists(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref) {
  InTemplateWorker(c, [this, caller, ref]() -> TemplateAnswer {
    auto name = tpl::ParseName(ref);
    if (!name.ok()) return {400, nullptr, name.status().message()};
    // A built-in template ("base", "code-interpreter-v1", "base-gvisor"):
    // public, as E2B answers for its own (Template.exists('base') is true),
    // once its image is built; its only tag is "default".
    if (name->ns.empty() && IsBuiltInTemplateName(name->alias)) {
      const std::string image =
          image::CanonicalTemplateName(ParseTemplateRuntime(name->alias, kDefaultRuntime).image_template);
      if (!image::FindImage(config_.state_dir, image).ok() || (!name->tag.empty() && name->tag != "default"))
        return {404, nullptr, "template '" + ref + "' not found"};
      return {200, json{{"templateID", image}, {"public", true}}, ""};
    }
    // The caller's team's namespace ("team/alias": that team's); another
    // team's private alias is not there (404, its existence not revealed).
    auto id = store_->FindAlias(name->ns.empty() ? caller.team : name->ns, name->alias);
    if (!id.ok()) return {404, nullptr, "template '" + ref + "' not found"};
    auto t = store_->GetTemplate(*id);
    if (!t.ok()) return {404, nullptr, "template '" + ref + "' not found"};
    if (!IsTemplateOwner(caller, *t) && !t->is_public) return {404, nullptr, "template '" + ref + "' not found"};
    if (!name->tag.empty() && !store_->ResolveTag(t->id, name->tag).ok())
      return {404, nullptr, "tag '" + name->tag + "' does not exist for template '" + name->alias + "'"};
    return {200, json{{"templateID", t->id}, {"public", t->is_public}}, ""};
  });
}

void TemplateApi::TemplateTags(std::shared_ptr<HttpConn> c, const Caller& caller, bool assign) {
  deps_.read_json(c, [this, c, caller, assign](json body) {
    std::vector<std::string> tags;
    if (auto t = body.find("tags"); t != body.end() && t->is_array()) {
      for (const auto& x : *t) {
        if (!x.is_string()) return c->RespondError(400, "\"tags\" must be an array of strings");
        tags.push_back(x.get<std::string>());
      }
    }
    if (tags.empty()) return c->RespondError(400, "\"tags\" must not be empty");
    for (const auto& tag : tags) {
      if (Status st = tpl::ValidateTag(tag); !st.ok()) return c->RespondError(400, st.message());
      if (!assign && tag == "default") return c->RespondError(400, "the tag 'default' cannot be removed");
    }
    const std::string ref = body.value(assign ? "target" : "name", std::string());
    if (ref.empty()) return c->RespondError(400, assign ? "\"target\" is required" : "\"name\" is required");
    InTemplateWorker(c, [this, caller, assign, tags, ref]() -> TemplateAnswer {
      auto name = tpl::ParseName(ref);
      if (!name.ok()) return {400, nullptr, name.status().message()};
      if (!assign && !name->tag.empty()) return {400, nullptr, "\"name\" must not carry a tag"};
      auto r = assign ? tpl::ResolveBuild(*store_, ref, caller.team, caller.admin)
                      : tpl::ResolveTemplate(*store_, ref, caller.team, caller.admin);
      if (!r.ok()) return TemplateAnswer::Error(r.status());
      if (!IsTemplateOwner(caller, r->tmpl)) return {403, nullptr, "template '" + ref + "' is not yours"};
      if (assign) {
        if (Status st = store_->AssignTags(r->tmpl.id, r->build.id, tags); !st.ok())
          return TemplateAnswer::Error(st);
        deps_.audit({{"action", "template.tags_assigned"}, {"template", r->tmpl.id}, {"build", r->build.id}, {"tags", tags}});
        return {201, json{{"buildID", r->build.id}, {"tags", tags}}, ""};
      }
      if (Status st = store_->RemoveTags(r->tmpl.id, tags); !st.ok()) return TemplateAnswer::Error(st);
      deps_.audit({{"action", "template.tags_removed"}, {"template", r->tmpl.id}, {"tags", tags}});
      return {204, nullptr, ""};
    });
  });
}

void TemplateApi::ListTemplateTags(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref) {
  InTemplateWorker(c, [this, caller, ref]() -> TemplateAnswer {
    auto r = tpl::ResolveTemplate(*store_, ref, caller.team, caller.admin);
    if (!r.ok()) return TemplateAnswer::Error(r.status());
    auto tags = store_->TagsOf(r->tmpl.id);
    if (!tags.ok()) return TemplateAnswer::Error(tags.status());
    json out = json::array();
    for (const auto& t : *tags)
      out.push_back({{"tag", t.tag}, {"buildID", t.build_id}, {"createdAt", FormatRfc3339Ms(t.created_at_ms)}});
    return {200, out, ""};
  });
}

json TemplateApi::TemplateJson(const tpl::TemplateRow& t, bool with_builds) {
  auto builds = store_->BuildsOf(t.id);
  std::vector<tpl::BuildRow> all = builds.ok() ? *builds : std::vector<tpl::BuildRow>{};
  auto ready = store_->ResolveTag(t.id, "");
  std::string latest_status = tpl::kWaiting;
  for (const auto& b : all) {
    if (std::find(b.requested_tags.begin(), b.requested_tags.end(), "default") != b.requested_tags.end())
      latest_status = b.status;
  }
  json names = json::array();
  for (const auto& a : t.aliases) names.push_back(t.team + "/" + a);
  json j = {{"templateID", t.id},
            {"buildID", ready.ok() ? ready->id : std::string(kZeroUuid)},
            {"buildStatus", latest_status},
            {"cpuCount", ready.ok() ? ready->cpu_count : 0},
            {"memoryMB", ready.ok() ? ready->memory_mb : 0},
            {"diskSizeMB", ready.ok() ? ImageDiskMib(config_.state_dir, ready->image) : 0},
            {"envdVersion", ready.ok() ? kEnvdVersion : ""},
            {"aliases", t.aliases},
            {"names", names},
            {"public", t.is_public},
            {"createdAt", FormatRfc3339Ms(t.created_at_ms)},
            {"updatedAt", FormatRfc3339Ms(t.updated_at_ms)},
            {"lastSpawnedAt", t.last_spawned_at_ms ? json(FormatRfc3339Ms(t.last_spawned_at_ms)) : json(nullptr)},
            {"spawnCount", t.spawn_count},
            {"buildCount", static_cast<int64_t>(all.size())},
            {"createdBy", nullptr}};
  if (with_builds) {
    json list = json::array();
    for (const auto& b : all) {
      json e = {{"buildID", b.id},
                {"status", b.status},
                {"cpuCount", b.cpu_count},
                {"memoryMB", b.memory_mb},
                {"diskSizeMB", b.status == tpl::kReady ? ImageDiskMib(config_.state_dir, b.image) : 0},
                {"envdVersion", kEnvdVersion},
                {"createdAt", FormatRfc3339Ms(b.created_at_ms)},
                {"updatedAt", FormatRfc3339Ms(b.updated_at_ms)}};
      if (b.finished_at_ms) e["finishedAt"] = FormatRfc3339Ms(b.finished_at_ms);
      list.push_back(e);
    }
    j["builds"] = list;
  }
  return j;
}

void TemplateApi::ListTemplates(std::shared_ptr<HttpConn> c, const Caller& caller) {
  if (auto team = c->Query("teamID"); team && !team->empty() && *team != caller.team && !caller.admin)
    return c->RespondError(400, "teamID does not match the API key's team");
  InTemplateWorker(c, [this, caller]() -> TemplateAnswer {
    auto list = store_->ListTemplates(caller.team, caller.admin);
    if (!list.ok()) return TemplateAnswer::Error(list.status());
    json out = json::array();
    for (const auto& t : *list) out.push_back(TemplateJson(t, false));
    return {200, out, ""};
  });
}

void TemplateApi::GetTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref) {
  InTemplateWorker(c, [this, caller, ref]() -> TemplateAnswer {
    auto r = tpl::ResolveTemplate(*store_, ref, caller.team, caller.admin);
    if (!r.ok()) return TemplateAnswer::Error(r.status());
    return {200, TemplateJson(r->tmpl, true), ""};
  });
}

void TemplateApi::PublishTemplate(std::shared_ptr<HttpConn> c, const Caller& caller, const std::string& ref, bool v2) {
  deps_.read_json(c, [this, c, caller, ref, v2](json body) {
    if (!body.contains("public") || !body["public"].is_boolean()) return c->RespondError(400, "\"public\" must be a boolean");
    bool pub = body["public"].get<bool>();
    InTemplateWorker(c, [this, caller, ref, pub, v2]() -> TemplateAnswer {
      auto r = tpl::ResolveTemplate(*store_, ref, caller.team, caller.admin);
      if (!r.ok()) return TemplateAnswer::Error(r.status());
      if (!IsTemplateOwner(caller, r->tmpl)) return {403, nullptr, "template '" + ref + "' is not yours"};
      if (Status st = store_->SetPublic(r->tmpl.id, pub); !st.ok()) return TemplateAnswer::Error(st);
      deps_.audit({{"action", "template.published"}, {"template", r->tmpl.id}, {"public", pub}});
      json names = json::array();
      for (const auto& a : r->tmpl.aliases) names.push_back(r->tmpl.team + "/" + a);
      if (!v2) return {200, nullptr, ""};
      return {200, json{{"names", names}}, ""};
    });
  });
}

std::vector<std::string> TemplateApi::CustomTemplateNames() {
  std::vector<std::string> out;
  auto rows = store_->ListTemplates("", /*all_teams=*/true);
  if (!rows.ok()) return out;
  for (const auto& t : *rows) {
    // Only what this node can start without a fetch: a ready build whose
    // image is here (a cluster's other templates are imported, not held).
    auto builds = store_->BuildsOf(t.id);
    if (!builds.ok()) continue;
    bool here = false;
    for (const auto& b : *builds) {
      here = here || (b.status == tpl::kReady && !b.image.empty() && image::FindImage(config_.state_dir, b.image).ok());
    }
    if (!here) continue;
    out.push_back(t.id);
    out.insert(out.end(), t.aliases.begin(), t.aliases.end());
  }
  return out;
}

std::vector<TeamDisk::Holding> TemplateApi::DiskHoldings() {
  std::vector<TeamDisk::Holding> out;
  if (auto files = store_->AllFileRows(); files.ok())
    for (const auto& f : *files) out.push_back({f.team, f.path});
  if (auto layers = store_->AllLayers(); layers.ok())
    for (const auto& l : *layers) out.push_back({l.team, l.dir});
  if (auto images = store_->TeamImages(); images.ok()) {
    for (const auto& [team, name] : *images) {
      if (auto img = image::FindImage(config_.state_dir, name); img.ok()) out.push_back({team, img->rootfs});
    }
  }
  return out;
}

void TemplateApi::MaybeSweepUploads() {
  if (config_.upload_ttl_s <= 0) return;
  const int64_t now = NowUnixMs();
  if (now < next_upload_sweep_ms_) return;
  // A quarter of the TTL, between 1 s and 10 min: an upload goes at most that late.
  next_upload_sweep_ms_ = now + std::clamp<int64_t>(config_.upload_ttl_s * 250, 1000, 600000);
  if (upload_sweep_in_flight_.exchange(true)) return;
  asio::post(deps_.workers, [this] {
    SweepUploads();
    upload_sweep_in_flight_ = false;
  });
}

void TemplateApi::SweepEvery(boost::asio::io_context& io, std::chrono::milliseconds period) {
  sweeps_ = std::make_unique<control::Ticker>(io, period, [this] { MaybeSweepUploads(); });
  sweeps_->Start();
}

void TemplateApi::StopSweeps() {
  if (sweeps_) sweeps_->Stop();
}

void TemplateApi::SweepUploads() {
  if (config_.upload_ttl_s <= 0) return;
  std::lock_guard<std::mutex> l(upload_mu_);
  auto sweep = tpl::CollectExpiredUploads(*store_, NowUnixMs(), config_.upload_ttl_s * 1000);
  if (sweep.removed == 0) return;
  if (deps_.team_disk) deps_.team_disk->Invalidate();
  deps_.audit({{"action", "template.uploads_expired"}, {"count", sweep.removed}, {"bytes", sweep.bytes}});
}

std::string TemplateApi::ShownTemplateId(const SandboxRecord& r) {
  const std::string runtime(deps_.manager.runtime().name());
  return DisplayTemplateId(TemplateNameOn(r.template_id, r.runtime, runtime));
}

}  // namespace airlock::server
