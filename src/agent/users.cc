#include "agent/users.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace airlock::agent {
namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    if (p == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
}

bool ParseId(std::string_view s, uint32_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename Fn>
void ForEachLine(std::string_view text, Fn fn) {
  for (std::string_view line : Split(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    fn(line);
  }
}

}  // namespace

UserDb UserDb::Parse(std::string_view passwd, std::string_view group) {
  UserDb db;
  ForEachLine(passwd, [&](std::string_view line) {
    auto f = Split(line, ':');
    if (f.size() < 7 || f[0].empty()) return;
    User u;
    uint32_t uid, gid;
    if (!ParseId(f[2], &uid) || !ParseId(f[3], &gid)) return;
    u.name = f[0];
    u.uid = uid;
    u.gid = gid;
    u.home = f[5];
    u.shell = f[6];
    db.users_.push_back(std::move(u));
  });
  ForEachLine(group, [&](std::string_view line) {
    auto f = Split(line, ':');
    if (f.size() < 4 || f[0].empty()) return;
    GroupEntry g;
    uint32_t gid;
    if (!ParseId(f[2], &gid)) return;
    g.name = f[0];
    g.gid = gid;
    if (!f[3].empty()) {
      for (auto m : Split(f[3], ',')) {
        if (!m.empty()) g.members.emplace_back(m);
      }
    }
    db.groups_.push_back(std::move(g));
  });
  return db;
}

UserDb UserDb::Load(const std::string& root) {
  return Parse(ReadFile(root + "/etc/passwd"), ReadFile(root + "/etc/group"));
}

StatusOr<User> UserDb::Lookup(std::string_view name) const {
  for (const User& u : users_) {
    if (u.name != name) continue;
    User out = u;
    out.groups.push_back(u.gid);
    for (const GroupEntry& g : groups_) {
      if (g.gid == u.gid) continue;
      for (const auto& m : g.members) {
        if (m == name) {
          out.groups.push_back(g.gid);
          break;
        }
      }
    }
    return out;
  }
  return NotFound("user '" + std::string(name) + "' not found");
}

std::string UserDb::UserName(uid_t uid) const {
  for (const User& u : users_) {
    if (u.uid == uid) return u.name;
  }
  return std::to_string(uid);
}

std::string UserDb::GroupName(gid_t gid) const {
  for (const GroupEntry& g : groups_) {
    if (g.gid == gid) return g.name;
  }
  return std::to_string(gid);
}

}  // namespace airlock::agent
