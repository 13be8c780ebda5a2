// One line per message on stderr ("airlock-interpreter: <level>: ..."),
// which the agent's service supervisor keeps. Thread-safe (one fprintf).
#pragma once

namespace airlock::interpreter {

void SetLogVerbose(bool verbose);
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogDebug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace airlock::interpreter
