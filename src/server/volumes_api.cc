// E2B's volumes: control plane and content API (volumes_api.h).
#include "server/volumes_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/file_util.h"
#include "core/volume_fs.h"
#include "http/url.h"
#include "server/http_status.h"

namespace airlock::server {

using nlohmann::json;

namespace {

json VolumeJson(const VolumeRecord& v, bool with_token) {
  json j{{"volumeID", v.id}, {"name", v.name}, {"sizeMB", v.size_mib}, {"createdAt", FormatRfc3339Ms(v.created_at_ms)}};
  if (with_token) j["token"] = v.token;
  return j;
}

// The sandboxes (not ended) that mount volume `id`.
std::vector<std::string> MountedBy(Manager& manager, const std::string& id) {
  std::vector<std::string> out;
  for (const auto& sb : manager.List()) {
    if (sb->end()) continue;
    for (const auto& m : sb->attributes().volume_mounts) {
      if (m.volume_id == id) {
        out.push_back(sb->id());
        break;
      }
    }
  }
  return out;
}

// A uint32 query parameter: decimal, or octal with a leading 0 ("0755").
StatusOr<std::optional<uint32_t>> QueryNumber(const HttpConn& c, const std::string& name) {
  auto q = c.Query(name);
  if (!q || q->empty()) return std::optional<uint32_t>();
  const int base = q->size() > 1 && (*q)[0] == '0' ? 8 : 10;
  char* end = nullptr;
  errno = 0;
  unsigned long v = std::strtoul(q->c_str(), &end, base);
  if (errno != 0 || *end != '\0' || v > 0xffffffffUL || (*q)[0] == '-') {
    return InvalidArgument(name + " must be a non-negative integer");
  }
  return std::optional<uint32_t>(static_cast<uint32_t>(v));
}

StatusOr<VolumeFs::Owner> OwnerFrom(const HttpConn& c) {
  VolumeFs::Owner o;
  ASSIGN_OR_RETURN(auto uid, QueryNumber(c, "uid"));
  ASSIGN_OR_RETURN(auto gid, QueryNumber(c, "gid"));
  ASSIGN_OR_RETURN(auto mode, QueryNumber(c, "mode"));
  if (uid) o.uid = *uid;
  if (gid) o.gid = *gid;
  if (mode) {
    if (*mode > 07777) return InvalidArgument("mode must be at most 07777");
    o.mode = *mode;
  }
  return o;
}

bool QueryTrue(const HttpConn& c, const std::string& name) {
  auto q = c.Query(name);
  return q && (*q == "true" || *q == "1");
}

int StatusFor(const Status& st) { return HttpStatusFor(st, HttpStatusContext::kDisk); }

// The volume's filesystem at `root`, only while it is mounted there (a
// volume deleted meanwhile is never written as a plain host directory).
StatusOr<VolumeFs> OpenVolume(const std::string& root) {
  if (!IsVolumeMounted(root)) return NotFound("the volume is gone");
  return VolumeFs::Open(root);
}

}  // namespace

void VolumesApi::HandleVolumes(std::shared_ptr<HttpConn> c, const Caller& caller,
                               const std::vector<std::string>& params) {
  if (!volumes_) return c->RespondError(501, "volumes are not enabled on this server");
  const std::string team = caller.admin ? "" : caller.team;
  auto respond = [c](int code, std::string body) {
    asio::post(c->executor(), [c, code, body = std::move(body)] {
      if (code == 204) return c->Respond(204, "", "");
      c->Respond(code, "application/json", body);
    });
  };
  auto fail = [respond](const Status& st) {
    int code = StatusFor(st);
    respond(code, JsonError(code, st.message()));
  };
  const auto verb = c->method();
  if (params.empty() && verb == http::Method::kGet) {
    return asio::post(*lookups_, [this, team, respond, fail] {
      auto all = volumes_->List(team);
      if (!all.ok()) return fail(all.status());
      json arr = json::array();
      for (const auto& v : *all) arr.push_back(VolumeJson(v, false));
      respond(200, arr.dump());
    });
  }
  if (params.empty()) {  // POST
    return ReadJson(c, [this, c, caller, respond, fail](json body) {
      if (!body.is_object() || !body.contains("name") || !body["name"].is_string()) {
        return c->RespondError(400, "name (a string) is required");
      }
      int64_t size_mib = 0;
      if (body.contains("sizeMB") && !body["sizeMB"].is_null()) {
        if (!body["sizeMB"].is_number_integer() || body["sizeMB"].get<int64_t>() <= 0) {
          return c->RespondError(400, "sizeMB must be a positive integer");
        }
        size_mib = body["sizeMB"].get<int64_t>();
      }
      asio::post(*workers_, [this, caller, name = body["name"].get<std::string>(), size_mib, respond, fail] {
        auto v = volumes_->Create(caller.team, name, size_mib);
        if (!v.ok()) return fail(v.status());
        Audit({{"action", "volume.created"}, {"team", caller.team}, {"volume", v->id}, {"name", v->name},
               {"sizeMB", v->size_mib}});
        respond(201, VolumeJson(*v, true).dump());
      });
    });
  }
  const std::string id = params[0];
  if (verb == http::Method::kGet) {
    return asio::post(*lookups_, [this, team, id, respond, fail] {
      auto v = volumes_->Find(team, id);
      if (!v.ok()) return fail(v.status());
      respond(200, VolumeJson(*v, true).dump());
    });
  }
  asio::post(*workers_, [this, team, id, respond, fail] {  // DELETE
    auto v = volumes_->Find(team, id);
    if (!v.ok()) return fail(v.status());
    if (auto users = MountedBy(*manager_, v->id); !users.empty()) {
      std::string list;
      for (const auto& u : users) list += (list.empty() ? "" : ", ") + u;
      return fail(FailedPrecondition("volume " + v->name + " is mounted by sandbox " + list +
                                     " (running or paused); kill them first"));
    }
    if (Status st = volumes_->Delete(*v); !st.ok()) return fail(st);
    Audit({{"action", "volume.deleted"}, {"team", v->team}, {"volume", v->id}, {"name", v->name}});
    respond(204, "");
  });
}

void VolumesApi::HandleContent(std::shared_ptr<HttpConn> c) {
  if (!volumes_) return c->RespondError(501, "volumes are not enabled on this server");
  // /volumecontent/{id}/{dir|path|file}
  std::vector<std::string> seg = http::PathSegments(c->path());
  if (seg.size() != 3 || (seg[2] != "dir" && seg[2] != "path" && seg[2] != "file")) {
    return c->RespondError(404, "no such route");
  }
  const std::string auth = c->Header("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.size() <= prefix.size() || auth.compare(0, prefix.size(), prefix) != 0) {
    return c->RespondError(401, "missing Authorization: Bearer <volume token>");
  }
  asio::post(*lookups_, [this, c, id = seg[1], kind = seg[2], token = auth.substr(prefix.size())] {
    auto v = volumes_->Authenticate(id, token);
    StatusOr<std::string> root = v.ok() ? volumes_->MountedRoot(*v) : StatusOr<std::string>(v.status());
    asio::post(c->executor(), [this, c, kind, root, v] {
      if (!root.ok()) return c->RespondError(StatusFor(root.status()), root.status().message());
      Content(c, kind, *v, *root);
    });
  });
}

void VolumesApi::Content(std::shared_ptr<HttpConn> c, const std::string& kind, const VolumeRecord& v,
                         const std::string& root) {
  const auto verb = c->method();
  const std::string path = c->Query("path").value_or("");
  // Every change is audited: the volume, its team, what, where.
  auto audited = [this, team = v.team, id = v.id](const char* action, std::function<void(StatusOr<json>)> done) {
    return [this, team, id, action, done](StatusOr<json> out) {
      if (out.ok()) {
        Audit({{"action", action}, {"team", team}, {"volume", id},
               {"path", out->is_object() ? out->value("path", "") : ""}});
      }
      done(std::move(out));
    };
  };
  auto answer = [c](StatusOr<json> out, int ok_code) {
    asio::post(c->executor(), [c, out = std::move(out), ok_code] {
      if (!out.ok()) return c->RespondError(StatusFor(out.status()), out.status().message());
      if (ok_code == 204) return c->Respond(204, "", "");
      c->Respond(ok_code, "application/json", out->dump(), {{"Cache-Control", "no-store"}});
    });
  };
  auto on_fs = [this, root](std::function<StatusOr<json>(const VolumeFs&)> fn,
                            std::function<void(StatusOr<json>)> done) {
    asio::post(*workers_, [root, fn = std::move(fn), done = std::move(done)] {
      auto fs = OpenVolume(root);
      if (!fs.ok()) return done(fs.status());
      done(fn(*fs));
    });
  };
  if (kind == "dir" && verb == http::Method::kGet) {
    int depth = 1;
    if (auto d = c->Query("depth"); d && !d->empty()) {
      try {
        depth = std::stoi(*d);
      } catch (...) {
        return c->RespondError(400, "depth must be an integer");
      }
    }
    return on_fs(
        [path, depth](const VolumeFs& fs) -> StatusOr<json> {
          ASSIGN_OR_RETURN(auto entries, fs.List(path, depth));
          json arr = json::array();
          for (const auto& e : entries) arr.push_back(VolumeEntryJson(e));
          return arr;
        },
        [answer](StatusOr<json> out) { answer(std::move(out), 200); });
  }
  if (kind == "dir" && verb == http::Method::kPost) {
    auto owner = OwnerFrom(*c);
    if (!owner.ok()) return c->RespondError(400, owner.status().message());
    const bool force = QueryTrue(*c, "force");
    return on_fs(
        [path, o = *owner, force](const VolumeFs& fs) -> StatusOr<json> {
          ASSIGN_OR_RETURN(auto e, fs.MakeDir(path, o, force));
          return VolumeEntryJson(e);
        },
        audited("volume.dir.created", [answer](StatusOr<json> out) { answer(std::move(out), 201); }));
  }
  if (kind == "path" && verb == http::Method::kGet) {
    return on_fs(
        [path](const VolumeFs& fs) -> StatusOr<json> {
          ASSIGN_OR_RETURN(auto e, fs.Stat(path));
          return VolumeEntryJson(e);
        },
        [answer](StatusOr<json> out) { answer(std::move(out), 200); });
  }
  if (kind == "path" && verb == http::Method::kDelete) {
    return on_fs(
        [path](const VolumeFs& fs) -> StatusOr<json> {
          RETURN_IF_ERROR(fs.Remove(path));
          return json{{"path", path}};
        },
        audited("volume.path.removed", [answer](StatusOr<json> out) { answer(std::move(out), 204); }));
  }
  if (kind == "path" && verb == http::Method::kPatch) {
    return ReadJson(c, [c, path, on_fs, answer, audited](json body) {
      std::optional<uint32_t> uid, gid, mode;
      for (auto [key, out] : {std::pair{"uid", &uid}, std::pair{"gid", &gid}, std::pair{"mode", &mode}}) {
        if (!body.is_object() || !body.contains(key) || body[key].is_null()) continue;
        if (!body[key].is_number_unsigned() || body[key].get<uint64_t>() > 0xffffffffULL) {
          return c->RespondError(400, std::string(key) + " must be a non-negative integer");
        }
        *out = static_cast<uint32_t>(body[key].get<uint64_t>());
      }
      on_fs(
          [path, uid, gid, mode](const VolumeFs& fs) -> StatusOr<json> {
            ASSIGN_OR_RETURN(auto e, fs.Update(path, uid, gid, mode));
            return VolumeEntryJson(e);
          },
          audited("volume.path.updated", [answer](StatusOr<json> out) { answer(std::move(out), 200); }));
    });
  }
  if (kind == "file" && verb == http::Method::kGet) return ReadFile(c, root, path);
  if (kind == "file" && verb == http::Method::kPut) return WriteFile(c, v, root, path);
  c->RespondError(405, "method not allowed");
}

void VolumesApi::WriteFile(std::shared_ptr<HttpConn> c, const VolumeRecord& v, const std::string& root,
                           const std::string& path) {
  auto owner = OwnerFrom(*c);
  if (!owner.ok()) return c->RespondError(400, owner.status().message());
  const bool force = QueryTrue(*c, "force");
  asio::post(*workers_, [this, c, root, path, o = *owner, force, team = v.team, id = v.id] {
    auto fs = OpenVolume(root);
    StatusOr<UniqueFd> fd = fs.ok() ? fs->CreateFile(path, o, force) : StatusOr<UniqueFd>(fs.status());
    auto file = std::make_shared<UniqueFd>(fd.ok() ? std::move(fd).value() : UniqueFd());
    Status opened = fd.ok() ? OkStatus() : fd.status();
    asio::post(c->executor(), [this, c, root, path, file, opened, team, id] {
      if (!opened.ok()) return c->RespondError(StatusFor(opened), opened.message());
      auto bytes = std::make_shared<uint64_t>(0);
      c->ReadBody(
          [file, bytes](std::string_view chunk) -> Status {
            *bytes += chunk.size();
            if (WriteAllRaw(file->get(), chunk.data(), chunk.size()) != 0) {
              if (errno == ENOSPC || errno == EDQUOT) return ResourceExhausted("the volume is full");
              return ErrnoError("write");
            }
            return OkStatus();
          },
          [this, c, root, path, file, bytes, team, id](Status st) {
            if (!st.ok()) {
              // Nothing half-written is left (a full volume, a client gone).
              asio::post(*workers_, [root, path] {
                if (auto fs = OpenVolume(root); fs.ok()) (void)fs->Remove(path);
              });
              if (st.code() == StatusCode::kUnavailable) return;  // the client went away
              return c->RespondError(StatusFor(st), st.message());
            }
            asio::post(*workers_, [this, c, root, path, file, bytes, team, id] {
              auto fs = OpenVolume(root);
              StatusOr<VolumeEntry> e = fs.ok() ? fs->FinishFile(path, file->get()) : StatusOr<VolumeEntry>(fs.status());
              if (e.ok()) {
                Audit({{"action", "volume.file.written"}, {"team", team}, {"volume", id}, {"path", e->path},
                       {"bytes", *bytes}});
              }
              asio::post(c->executor(), [c, e] {
                if (!e.ok()) return c->RespondError(StatusFor(e.status()), e.status().message());
                c->Respond(200, "application/json", VolumeEntryJson(*e).dump(), {{"Cache-Control", "no-store"}});
              });
            });
          });
    });
  });
}

void VolumesApi::ReadFile(std::shared_ptr<HttpConn> c, const std::string& root, const std::string& path) {
  asio::post(*workers_, [this, c, root, path] {
    auto fs = OpenVolume(root);
    StatusOr<UniqueFd> fd = fs.ok() ? fs->OpenRead(path) : StatusOr<UniqueFd>(fs.status());
    struct stat st {};
    if (fd.ok() && ::fstat(fd->get(), &st) != 0) fd = ErrnoError("stat");
    Status opened = fd.ok() ? OkStatus() : fd.status();
    auto file = std::make_shared<UniqueFd>(fd.ok() ? std::move(fd).value() : UniqueFd());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    asio::post(c->executor(), [c, file, opened, size] {
      if (!opened.ok()) return c->RespondError(StatusFor(opened), opened.message());
      // The tenant's bytes on our origin: never a page (docs/security.md).
      c->BeginResponse(200, "application/octet-stream", size,
                       {{"Content-Disposition", "attachment"},
                        {"X-Content-Type-Options", "nosniff"},
                        {"Cache-Control", "no-store"}});
      auto sent = std::make_shared<uint64_t>(0);
      auto pump = std::make_shared<std::function<void()>>();
      std::weak_ptr<std::function<void()>> weak = pump;  // the drain callback holds it
      *pump = [c, file, sent, size, weak] {
        std::string buf(64 * 1024, '\0');
        while (*sent < size && c->pending_bytes() < HttpConn::kLowWatermark && !c->closed()) {
          ssize_t n = ::pread(file->get(), buf.data(), std::min<uint64_t>(buf.size(), size - *sent),
                              static_cast<off_t>(*sent));
          if (n <= 0) {  // shrunk or failed under us: the length cannot be kept
            c->SetOnDrain(nullptr);
            return c->Abort();
          }
          *sent += static_cast<uint64_t>(n);
          c->Write(std::string_view(buf.data(), static_cast<size_t>(n)));
        }
        if (*sent >= size) {
          c->SetOnDrain(nullptr);
          c->EndResponse();
        } else if (auto self = weak.lock(); self && !c->closed()) {
          c->SetOnDrain([self] { (*self)(); });
        }
      };
      (*pump)();
    });
  });
}

}  // namespace airlock::server
