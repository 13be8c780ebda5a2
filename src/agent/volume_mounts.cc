#include "agent/volume_mounts.h"

#include <arpa/inet.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <fstream>
#include <sstream>

#include "agent/fs_util.h"
#include "agent/log.h"
#include "common/file_util.h"

namespace airlock::agent {

namespace {

bool ValidGuestPath(const std::string& p) {
  if (p.size() < 2 || p.size() > 255 || p[0] != '/' || p.back() == '/') return false;
  std::stringstream ss(p.substr(1));
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return p.find('\0') == std::string::npos;
}

// The NFS mounts of the guest: mount point -> "<server>:<export>"
// (/proc/self/mountinfo: field 5 the mount point, after " - " the type and
// the source; the last mount on a point wins).
std::map<std::string, std::string> NfsMounts() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::map<std::string, std::string> out;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream rest(line.substr(dash + 3));
    std::string type, source;
    rest >> type >> source;
    if (type == "nfs" || type == "nfs4") {
      out[point] = source;
    } else {
      out.erase(point);
    }
  }
  return out;
}

// mkdir -p, then a directory of its own at `path` (not a link to one).
Status MakeMountPoint(const std::string& path) {
  RETURN_IF_ERROR(MakeDirs(path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return ErrnoError("stat " + path);
  if (!S_ISDIR(st.st_mode)) return FailedPrecondition(path + " is not a directory");
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<NfsMount>> ParseNfsMounts(const nlohmann::json& value) {
  std::vector<NfsMount> out;
  if (value.is_null()) return out;
  if (!value.is_array()) return InvalidArgument("volumeMounts must be an array");
  for (const auto& e : value) {
    NfsMount m;
    if (!e.is_object()) return InvalidArgument("volumeMounts: each entry must be an object");
    auto str = [&e](const char* k) { return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : ""; };
    m.path = str("path");
    m.server = str("server");
    m.exp = str("export");
    if (!ValidGuestPath(m.path)) return InvalidArgument("volumeMounts: invalid path '" + m.path + "'");
    in_addr a{};
    if (::inet_pton(AF_INET, m.server.c_str(), &a) != 1) {
      return InvalidArgument("volumeMounts: server must be an IPv4 address");
    }
    if (!ValidGuestPath(m.exp)) return InvalidArgument("volumeMounts: invalid export '" + m.exp + "'");
    for (auto [key, port] : {std::pair{"port", &m.port}, std::pair{"mountPort", &m.mount_port}}) {
      if (!e.contains(key)) continue;
      if (!e[key].is_number_unsigned() || e[key].get<uint64_t>() == 0 || e[key].get<uint64_t>() > 65535) {
        return InvalidArgument(std::string("volumeMounts: ") + key + " must be 1..65535");
      }
      *port = static_cast<uint16_t>(e[key].get<uint64_t>());
    }
    out.push_back(std::move(m));
  }
  if (out.size() > 16) return InvalidArgument("volumeMounts: at most 16");
  return out;
}

std::string NfsMountOptions(const NfsMount& m) {
  return "vers=3,proto=tcp,mountproto=tcp,nolock,hard,timeo=100,retrans=3,actimeo=1,lookupcache=positive,addr=" +
         m.server + ",mountaddr=" + m.server + ",port=" + std::to_string(m.port) +
         ",mountport=" + std::to_string(m.mount_port) + ",mountvers=3";
}

Status MountNfs(const std::vector<NfsMount>& mounts) {
  std::map<std::string, std::string> have = NfsMounts();
  for (const auto& [point, source] : have) {
    bool wanted = false;
    for (const NfsMount& m : mounts) wanted = wanted || (m.path == point && m.server + ":" + m.exp == source);
    const bool ours = source.rfind("169.254.0.22:", 0) == 0;
    if (!wanted && ours) {
      if (::umount2(point.c_str(), MNT_DETACH) != 0) LogError("detach %s: %s", point.c_str(), std::strerror(errno));
    }
  }
  have = NfsMounts();
  for (const NfsMount& m : mounts) {
    const std::string source = m.server + ":" + m.exp;
    if (auto it = have.find(m.path); it != have.end() && it->second == source) continue;
    if (Status st = MakeMountPoint(m.path); !st.ok()) return st;
    std::string opts = NfsMountOptions(m);
    if (::mount(source.c_str(), m.path.c_str(), "nfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) {
      return ErrnoError("mount volume at " + m.path);
    }
    LogInfo("mounted %s at %s", source.c_str(), m.path.c_str());
  }
  return OkStatus();
}

}  // namespace airlock::agent
