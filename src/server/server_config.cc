#include "server/server_config.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/registry.h"

namespace airlock::server {

int ClampTimeout(const ServerConfig& config, int64_t seconds) {
  return static_cast<int>(std::clamp<int64_t>(seconds, 0, config.max_timeout_s));
}

image::MachineShape ClampedShape(const ServerConfig& config, const image::MachineShape& own) {
  if (own.vcpus <= 0 || own.memory_mib <= 0) return {config.default_vcpus, config.default_memory_mib};
  return {std::min(own.vcpus, config.max_vcpus), std::min(own.memory_mib, config.max_memory_mib)};
}

image::MachineShape DefaultShapeFor(const ServerConfig& config, const std::string& template_name) {
  return ClampedShape(config, image::DefaultShapeOf(template_name, config.manager.state_dir)
                                  .value_or(image::MachineShape{}));
}

StatusOr<std::map<std::string, int, std::less<>>> ParseTeamMaxLifetimes(const std::vector<std::string>& values) {
  std::map<std::string, int, std::less<>> out;
  for (const std::string& v : values) {
    auto bad = [&](const std::string& why) {
      return InvalidArgument("--team-max-lifetime '" + v + "': " + why + " (expected TEAM=SECONDS, e.g. team-a=86400)");
    };
    const size_t eq = v.find('=');
    if (eq == std::string::npos) return bad("no '='");
    const std::string team = v.substr(0, eq);
    const std::string_view secs = std::string_view(v).substr(eq + 1);
    if (!IsTeamName(team)) return bad("the team must be 1..64 characters of [A-Za-z0-9_.-]");
    int n = 0;
    auto [end, ec] = std::from_chars(secs.data(), secs.data() + secs.size(), n);
    if (secs.empty() || secs.find_first_not_of("0123456789") != std::string_view::npos || ec != std::errc() ||
        end != secs.data() + secs.size())
      return bad("the seconds must be an integer 0.." + std::to_string(std::numeric_limits<int>::max()));
    if (!out.emplace(team, n).second) return bad("team " + team + " is given twice");
  }
  return out;
}

}  // namespace airlock::server
