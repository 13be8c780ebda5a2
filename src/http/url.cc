#include "http/url.h"

#include <utility>

namespace airlock::http {
namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

}  // namespace

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2])));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view qs) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i <= qs.size()) {
    size_t amp = qs.find('&', i);
    if (amp == std::string_view::npos) amp = qs.size();
    std::string_view kv = qs.substr(i, amp - i);
    if (!kv.empty()) {
      size_t eq = kv.find('=');
      std::string k = UrlDecode(kv.substr(0, eq), true);
      std::string v = eq == std::string_view::npos ? "" : UrlDecode(kv.substr(eq + 1), true);
      out.emplace(std::move(k), std::move(v));
    }
    i = amp + 1;
  }
  return out;
}

std::pair<std::string, std::string_view> SplitTarget(std::string_view target) {
  size_t q = target.find('?');
  std::string path = UrlDecode(target.substr(0, q), false);
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  return {std::move(path), query};
}

std::string UrlEncodeComponent(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (Unreserved(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::vector<std::string> PathSegments(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    out.emplace_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace airlock::http
