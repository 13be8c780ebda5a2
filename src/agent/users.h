// User database without NSS: static glibc's getpwnam needs NSS modules that a
// static binary cannot load, so /etc/passwd and /etc/group are parsed here.
// Malformed lines are skipped (these files are guest-controlled).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace airlock::agent {

struct User {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::string shell;
  std::vector<gid_t> groups;  // supplementary groups, primary gid first
};

class UserDb {
 public:
  // Parses the text of passwd(5) and group(5) files.
  static UserDb Parse(std::string_view passwd, std::string_view group);
  // Reads <root>/etc/passwd and <root>/etc/group ("" = "/"). A missing file
  // yields an empty table, not an error.
  static UserDb Load(const std::string& root = "");

  // not_found "user 'x' not found" (Connect maps it for the caller).
  StatusOr<User> Lookup(std::string_view name) const;
  // Name for an id, or the id as decimal when unknown (like envd).
  std::string UserName(uid_t uid) const;
  std::string GroupName(gid_t gid) const;

 private:
  struct GroupEntry {
    std::string name;
    gid_t gid = 0;
    std::vector<std::string> members;
  };
  std::vector<User> users_;
  std::vector<GroupEntry> groups_;
};

}  // namespace airlock::agent
