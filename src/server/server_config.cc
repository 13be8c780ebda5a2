#include "server/server_config.h"

#include <algorithm>

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

}  // namespace airlock::server
