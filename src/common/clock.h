// Wall-clock helpers shared by the daemon's modules: Unix milliseconds and
// RFC 3339 UTC timestamps with milliseconds ("2026-11-30T09:12:03.123Z"),
// the form of every JSON timestamp airlock writes (API, audit, egress
// records; spec: "date-time" parsed by JS `new Date()`).
#pragma once

#include <cstdint>
#include <string>

namespace airlock {

int64_t NowUnixMs();
std::string FormatRfc3339Ms(int64_t unix_ms);
std::string NowRfc3339Ms();

}  // namespace airlock
