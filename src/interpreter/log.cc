#include "interpreter/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace airlock::interpreter {

namespace {
std::atomic<bool> g_verbose{false};

void Emit(const char* level, const char* fmt, va_list ap) {
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::fprintf(stderr, "airlock-interpreter: %s: %s\n", level, buf);
}
}  // namespace

void SetLogVerbose(bool v) { g_verbose = v; }

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

}  // namespace airlock::interpreter
