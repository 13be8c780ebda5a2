// Leveled logging for airlock's static guest binaries (the agent, the code
// interpreter's server; no spdlog there): one line per message on stderr,
// "<program>: <level>: <message>". stderr is the serial console for the
// agent (PID 1) and what the agent's service supervisor keeps for a service.
// Thread-safe: one fprintf per line. Messages longer than 2 KiB are cut.
#pragma once

namespace airlock::guest_log {

// `program` must outlive every later call (a string literal).
void Configure(const char* program, bool verbose);
void LogInfo(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void LogError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Only when configured verbose.
void LogDebug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace airlock::guest_log
