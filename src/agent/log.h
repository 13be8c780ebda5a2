// Minimal leveled logging for the static agent (no spdlog): one line per
// message on stderr, which is the serial console when running as PID 1.
#pragma once

namespace airlock::agent {

void SetLogVerbose(bool verbose);
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogDebug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace airlock::agent
