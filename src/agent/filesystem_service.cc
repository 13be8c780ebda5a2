// filesystem.Filesystem RPCs (spec §3.3). Each runs with the requesting
// user's permissions (as_user.h): EACCES/EPERM are permission_denied.
// WatchDir and the polled watcher trio are watch_service.cc.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "agent/agent.h"
#include "agent/as_user.h"
#include "agent/fs_util.h"
#include "agent/paths.h"
#include "agent/rpc.h"
#include "agent/watch_service.h"

namespace airlock::agent {
namespace {

constexpr size_t kMaxListEntries = 100000;

Status ListInto(const std::string& dir, uint32_t depth, const UserDb& users, envd::OJson* out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return ErrnoError("open directory " + dir);
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    std::string n = ent->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    if (out->size() >= kMaxListEntries) return ResourceExhausted("directory listing exceeds 100000 entries");
    std::string child = dir == "/" ? "/" + n : dir + "/" + n;
    auto e = StatEntry(child, users);
    if (!e.ok()) continue;  // removed while listing
    bool is_dir = e->type == envd::FileType::kDirectory;
    out->push_back(envd::ToJson(*e));
    if (is_dir && depth > 1) {
      Status st = ListInto(child, depth - 1, users, out);
      if (!st.ok() && st.code() == StatusCode::kResourceExhausted) return st;
      // An unreadable subdirectory is listed itself, without children.
    }
  }
  return OkStatus();
}

StatusOr<envd::OJson> RpcStat(const UserDb& users, const User& user, const envd::Json& j) {
  ASSIGN_OR_RETURN(std::string raw, envd::PathRequestFromJson(j));
  ASSIGN_OR_RETURN(std::string path, ResolvePath(raw, user.home));
  auto e = StatEntry(path, users);
  if (!e.ok()) {
    if (e.status().code() == StatusCode::kNotFound) return NotFound("path '" + path + "' does not exist");
    return e.status();
  }
  envd::OJson out = envd::OJson::object();
  out["entry"] = envd::ToJson(*e);
  return out;
}

StatusOr<envd::OJson> RpcListDir(const UserDb& users, const User& user, const envd::Json& j) {
  ASSIGN_OR_RETURN(auto req, envd::ListDirRequestFromJson(j));
  ASSIGN_OR_RETURN(std::string path, ResolvePath(req.path, user.home));
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound("directory '" + path + "' does not exist");
    return ErrnoError("stat " + path);
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("path '" + path + "' is not a directory");
  envd::OJson entries = envd::OJson::array();
  RETURN_IF_ERROR(ListInto(path, req.depth == 0 ? 1 : req.depth, users, &entries));
  envd::OJson out = envd::OJson::object();
  out["entries"] = std::move(entries);
  return out;
}

StatusOr<envd::OJson> RpcMakeDir(const UserDb& users, const User& user, const envd::Json& j) {
  ASSIGN_OR_RETURN(std::string raw, envd::PathRequestFromJson(j));
  ASSIGN_OR_RETURN(std::string path, ResolvePath(raw, user.home));
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return AlreadyExists("directory '" + path + "' already exists");
    return InvalidArgument("path '" + path + "' already exists and is not a directory");
  }
  RETURN_IF_ERROR(MakeDirs(path));
  ASSIGN_OR_RETURN(auto e, StatEntry(path, users));
  envd::OJson out = envd::OJson::object();
  out["entry"] = envd::ToJson(e);
  return out;
}

StatusOr<envd::OJson> RpcRemove(const UserDb&, const User& user, const envd::Json& j) {
  ASSIGN_OR_RETURN(std::string raw, envd::PathRequestFromJson(j));
  ASSIGN_OR_RETURN(std::string path, ResolvePath(raw, user.home));
  RETURN_IF_ERROR(RemoveAll(path));
  return envd::OJson::object();
}

StatusOr<envd::OJson> RpcMove(const UserDb& users, const User& user, const envd::Json& j) {
  ASSIGN_OR_RETURN(auto req, envd::MoveRequestFromJson(j));
  ASSIGN_OR_RETURN(std::string src, ResolvePath(req.source, user.home));
  ASSIGN_OR_RETURN(std::string dst, ResolvePath(req.destination, user.home));
  struct stat st;
  if (lstat(src.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound("path '" + src + "' does not exist");
    return ErrnoError("stat " + src);
  }
  RETURN_IF_ERROR(MakeDirs(ParentPath(dst)));
  if (rename(src.c_str(), dst.c_str()) != 0) return ErrnoError("rename " + src + " to " + dst);
  ASSIGN_OR_RETURN(auto e, StatEntry(dst, users));
  envd::OJson out = envd::OJson::object();
  out["entry"] = envd::ToJson(e);
  return out;
}

using FsFn = StatusOr<envd::OJson> (*)(const UserDb&, const User&, const envd::Json&);

}  // namespace

void HandleFilesystemRpc(Agent& agent, std::shared_ptr<http::Conn> s, const std::string& method) {
  if (HandleWatchRpc(agent, s, method)) return;
  FsFn fn = method == "Stat"      ? RpcStat
            : method == "ListDir" ? RpcListDir
            : method == "MakeDir" ? RpcMakeDir
            : method == "Remove"  ? RpcRemove
            : method == "Move"    ? RpcMove
                                  : nullptr;
  if (!fn) {
    Status st = Unimplemented("filesystem.Filesystem/" + method + " is not implemented");
    if (IsStreamRequest(*s)) return RespondStreamStatus(*s, st);
    return RespondUnaryError(*s, st);
  }
  auto user = agent.UserFromAuthHeader(*s);
  ServeUnary(s, [&agent, fn, user](const envd::Json& j) -> StatusOr<envd::OJson> {
    if (!user.ok()) return user.status();
    UserDb users = agent.LoadUsers();  // read as the agent, before switching
    return RunAsUser<envd::OJson>(*user, agent.can_switch_user(),
                                  [&]() -> StatusOr<envd::OJson> { return fn(users, *user, j); });
  });
}

}  // namespace airlock::agent
