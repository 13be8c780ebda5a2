// Wall-clock helpers shared by the daemon's modules: Unix milliseconds and
// RFC 3339 UTC timestamps with milliseconds ("2026-11-30T09:12:03.123Z"),
// the form of every JSON timestamp airlock writes (API, audit, egress
// records; spec: "date-time" parsed by JS `new Date()`).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace airlock {

int64_t NowUnixMs();
std::string FormatRfc3339Ms(int64_t unix_ms);
std::string NowRfc3339Ms();
// Milliseconds of the steady clock since `t0` (fractional).
double MsSince(std::chrono::steady_clock::time_point t0);

// Parses an RFC 3339 date-time into Unix microseconds (E2B's server compares
// timestamps on a microsecond grid): "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)",
// 'T'/'t' and 'Z'/'z' either case, a fraction of one or more digits
// (digits past the sixth are dropped, not rounded, as Go truncates), seconds 00..59 (Go's time.Parse, which
// E2B uses, refuses a leap second too). A space where the offset's '+'
// belongs is taken as '+' (an unescaped '+' in a query string decodes to a
// space). Errors: InvalidArgument saying what is wrong, without the input.
StatusOr<int64_t> ParseRfc3339Us(std::string_view text);

}  // namespace airlock
