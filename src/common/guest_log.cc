#include "common/guest_log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace airlock::guest_log {

namespace {
std::atomic<const char*> g_program{"airlock"};
std::atomic<bool> g_verbose{false};

void Emit(const char* level, const char* fmt, va_list ap) {
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::fprintf(stderr, "%s: %s: %s\n", g_program.load(), level, buf);
}
}  // namespace

void Configure(const char* program, bool verbose) {
  g_program = program;
  g_verbose = verbose;
}

void LogInfo(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Emit("info", fmt, ap);
  va_end(ap);
}

void LogError(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Emit("error", fmt, ap);
  va_end(ap);
}

void LogDebug(const char* fmt, ...) {
  if (!g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  Emit("debug", fmt, ap);
  va_end(ap);
}

}  // namespace airlock::guest_log
