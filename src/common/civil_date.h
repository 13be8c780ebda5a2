// Proleptic Gregorian calendar arithmetic, header-only so that every library
// (the static guest agent's too) can use it without linking the clock.
#pragma once

#include <cstdint>

namespace airlock {

// Days since 1970-01-01 of year `y`, month `m` (1..12), day `d` (1..31);
// negative before 1970. Howard Hinnant's days_from_civil
// (howardhinnant.github.io/date_algorithms.html), exact for any int64 year.
inline int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

}  // namespace airlock
