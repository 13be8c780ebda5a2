// Structured, leveled logging (spdlog). Lines read "key=value" after the
// message; every line about a sandbox carries sandbox=<id>. Level from
// AIRLOCK_LOG (trace|debug|info|warn|error), default warn for the CLI.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace airlock {

void InitLogging(const std::string& default_level = "warn");

}  // namespace airlock

#define LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)
