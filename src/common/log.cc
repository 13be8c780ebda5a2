#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

namespace airlock {

void InitLogging(const std::string& default_level) {
  const char* env = std::getenv("AIRLOCK_LOG");
  auto level = spdlog::level::from_str(env ? env : default_level);
  auto logger = spdlog::stderr_color_mt("airlock");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace airlock
