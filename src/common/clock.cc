#include "common/clock.h"
#include "common/civil_date.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace airlock {

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatRfc3339Ms(int64_t unix_ms) {
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return buf;
}

std::string NowRfc3339Ms() { return FormatRfc3339Ms(NowUnixMs()); }

namespace {

// Reads exactly `n` decimal digits at *pos; -1 when they are not all digits.
int Digits(std::string_view s, size_t* pos, size_t n) {
  if (*pos + n > s.size()) return -1;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[*pos + i];
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  *pos += n;
  return v;
}

bool Expect(std::string_view s, size_t* pos, char a, char b = 0) {
  if (*pos >= s.size() || (s[*pos] != a && (b == 0 || s[*pos] != b))) return false;
  ++*pos;
  return true;
}


}  // namespace

StatusOr<int64_t> ParseRfc3339Us(std::string_view s) {
  const char* kShape = "must be an RFC 3339 date-time such as 2026-01-02T03:04:05Z";
  size_t p = 0;
  int year = Digits(s, &p, 4);
  if (year < 0 || !Expect(s, &p, '-')) return InvalidArgument(kShape);
  int month = Digits(s, &p, 2);
  if (month < 0 || !Expect(s, &p, '-')) return InvalidArgument(kShape);
  int day = Digits(s, &p, 2);
  if (day < 0 || !Expect(s, &p, 'T', 't')) return InvalidArgument(kShape);
  int hour = Digits(s, &p, 2);
  if (hour < 0 || !Expect(s, &p, ':')) return InvalidArgument(kShape);
  int minute = Digits(s, &p, 2);
  if (minute < 0 || !Expect(s, &p, ':')) return InvalidArgument(kShape);
  int second = Digits(s, &p, 2);
  if (second < 0) return InvalidArgument(kShape);
  int64_t micros = 0;
  if (p < s.size() && s[p] == '.') {
    ++p;
    size_t digits = 0;
    while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
      if (digits < 6) micros = micros * 10 + (s[p] - '0');
      ++digits;
      ++p;
    }
    if (digits == 0) return InvalidArgument("a '.' must be followed by the fraction's digits");
    for (size_t i = digits; i < 6; ++i) micros *= 10;
  }
  int offset_s = 0;
  if (p < s.size() && (s[p] == 'Z' || s[p] == 'z')) {
    ++p;
  } else if (p < s.size() && (s[p] == '+' || s[p] == '-' || s[p] == ' ')) {
    int sign = s[p] == '-' ? -1 : 1;
    ++p;
    int oh = Digits(s, &p, 2);
    if (oh < 0 || !Expect(s, &p, ':')) return InvalidArgument(kShape);
    int om = Digits(s, &p, 2);
    if (om < 0) return InvalidArgument(kShape);
    if (oh > 23 || om > 59) return InvalidArgument("time zone offset out of range");
    offset_s = sign * (oh * 3600 + om * 60);
  } else {
    return InvalidArgument("needs a time zone: Z or an offset such as +02:00");
  }
  if (p != s.size()) return InvalidArgument(kShape);
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month < 1 || month > 12) return InvalidArgument("month out of range");
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  int mdays = kDays[month - 1] + (month == 2 && leap ? 1 : 0);
  if (day < 1 || day > mdays) return InvalidArgument("day out of range");
  if (hour > 23) return InvalidArgument("hour out of range");
  if (minute > 59) return InvalidArgument("minute out of range");
  if (second > 59) return InvalidArgument("second out of range");
  int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  int64_t secs = days * 86400 + hour * 3600 + minute * 60 + second - offset_s;
  return secs * 1000000 + micros;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace airlock
