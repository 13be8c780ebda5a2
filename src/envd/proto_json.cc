#include "envd/proto_json.h"
#include "common/civil_date.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

namespace airlock::envd {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int B64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

template <typename T>
StatusOr<T> IntFromJson(const nlohmann::json& j, std::string_view what) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned()) {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
        return InvalidArgument(std::string(what) + " out of range");
      }
      return static_cast<T>(u);
    }
    int64_t v = j.get<int64_t>();
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      return InvalidArgument(std::string(what) + " out of range");
    }
    return static_cast<T>(v);
  }
  if (j.is_number_float()) {
    double d = j.get<double>();
    // max() itself is not a double for 64-bit types (it rounds up to 2^64 or
    // 2^63, whose cast back is undefined): compare against 2^digits instead.
    const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (std::trunc(d) != d || d < static_cast<double>(std::numeric_limits<T>::min()) || d >= limit) {
      return InvalidArgument(std::string(what) + " is not an integer in range");
    }
    return static_cast<T>(d);
  }
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || s.empty()) {
      return InvalidArgument(std::string(what) + ": invalid integer '" + s + "'");
    }
    return v;
  }
  return InvalidArgument(std::string(what) + " must be a number or a string");
}

template <typename E, size_t N>
StatusOr<E> EnumFromJson(const nlohmann::json& j, const std::pair<E, std::string_view> (&names)[N],
                         std::string_view what, bool open) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    for (const auto& [v, n] : names) {
      if (n == s) return v;
    }
    return InvalidArgument("unknown " + std::string(what) + " '" + s + "'");
  }
  if (j.is_number_integer()) {
    auto v = j.get<int64_t>();
    for (const auto& [e, n] : names) {
      if (static_cast<int64_t>(e) == v) return e;
    }
    if (open && v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
      return static_cast<E>(v);
    }
    return InvalidArgument("unknown " + std::string(what) + " " + std::to_string(v));
  }
  if (j.is_null()) return static_cast<E>(0);
  return InvalidArgument(std::string(what) + " must be a string or a number");
}

constexpr std::pair<FileType, std::string_view> kFileTypes[] = {
    {FileType::kUnspecified, "FILE_TYPE_UNSPECIFIED"},
    {FileType::kFile, "FILE_TYPE_FILE"},
    {FileType::kDirectory, "FILE_TYPE_DIRECTORY"},
    {FileType::kSymlink, "FILE_TYPE_SYMLINK"}};
constexpr std::pair<EventType, std::string_view> kEventTypes[] = {
    {EventType::kUnspecified, "EVENT_TYPE_UNSPECIFIED"}, {EventType::kCreate, "EVENT_TYPE_CREATE"},
    {EventType::kWrite, "EVENT_TYPE_WRITE"},             {EventType::kRemove, "EVENT_TYPE_REMOVE"},
    {EventType::kRename, "EVENT_TYPE_RENAME"},           {EventType::kChmod, "EVENT_TYPE_CHMOD"}};
constexpr std::pair<Signal, std::string_view> kSignals[] = {{Signal::kUnspecified, "SIGNAL_UNSPECIFIED"},
                                                            {Signal::kSigterm, "SIGNAL_SIGTERM"},
                                                            {Signal::kSigkill, "SIGNAL_SIGKILL"}};

template <typename E, size_t N>
std::string_view EnumName(E v, const std::pair<E, std::string_view> (&names)[N]) {
  for (const auto& [e, n] : names) {
    if (e == v) return n;
  }
  return names[0].second;
}


}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back(kB64[v & 63]);
  }
  size_t rest = in.size() - i;
  if (rest == 1) {
    uint32_t v = uint32_t{p[i]} << 16;
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.append("==");
  } else if (rest == 2) {
    uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8);
    out.push_back(kB64[v >> 18]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back('=');
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view in) {
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return InvalidArgument("base64: invalid length");
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = B64Value(c);
    if (v < 0) return InvalidArgument("base64: invalid character");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

nlohmann::json Int64ToJson(int64_t v) { return std::to_string(v); }
StatusOr<int64_t> Int64FromJson(const nlohmann::json& j) { return IntFromJson<int64_t>(j, "int64"); }
StatusOr<uint64_t> Uint64FromJson(const nlohmann::json& j) { return IntFromJson<uint64_t>(j, "uint64"); }
StatusOr<uint32_t> Uint32FromJson(const nlohmann::json& j) { return IntFromJson<uint32_t>(j, "uint32"); }
StatusOr<int32_t> Int32FromJson(const nlohmann::json& j) { return IntFromJson<int32_t>(j, "int32"); }

std::string FormatTimestamp(Timestamp ts) {
  int64_t secs = ts.seconds;
  int64_t days = secs / 86400;
  int64_t rem = secs % 86400;
  if (rem < 0) {
    rem += 86400;
    --days;
  }
  // civil_from_days
  int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t y = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "%04lld-%02u-%02uT%02lld:%02lld:%02lld",
                        static_cast<long long>(y), m, d, static_cast<long long>(rem / 3600),
                        static_cast<long long>((rem / 60) % 60), static_cast<long long>(rem % 60));
  std::string out(buf, static_cast<size_t>(n));
  int32_t ns = ts.nanos;
  if (ns > 0 && ns < 1'000'000'000) {
    if (ns % 1'000'000 == 0) {
      std::snprintf(buf, sizeof buf, ".%03d", ns / 1'000'000);
    } else if (ns % 1000 == 0) {
      std::snprintf(buf, sizeof buf, ".%06d", ns / 1000);
    } else {
      std::snprintf(buf, sizeof buf, ".%09d", ns);
    }
    out += buf;
  }
  out += 'Z';
  return out;
}

StatusOr<Timestamp> ParseTimestamp(std::string_view s) {
  auto bad = [&] { return InvalidArgument("invalid RFC 3339 timestamp '" + std::string(s) + "'"); };
  auto num = [&](size_t pos, size_t len, int64_t* out) {
    if (pos + len > s.size()) return false;
    int64_t v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int64_t y, mo, d, h, mi, se;
  if (!num(0, 4, &y) || s.size() < 20 || s[4] != '-' || !num(5, 2, &mo) || s[7] != '-' ||
      !num(8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !num(11, 2, &h) ||
      s[13] != ':' || !num(14, 2, &mi) || s[16] != ':' || !num(17, 2, &se)) {
    return bad();
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return bad();
  size_t pos = 19;
  int32_t nanos = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t digits = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (digits >= 9) return bad();
      nanos = nanos * 10 + (s[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return bad();
    for (size_t i = digits; i < 9; ++i) nanos *= 10;
  }
  int64_t offset = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int64_t oh, om;
    if (!num(pos + 1, 2, &oh) || pos + 3 >= s.size() || s[pos + 3] != ':' || !num(pos + 4, 2, &om)) {
      return bad();
    }
    offset = (oh * 3600 + om * 60) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  int64_t secs = DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 +
                 h * 3600 + mi * 60 + se - offset;
  return Timestamp{secs, nanos};
}

std::string_view FileTypeName(FileType t) { return EnumName(t, kFileTypes); }
std::string_view EventTypeName(EventType t) { return EnumName(t, kEventTypes); }
std::string_view SignalName(Signal s) {
  for (const auto& [e, n] : kSignals) {
    if (e == s) return n;
  }
  return "SIGNAL_UNSPECIFIED";
}
StatusOr<FileType> FileTypeFromJson(const nlohmann::json& j) {
  return EnumFromJson(j, kFileTypes, "file type", false);
}
StatusOr<EventType> EventTypeFromJson(const nlohmann::json& j) {
  return EnumFromJson(j, kEventTypes, "event type", false);
}
StatusOr<Signal> SignalFromJson(const nlohmann::json& j) {
  return EnumFromJson(j, kSignals, "signal", true);
}

}  // namespace airlock::envd
