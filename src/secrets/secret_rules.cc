#include "secrets/secret_rules.h"

#include <algorithm>
#include <cctype>

#include "secrets/spec.h"

namespace airlock::secrets {

using nlohmann::json;

namespace {

constexpr size_t kMaxMetadataEntries = 32, kMaxMetadataKey = 128, kMaxMetadataValue = 1024, kMaxMetadataTotal = 8192;

std::vector<std::string> SplitList(const std::string& v) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= v.size()) {
    size_t c = v.find(',', i);
    if (c == std::string::npos) c = v.size();
    std::string item = v.substr(i, c - i);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
    i = c + 1;
  }
  return out;
}

}  // namespace

StatusOr<std::string> NormalizeSecretName(const std::string& input) {
  std::string name = input;
  name.erase(0, name.find_first_not_of(" \t\r\n"));
  name.erase(name.find_last_not_of(" \t\r\n") + 1);
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '-';
  for (char& c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (!ok) return InvalidArgument("secret name must be 1 to 128 characters of [A-Za-z0-9_-], not starting with '-'");
  if (name.rfind("sec_", 0) == 0)
    return InvalidArgument("secret names may not start with sec_ (reserved for secret ids)");
  return name;
}

StatusOr<std::map<std::string, std::string>> ParseSecretMetadata(const json& body) {
  std::map<std::string, std::string> out;
  auto it = body.find("metadata");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_object()) return InvalidArgument("metadata must be an object of strings");
  if (it->size() > kMaxMetadataEntries) return InvalidArgument("metadata has more than 32 entries");
  size_t total = 0;
  for (auto& [k, v] : it->items()) {
    if (!v.is_string()) return InvalidArgument("metadata." + k.substr(0, 128) + " must be a string");
    const std::string& s = v.get_ref<const std::string&>();
    if (k.empty() || k.size() > kMaxMetadataKey) return InvalidArgument("metadata keys must be 1 to 128 bytes");
    if (s.size() > kMaxMetadataValue) return InvalidArgument("metadata." + k + " is longer than 1024 bytes");
    total += k.size() + s.size();
    out[k] = s;
  }
  if (total > kMaxMetadataTotal) return InvalidArgument("metadata is larger than 8192 bytes in total");
  return out;
}

StatusOr<SecretPolicy> PolicyFromSecretMetadata(const std::map<std::string, std::string>& metadata,
                                                         const std::string& owner_team) {
  SecretPolicy p;
  p.teams.push_back(owner_team);
  std::string scope;
  for (const auto& [k, v] : metadata) {
    if (k.rfind("airlock.", 0) != 0) continue;
    if (k == "airlock.scope") {
      scope = v;
      if (scope != "env" && scope != "brokered")
        return InvalidArgument("metadata.airlock.scope must be env or brokered");
    } else if (k == "airlock.hosts") {
      p.hosts = SplitList(v);
      if (p.hosts.empty()) return InvalidArgument("metadata.airlock.hosts names no host");
      if (p.hosts.size() > 32) return InvalidArgument("metadata.airlock.hosts: at most 32 hosts");
    } else if (k == "airlock.teams") {
      for (const auto& t : SplitList(v)) {
        if (t.size() > 64 || t.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
                                 std::string::npos) {
          return InvalidArgument("metadata.airlock.teams: team names are 1 to 64 characters of [A-Za-z0-9_.-]");
        }
        if (std::find(p.teams.begin(), p.teams.end(), t) == p.teams.end()) p.teams.push_back(t);
      }
    } else {
      return InvalidArgument("metadata." + k + ": unknown airlock key (airlock.scope, airlock.hosts, airlock.teams)");
    }
  }
  if (scope.empty()) scope = p.hosts.empty() ? "env" : "brokered";
  p.scope = scope == "env" ? Scope::kEnv : Scope::kBrokered;
  if (p.scope == Scope::kEnv && !p.hosts.empty()) {
    return InvalidArgument("metadata.airlock.hosts only applies to airlock.scope brokered");
  }
  if (p.scope == Scope::kBrokered) {
    if (p.hosts.empty()) return InvalidArgument("metadata.airlock.scope brokered needs airlock.hosts");
    // The same host syntax a create request is held to.
    json probe = {{"probe", {{"scope", "brokered"}, {"hosts", p.hosts}}}};
    if (auto parsed = ParseSecretsSpec(probe); !parsed.ok()) {
      return InvalidArgument("metadata.airlock.hosts: " + parsed.status().message());
    }
  }
  return p;
}

}  // namespace airlock::secrets
