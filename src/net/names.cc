#include "net/names.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>

namespace airlock::net {

Status ValidateSandboxId(const std::string& id) {
  if (id.empty() || id.size() > 63) return InvalidArgument("sandbox id must be 1..63 characters");
  for (size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              (i > 0 && (c == '-' || c == '_'));
    if (!ok) return InvalidArgument("sandbox id '" + id + "' has characters outside [A-Za-z0-9_-]");
  }
  return OkStatus();
}

std::string NetnsName(const std::string& sandbox_id) { return kNetnsPrefix + sandbox_id; }
std::string GuestNetnsName(const std::string& sandbox_id) { return kGuestNetnsPrefix + sandbox_id; }

std::string HostVethName(const std::string& id) {
  if (id.size() <= 12) return kHostVethPrefix + id;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(h ^ (h >> 32)));
  return kHostVethPrefix + id.substr(0, 4) + hex;
}

bool NetnsExists(const std::string& netns_name) {
  struct stat st;
  return ::stat(("/run/netns/" + netns_name).c_str(), &st) == 0;
}

}  // namespace airlock::net
